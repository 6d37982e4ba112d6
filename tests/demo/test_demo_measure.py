"""The live run's metrics (controller/demo/measure.py) from recorded sends, deliveries and process lifetimes, and
the pieces of the live harness that need no Azurite: the worker's service-time draws, the send schedule, the log
reader. Each metric follows the simulator's definition (docs/simulator.md, "Metrics"), checked here on histories
small enough to work out by hand, and against the simulated World where the two count the same thing."""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import fields, replace
from pathlib import Path

import pytest

from controller.demo.live import read_worker_logs, send_schedule, service_time_argument, with_service_times
from controller.demo.measure import (
    Delivery,
    Lifetime,
    LiveRecord,
    SentMessage,
    measure,
    oldest_ages,
    percentile,
    service_times,
)
from controller.demo.worker import ServiceTimeError, service_time_sampler
from controller.simulator.run import Contender, Metrics, simulate
from controller.simulator.scenario import ServiceTime, parse_scenario, plan_arrivals
from controller.simulator.world import World
from tests.sim_helpers import ScaleAt

T0 = 1_000_000.0

SCENARIO = parse_scenario({
    "duration": 60, "seed": 5, "slo": {"waitSeconds": 10}, "queue": {"visibilityTimeout": "10s"},
    "workers": {"startupDelay": "2s", "serviceTime": "1s", "concurrency": 2, "maxReplicas": 4},
    "arrivals": [{"type": "burst", "at": 5, "messages": 40, "over": 4}, {"type": "poisson", "rate": 0.5}],
})
PLAN = plan_arrivals(SCENARIO)


def record(**changes: object) -> LiveRecord:
    base = LiveRecord(
        start=T0, duration=60.0, concurrency=2, visibility_timeout=10.0, ttl=None, slo_wait=10.0,
        initial_replicas=0, sent=(), deliveries=(), processes=(), scale_actions=(), ready=(), remaining=0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_the_live_metrics_are_the_simulators_metrics_key_for_key() -> None:
    metrics = measure(record(), SCENARIO, PLAN)
    assert isinstance(metrics, Metrics)
    assert set(metrics.to_json()) == {f.name for f in fields(Metrics)}


def test_worker_seconds_are_the_process_lifetimes_clipped_to_the_run() -> None:
    processes = (
        Lifetime(1, T0 - 5, T0 + 10),   # started before time 0 (an initial replica): 10 s count
        Lifetime(2, T0 + 20, T0 + 50),  # 30 s
        Lifetime(3, T0 + 55, None),     # still running at the end: 5 s
        Lifetime(4, T0 + 58, T0 + 70),  # stopped by the clean-up after the end: 2 s
    )
    metrics = measure(record(processes=processes), SCENARIO, PLAN)
    assert metrics.worker_seconds == 47.0
    assert metrics.mean_replicas == round(47 / 60, 3)


def test_waits_are_received_minus_sent_and_a_redelivery_counts_again_with_its_longer_wait() -> None:
    sent = tuple(SentMessage(n, T0 + n) for n in range(10))
    deliveries = [Delivery(n, 7, T0 + n + 0.5 * n, 1, T0 + n + 0.5 * n + 1, True) for n in range(9)]
    # Message 9: received at +10 (wait 1), killed with its process; delivered again at +25 (wait 16).
    deliveries += [Delivery(9, 8, T0 + 10, 1, None), Delivery(9, 7, T0 + 25, 2, T0 + 26, True)]
    metrics = measure(record(sent=sent, deliveries=tuple(deliveries), processes=(
        Lifetime(7, T0, T0 + 60), Lifetime(8, T0, T0 + 12))), SCENARIO, PLAN)
    waits = sorted([0.5 * n for n in range(9)] + [1.0, 16.0])
    assert metrics.wait_p50 == percentile(waits, 0.5) == 2.0
    assert metrics.wait_max == 16.0
    assert metrics.wait_p99 == 16.0
    assert metrics.duplicate_deliveries == 1
    assert metrics.messages_processed == 10
    # Busy: nine 1-second jobs, one delivery cut after 2 s when its process died, one more 1-second job; 2 slots.
    assert metrics.busy_worker_seconds == pytest.approx((9 + 2 + 1) / 2)


def test_a_message_never_received_counts_its_wait_until_it_expired_or_the_run_ended() -> None:
    # As the simulator counts them (World._drop, World.count_unserved): message 0 expires at +20 unreceived (20 s),
    # message 1 is still queued at the end (15 s so far), message 2 is not due before the end (no wait).
    sent = (SentMessage(0, T0), SentMessage(3, T0 + 10), SentMessage(1, T0 + 45), SentMessage(2, T0 + 50, 30.0))
    deliveries = (Delivery(3, 7, T0 + 12, 1, T0 + 13, True),)
    metrics = measure(record(ttl=20.0, sent=sent, deliveries=deliveries, processes=(Lifetime(7, T0, T0 + 60),)),
                      SCENARIO, PLAN)
    assert (metrics.wait_max, metrics.wait_p50, metrics.wait_mean) == (20.0, 15.0, round(37 / 3, 3))
    assert metrics.expired_messages == 1


def test_a_duplicate_after_a_scale_in_is_told_from_one_after_work_that_outlasted_its_visibility_timeout() -> None:
    sent = (SentMessage(1, T0), SentMessage(2, T0), SentMessage(3, T0))
    deliveries = (
        Delivery(1, 8, T0 + 1, 1, None),                       # killed with its process
        Delivery(1, 7, T0 + 20, 2, T0 + 21, True),
        Delivery(2, 7, T0 + 1, 1, T0 + 30, False),              # outlasted 10 s: its delete failed
        Delivery(2, 9, T0 + 12, 2, T0 + 13, True),
        Delivery(3, 9, T0 + 2, 1, None, released=T0 + 4),      # handed back as its worker stopped
        Delivery(3, 7, T0 + 5, 2, T0 + 6, True),
    )
    metrics = measure(record(sent=sent, deliveries=deliveries, processes=(
        Lifetime(7, T0, T0 + 60), Lifetime(8, T0, T0 + 3), Lifetime(9, T0, T0 + 14))), SCENARIO, PLAN)
    assert (metrics.duplicate_deliveries, metrics.scale_in_duplicates) == (3, 2)


def test_only_what_happened_within_the_duration_counts() -> None:
    sent = (SentMessage(0, T0 + 50), SentMessage(1, T0 + 59.5))
    deliveries = (Delivery(0, 7, T0 + 55, 1, T0 + 58, True), Delivery(1, 7, T0 + 59.8, 1, T0 + 61, True))
    metrics = measure(record(sent=sent, deliveries=deliveries, remaining=1,
                             scale_actions=((10.0, 0, 2), (60.0, 2, 0))), SCENARIO, PLAN)
    assert metrics.messages_arrived == 2
    assert metrics.messages_processed == 1  # the second one's delete came after the end
    assert metrics.messages_remaining == 1
    assert metrics.scale_actions == 1  # a tick at exactly the end belongs to the next run, as in the simulator
    assert metrics.busy_worker_seconds == pytest.approx((3 + 0.2) / 2)


def test_direction_reversals_are_counted_as_the_simulated_deployment_counts_them() -> None:
    actions = ((5.0, 0, 3), (10.0, 3, 5), (15.0, 5, 2), (20.0, 2, 1), (25.0, 1, 4), (30.0, 4, 0))
    world = World(SCENARIO.queue, SCENARIO.workers, [1.0], seed=1)
    for t, _, to in actions:
        world.set_desired(to, int(t))
    metrics = measure(record(scale_actions=actions), SCENARIO, PLAN)
    assert metrics.direction_reversals == world.reversals == 3
    assert metrics.scale_actions == len(world.tally.scale_actions) == 6
    assert metrics.peak_replicas == 5


def test_a_killed_delivery_makes_its_message_visible_again_after_the_visibility_timeout() -> None:
    # Sent at 0, received at 2 by a process killed at 4; visible again at 2 + 10 = 12, delivered again at 30.
    sent = (SentMessage(0, T0),)
    deliveries = (Delivery(0, 7, T0 + 2, 1, None), Delivery(0, 8, T0 + 30, 2, T0 + 31, True))
    ages = oldest_ages(record(sent=sent, deliveries=deliveries, processes=(Lifetime(7, T0, T0 + 4),)))
    assert ages[0] == 0.5 and ages[1] == 1.5  # visible (and ageing) until received at 2
    assert ages[2:12] == [0.0] * 10  # invisible: held by the first delivery's visibility timeout
    assert ages[12] == 12.5 and ages[29] == 29.5  # visible again, its age counting from its send
    assert ages[30:] == [0.0] * 30
    metrics = measure(record(sent=sent, deliveries=deliveries, processes=(Lifetime(7, T0, T0 + 4),)),
                      SCENARIO, PLAN)
    assert metrics.oldest_message_age_max == 29.5
    assert metrics.slo_violation_seconds == 18  # seconds 12 .. 29: visible, and older than the 10 s objective


def test_a_released_delivery_makes_its_message_visible_again_when_its_worker_released_it() -> None:
    # Received at 2 by a worker stopped (scaleIn release) at 4, which handed it back: visible again at 4, not 12.
    sent = (SentMessage(0, T0),)
    deliveries = (Delivery(0, 7, T0 + 2, 1, None, released=T0 + 4), Delivery(0, 8, T0 + 6, 2, T0 + 7, True))
    ages = oldest_ages(record(sent=sent, deliveries=deliveries, processes=(Lifetime(7, T0, T0 + 4),)))
    assert ages[2:4] == [0.0, 0.0]
    assert ages[4] == 4.5 and ages[5] == 5.5  # visible from the release until delivered again at 6
    assert ages[6:] == [0.0] * (len(ages) - 6)


def test_work_that_outlasts_the_visibility_timeout_leaves_its_message_visible_only_until_its_delete() -> None:
    # Received at 2, visible again at 12, deleted (successfully: no one took it meanwhile) at 15. A live ramp-kill
    # run once counted it visible until the end of the run: an oldest age of 175 s where no message waited 24 s.
    sent = (SentMessage(0, T0),)
    deliveries = (Delivery(0, 7, T0 + 2, 1, T0 + 15, True),)
    ages = oldest_ages(record(sent=sent, deliveries=deliveries))
    assert ages[2:12] == [0.0] * 10
    assert ages[12] == 12.5 and ages[14] == 14.5
    assert ages[15:] == [0.0] * 45


def test_a_delayed_message_is_not_visible_before_its_delay_and_ages_from_when_it_is_due() -> None:
    # A message sent with an initial visibility delay is scheduled, not waiting: its age counts from T0 + 6, as the
    # simulator's does (its InsertionTime is still T0 + 1: that is what Peek Messages shows a source).
    ages = oldest_ages(record(sent=(SentMessage(0, T0 + 1, delay=5.0),)))
    assert ages[:6] == [0.0] * 6
    assert ages[6] == 0.5 and ages[9] == 3.5


def test_burst_reactions_use_the_ready_samples_as_the_simulator_uses_its_ready_pods() -> None:
    burst = PLAN.bursts[0]
    ready = tuple((float(t), 0 if t < 12 else 3) for t in range(60))
    metrics = measure(record(ready=ready, scale_actions=((7.0, 0, 3),)), SCENARIO, PLAN)
    reaction = metrics.bursts[0]
    assert reaction.start == burst.start == 5.0
    assert reaction.first_scale_out == 2.0
    assert reaction.needed_replicas == 2  # 40 one-second messages, 2 per pod, within the 10 s objective
    assert reaction.enough_capacity == 7.0


@pytest.mark.parametrize("service", [
    ServiceTime("constant", 1.5),
    ServiceTime("exponential", 2.0),
    ServiceTime("uniform", 1.0, minimum=0.5, maximum=1.5),
    ServiceTime("lognormal", 2.0, stddev=1.0),
])
def test_the_worker_draws_service_times_from_the_scenarios_distribution(service: ServiceTime) -> None:
    draw = service_time_sampler(service_time_argument(service), random.Random(3))
    draws = sorted(draw() for _ in range(40_000))
    assert statistics.fmean(draws) == pytest.approx(service.average, rel=0.03)
    for q in (0.25, 0.5, 0.9):  # the same quantiles as the simulator's table
        assert draws[int(q * len(draws))] == pytest.approx(service.quantile(q), rel=0.05, abs=0.01)


@pytest.mark.parametrize("text", ["gamma:1", "constant", "uniform:1", "exponential:x", "constant:-1"])
def test_a_bad_service_time_is_refused_with_the_option_named(text: str) -> None:
    with pytest.raises(ServiceTimeError, match="--service-time"):
        service_time_sampler(text, random.Random())


def test_the_send_schedule_sends_the_simulators_plan_each_second_within_its_second() -> None:
    schedule = send_schedule(PLAN)
    assert len(schedule) == PLAN.total
    per_second = [0] * len(PLAN.per_second())
    for at, delay in schedule:
        per_second[int(at)] += 1
        assert at % 1 > 0, "never at the start of a second, where the simulator's policy looks before arrivals"
        assert delay == 0.0
    assert per_second == PLAN.per_second()
    assert schedule == sorted(schedule)


def test_the_worker_logs_become_deliveries_matched_to_their_ends(tmp_path: Path) -> None:
    lines = [
        {"event": "ready", "replica": "1", "pid": 11, "spawned": 1.0, "ready": 3.0},
        {"event": "received", "replica": "1", "pid": 11, "message": 4, "sent": 9.0, "received": 10.0,
         "dequeue_count": 1},
        {"event": "received", "replica": "1", "pid": 11, "message": 5, "sent": 9.5, "received": 10.0,
         "dequeue_count": 2},
        {"event": "done", "replica": "1", "pid": 11, "message": 4, "sent": 9.0, "received": 10.0, "done": 11.0},
        {"event": "lost", "replica": "1", "pid": 11, "message": 5, "sent": 9.5, "received": 10.0, "done": 12.0},
        {"event": "received", "replica": "1", "pid": 11, "message": 6, "sent": 9.7, "received": 10.5,
         "dequeue_count": 1},
        {"event": "received", "replica": "1", "pid": 11, "message": 7, "sent": 9.8, "received": 10.6,
         "dequeue_count": 1},
        {"event": "released", "replica": "1", "pid": 11, "message": 7, "sent": 9.8, "received": 10.6,
         "released": 13.0},
    ]
    (tmp_path / "worker-1.log").write_text("\n".join(json.dumps(line) for line in lines) + "\nTraceback...\n")
    deliveries, ready = read_worker_logs(tmp_path)
    assert ready == {11: 3.0}
    assert deliveries == [
        Delivery(4, 11, 10.0, 1, 11.0, True),
        Delivery(5, 11, 10.0, 2, 12.0, False),
        Delivery(6, 11, 10.5, 1, None, False),
        Delivery(7, 11, 10.6, 1, None, False, released=13.0),
    ]


def test_the_live_service_times_are_the_finished_deliveries_received_to_done_in_the_order_received() -> None:
    deliveries = (
        Delivery(2, 11, T0 + 5.0, 1, ended=T0 + 7.5, deleted=True),
        Delivery(1, 10, T0 + 1.0, 1, ended=T0 + 2.25, deleted=True),
        Delivery(3, 10, T0 + 3.0, 1),                                   # its worker died first: no time
        Delivery(4, 12, T0 + 4.0, 1, ended=T0 + 4.5, released=T0 + 4.5),  # handed back on scale-in: no time
        Delivery(5, 12, T0 + 6.0, 2, ended=T0 + 16.0, deleted=False),   # outlasted its visibility: 10 s all the same
    )
    assert service_times(record(deliveries=deliveries)) == (1.25, 2.5, 10.0)


def test_measured_service_times_are_the_simulators_distribution_each_equally_likely() -> None:
    measured = ServiceTime("constant", 1.0, measured=(3.0, 1.0, 2.0, 2.0))
    assert measured.table() == [1.0, 2.0, 2.0, 3.0]
    assert measured.average == 2.0
    assert measured.quantile(0.1) == 1.0 and measured.quantile(0.9) == 3.0
    assert replace(measured, in_order=True).table() == [3.0, 1.0, 2.0, 2.0]
    # Measured 2-second jobs simulate exactly as stated 2-second ones.
    stated = replace(SCENARIO, workers=replace(SCENARIO.workers, service_time=ServiceTime("constant", 2.0)))
    given = with_service_times(stated, [2.0] * 7)
    contender = [Contender("fixed", lambda world: ScaleAt(world, {0: 3}))]
    assert simulate(given, contender)[0].metrics == simulate(stated, contender)[0].metrics


def test_live_jobs_given_in_order_are_taken_one_a_message_in_that_order() -> None:
    # One replica of one slot from the start, three messages at once: their jobs take 1 s, 3 s and 1 s in the order
    # the live workers took them, so they wait 0, 1 and 4 s; given in the other order (3, 1, 1), 0, 3 and 4 s.
    stated = parse_scenario({
        "duration": 20, "seed": 1, "slo": {"waitSeconds": 10}, "queue": {"visibilityTimeout": "30s"},
        "workers": {"startupDelay": "1s", "serviceTime": "1s", "concurrency": 1, "maxReplicas": 1,
                    "initialReplicas": 1},
        "arrivals": [{"type": "burst", "at": 2, "messages": 3, "over": 1}],
    })
    fixed = [Contender("one", lambda world: ScaleAt(world, {0: 1}))]
    waits = {}
    for jobs in ((1.0, 3.0, 1.0), (3.0, 1.0, 1.0)):
        metrics = simulate(with_service_times(stated, jobs), fixed)[0].metrics
        assert metrics.busy_worker_seconds == 5.0
        waits[jobs] = (metrics.wait_p50, metrics.wait_max)
    assert waits == {(1.0, 3.0, 1.0): (1.0, 4.0), (3.0, 1.0, 1.0): (3.0, 4.0)}
