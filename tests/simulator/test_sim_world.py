"""The simulated queue and Deployment: Azure semantics, conservation, duplicates, determinism."""

from __future__ import annotations

import random

import pytest

from controller.simulator.adapters import StaticAutoscaler
from controller.simulator.run import Contender, simulate
from controller.simulator.scenario import QueueParams, ServiceTime, Workers
from controller.simulator.world import World, least_busy_takes
from tests.sim_helpers import run_scripted, scenario


def _conserved(metrics: object) -> bool:
    m = metrics.__dict__
    return bool(m["messages_arrived"] == m["messages_processed"] + m["expired_messages"] + m["messages_remaining"])


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("scale_in", ["kill", "drain", "release"])
def test_every_arrival_ends_processed_expired_or_queued(seed: int, scale_in: str) -> None:
    sc = scenario(
        seed=seed,
        duration=1800,
        queue={"visibilityTimeout": 20, "ttl": 300},
        workers={"startupDelay": 15, "concurrency": 3, "scaleIn": scale_in, "terminationGracePeriod": 10,
                 "serviceTime": {"distribution": "lognormal", "mean": 8, "stddev": 10}},
        arrivals=[
            {"type": "poisson", "rate": 3},
            {"type": "burst", "at": [200, 900], "messages": 800, "over": 30},
            {"type": "constant", "rate": 0.5, "delay": 45},
        ],
    )
    # Flapping between 1 and 12 replicas kills or drains work over and over.
    plan = {t: (12 if (t // 60) % 2 else 1) for t in range(0, 1800, 60)}
    result = run_scripted(sc, plan)
    m = result.metrics
    assert m.messages_arrived > 3000
    assert m.expired_messages > 0  # the 5-minute TTL bites while 1 replica holds the fort
    assert _conserved(m), m


def test_same_seed_same_run_and_another_seed_another_run() -> None:
    sc = scenario(duration=900)
    first = simulate(sc, [Contender("static", lambda w: StaticAutoscaler("static", 3, w))], record_timeline=True)[0]
    again = simulate(sc, [Contender("static", lambda w: StaticAutoscaler("static", 3, w))], record_timeline=True)[0]
    other = simulate(scenario(duration=900, seed=2),
                     [Contender("static", lambda w: StaticAutoscaler("static", 3, w))], record_timeline=True)[0]
    assert first.metrics == again.metrics
    assert first.timeline == again.timeline
    assert first.metrics.messages_arrived != other.metrics.messages_arrived


def _burst_then_scale_in(scale_in: str) -> dict[str, int]:
    sc = scenario(
        duration=600,
        queue={"visibilityTimeout": 120},
        workers={"startupDelay": 0, "serviceTime": 60, "concurrency": 1, "scaleIn": scale_in,
                 "terminationGracePeriod": 600, "initialReplicas": 10},
        arrivals=[{"type": "burst", "at": 0, "messages": 10, "over": 1}],
    )
    m = run_scripted(sc, {30: 2}).metrics
    return {"duplicates": m.duplicate_deliveries, "processed": m.messages_processed,
            "remaining": m.messages_remaining}


def test_scale_in_that_kills_busy_pods_delivers_their_messages_again() -> None:
    outcome = _burst_then_scale_in("kill")
    # 10 messages on 10 pods; 8 pods killed mid-message: 8 messages reappear after the visibility timeout.
    assert outcome == {"duplicates": 8, "processed": 10, "remaining": 0}


def test_graceful_drain_delivers_each_message_once() -> None:
    assert _burst_then_scale_in("drain") == {"duplicates": 0, "processed": 10, "remaining": 0}


def test_drain_past_the_grace_period_kills_what_is_left() -> None:
    sc = scenario(
        duration=600,
        queue={"visibilityTimeout": 120},
        workers={"startupDelay": 0, "serviceTime": 60, "scaleIn": "drain", "terminationGracePeriod": 10,
                 "initialReplicas": 10},
        arrivals=[{"type": "burst", "at": 0, "messages": 10, "over": 1}],
    )
    m = run_scripted(sc, {30: 2}).metrics
    assert m.duplicate_deliveries == 8
    assert m.messages_processed == 10


def _world(**queue: float | None) -> World:
    workers = Workers(startup_delay=5, service_time=ServiceTime("constant", 100.0), concurrency=1)
    params = QueueParams(**queue)  # type: ignore[arg-type]
    return World(params, workers, workers.service_time.table(16), seed=1)


def test_approximate_count_includes_delayed_and_in_flight_messages() -> None:
    world = _world(visibility_timeout=300)
    world.set_desired(2, 0)
    world.put(0, 5)
    world.put(0, 3, delay=50)
    for t in range(10):
        world.step(t)
    assert world.visible_count == 3  # 2 taken by the 2 pods ready at t=5
    assert world.in_flight_count == 2
    assert world.approximate_count == 8


def test_a_scheduled_message_waits_from_when_it_is_due_but_peek_shows_its_put() -> None:
    # Put at 0 with a 50 s initial visibility delay, taken by the pod ready at 5 as soon as it is due (50): it
    # waited 0 s. Killed at 60, it reappears at 80 (taken at 50, the visibility timeout 30 s) and its second
    # delivery, at 96, waited 46 s from 50, not 96 s from its put. What a source peeks (InsertionTime) still counts from the put.
    workers = Workers(startup_delay=5, service_time=ServiceTime("constant", 100.0), concurrency=1, scale_in="kill")
    world = World(QueueParams(visibility_timeout=30), workers, workers.service_time.table(16), seed=1)
    world.set_desired(1, 0)
    world.put(0, 1, delay=50)
    for t in range(60):
        world.step(t)
    assert world.tally.wait_histogram == {0: 1}
    world.set_desired(0, 60)
    for t in range(60, 91):
        world.step(t)
    assert world.visible_count == 1 and world.front_age(90) is None  # delivered before: a worker's time, no wait
    assert world.oldest_age(90) == 40
    world.set_desired(1, 91)
    for t in range(91, 100):
        world.step(t)
    assert world.tally.wait_histogram == {0: 1, 46: 1}  # taken at 96, when the pod asked for at 91 is ready
    fresh = _world(visibility_timeout=30)
    fresh.put(0, 1, delay=50)
    for t in range(55):
        fresh.step(t)
    assert fresh.front_age(54) == 54.0 and fresh.oldest_age(54) == 4


def _one_message_on_one_pod(until: int) -> World:
    """A 100 s job taken at t=5 by the only pod (visibility timeout 30 s: visible again at 35), stepped to `until`."""
    world = _world(visibility_timeout=30)
    world.set_desired(1, 0)
    world.put(0, 1)
    _steps(world, 0, until)
    return world


def _steps(world: World, start: int, end: int) -> None:
    for t in range(start, end):
        world.step(t)


def test_processing_longer_than_the_visibility_timeout_delivers_twice() -> None:
    world = _one_message_on_one_pod(40)
    assert world.visible_count == 1  # visible again while its only pod still works on it
    world.set_desired(2, 40)
    _steps(world, 40, 60)
    assert world.tally.duplicates == 1
    assert world.tally.scale_in_duplicates == 0  # no scale-in stopped anything: the work outlasted its timeout


def test_a_killed_pods_message_is_a_duplicate_after_a_scale_in() -> None:
    world = _one_message_on_one_pod(10)
    world.set_desired(0, 10)  # the pod that took it at t=5 is killed: the message is back at 35 (its visibility)
    _steps(world, 10, 40)
    world.set_desired(1, 40)
    _steps(world, 40, 50)
    assert (world.tally.duplicates, world.tally.scale_in_duplicates) == (1, 1)


def test_an_overrun_message_no_other_slot_takes_is_deleted_by_its_first_worker() -> None:
    # Azure keeps the first pop receipt good until another receive takes the message (Azurite agrees:
    # tests/demo/test_demo_worker.py). Visible again at 35, still there when the 100 s job ends at 105: that delete
    # succeeds, and nothing is delivered twice. The live referee (benchmarks/fidelity.py --only overrun) delivered
    # 11 of 460 again where a copy always taken predicted 26 to 27.
    world = _one_message_on_one_pod(104)
    assert (world.visible_count, world.approximate_count) == (1, 1)  # visible again, the job still running
    _steps(world, 104, 130)
    assert (world.tally.processed, world.tally.duplicates, world.approximate_count) == (1, 0, 0)
    assert world.tally.wait_histogram == {5: 1}
    assert not world.copies


def test_messages_expire_after_their_time_to_live() -> None:
    world = _world(visibility_timeout=30, ttl=60)
    world.put(0, 7)
    for t in range(61):
        world.step(t)
    assert world.tally.expired == 7
    assert world.approximate_count == 0


def test_a_message_that_expires_untaken_counts_as_waiting_until_it_expired() -> None:
    # Without it, a policy that lets work expire has no late messages: 7 put, none taken, a p99 wait of 0.
    world = _world(visibility_timeout=30, ttl=60)
    world.put(0, 7)
    world.put(30, 3)
    for t in range(100):
        world.step(t)
    assert world.tally.expired == 10
    assert world.tally.wait_histogram == {60: 10}


def test_a_backlog_left_at_the_end_counts_its_waits_so_far() -> None:
    # No replica ever: 20 messages put at 100 s are still queued when the 600 s run ends. Left out, the run
    # reported no wait at all; they have waited at least 500 s.
    sc = scenario(duration=600, workers={"startupDelay": 0, "serviceTime": 1, "initialReplicas": 0},
                  arrivals=[{"type": "burst", "at": 100, "messages": 20, "over": 1}])
    m = simulate(sc, [Contender("none", lambda w: StaticAutoscaler("none", 0, w))])[0].metrics
    assert (m.messages_processed, m.messages_remaining) == (0, 20)
    assert m.wait_p99 == m.wait_max == 500


def test_pods_take_no_work_before_they_are_ready() -> None:
    world = _world(visibility_timeout=300)
    world.put(0, 4)
    world.set_desired(4, 0)
    for t in range(5):
        world.step(t)
        assert world.visible_count == 4
    world.step(5)
    assert world.visible_count == 0


def test_short_messages_are_processed_many_per_second_per_slot() -> None:
    sc = scenario(duration=300, workers={"startupDelay": 0, "serviceTime": 0.25, "initialReplicas": 1},
                  arrivals=[{"type": "constant", "rate": 3}])
    m = run_scripted(sc, {}).metrics
    # One slot at 0.25 s per message keeps up with 3 messages per second.
    assert m.messages_remaining <= 6
    assert m.busy_worker_seconds == pytest.approx(900 * 0.25, rel=0.02)


def test_burst_reaction_times_are_measured_from_the_burst_start() -> None:
    sc = scenario(
        duration=300,
        slo={"waitSeconds": 30},
        workers={"startupDelay": 20, "serviceTime": 3, "concurrency": 1, "maxReplicas": 50},
        arrivals=[{"type": "burst", "at": 30, "messages": 100, "over": 10}],
    )
    m = run_scripted(sc, {40: 10}).metrics
    # 100 messages * 3 s within max(10 s spread, 30 s SLO) need 10 replicas; asked at 40, ready at 60.
    assert m.bursts[0].needed_replicas == 10
    assert m.bursts[0].first_scale_out == 10
    assert m.bursts[0].enough_capacity == 30
    assert m.bursts_short_of_capacity == 0
    short = run_scripted(sc, {40: 9}).metrics
    assert short.bursts[0].enough_capacity is None
    assert short.bursts_short_of_capacity == 1


def _waits_after_scale_in(scale_in: str) -> tuple[int, float]:
    """10 one-minute messages on 10 pods, 5 pods removed at 30 s: (duplicates, p99 wait)."""
    sc = scenario(
        duration=600,
        queue={"visibilityTimeout": 120},
        workers={"startupDelay": 0, "serviceTime": 60, "concurrency": 1, "scaleIn": scale_in,
                 "initialReplicas": 10},
        arrivals=[{"type": "burst", "at": 0, "messages": 10, "over": 1}],
    )
    m = run_scripted(sc, {30: 5}).metrics
    return m.duplicate_deliveries, m.wait_p99


def test_a_released_message_is_taken_again_when_a_pod_frees_not_after_its_visibility_timeout() -> None:
    # kill: the 5 stopped messages reappear at 0 + 120 s; release: at 30 s, and the 5 pods left free up at 60 s.
    assert _waits_after_scale_in("kill") == (5, 120)
    assert _waits_after_scale_in("release") == (5, 60)


def _stopped_by_removing(pods: int, *, ready: int, in_flight: int, seed: int, concurrency: int = 1,
                         least_busy: bool = False) -> int:
    """Messages a kill stops when `pods` of `ready` pods go, with `in_flight` long messages in progress
    (`least_busy`: the least busy pods go, as a ReplicaSet told the pods' in-flight counts removes them)."""
    workers = Workers(startup_delay=0, service_time=ServiceTime("constant", 1000.0), concurrency=concurrency,
                      scale_in="kill")
    world = World(QueueParams(visibility_timeout=3000), workers, workers.service_time.table(16), seed=seed)
    world.set_desired(ready, 0)
    world.put(0, in_flight)
    for t in range(3):
        world.step(t)
    assert world.in_flight_count == in_flight
    world.set_desired(ready - pods, 3, least_busy=least_busy)
    return in_flight - world.in_flight_count


def test_a_scale_in_stops_on_average_the_removed_pods_share_of_the_work_in_flight() -> None:
    # A ReplicaSet picks the pods it removes without knowing which are busy: one pod of 7, with 6 busy, holds a
    # message 6 times in 7. Taken in whole messages, one such scale-in stops 0 or 1, and over many the share.
    # (The share once was rounded down: a run of small scale-ins stopped nothing, where real pods lose work.)
    stopped = [_stopped_by_removing(1, ready=7, in_flight=6, seed=seed) for seed in range(300)]
    assert set(stopped) == {0, 1}
    assert sum(stopped) / len(stopped) == pytest.approx(6 / 7, abs=0.06)
    # A whole share is taken whole, whatever the draw: 2 of 4 pods with 6 messages (two slots a pod) hold 3.
    assert {_stopped_by_removing(2, ready=4, in_flight=6, seed=seed, concurrency=2) for seed in range(20)} == {3}


def test_a_scale_in_of_starting_and_ready_pods_takes_the_ready_ones_share() -> None:
    # Two pods starting and seven ready with six messages: going from 9 to 6 removes both starting pods and one
    # ready pod, which holds a message 6 times in 7 (blind) or never (the least busy: one of them is idle).
    def stopped(seed: int, *, least_busy: bool = False) -> int:
        workers = Workers(startup_delay=100, service_time=ServiceTime("constant", 1000.0), scale_in="kill")
        world = World(QueueParams(visibility_timeout=3000), workers, workers.service_time.table(16), seed=seed)
        world.set_desired(7, -100)
        world.put(0, 6)
        for t in range(3):
            world.step(t)
        world.set_desired(9, 3)
        assert (world.ready, world.starting_count, world.in_flight_count) == (7, 2, 6)
        world.set_desired(6, 4, least_busy=least_busy)
        assert (world.ready, world.starting_count) == (6, 0)
        return 6 - world.in_flight_count

    blind = [stopped(seed) for seed in range(300)]
    assert sum(blind) / len(blind) == pytest.approx(6 / 7, abs=0.06)
    assert {stopped(seed, least_busy=True) for seed in range(50)} == {0}


def test_removing_the_least_busy_pods_stops_what_the_least_busy_hold() -> None:
    # One message a pod at most: idle pods go first, and only what outnumbers them is stopped.
    assert {_stopped_by_removing(3, ready=7, in_flight=4, seed=seed, least_busy=True) for seed in range(20)} == {0}
    assert {_stopped_by_removing(5, ready=7, in_flight=4, seed=seed, least_busy=True) for seed in range(20)} == {2}
    # Four messages in three pods of two slots: of the 15 placements, 3 leave a pod empty and 12 leave each pod
    # at least one, so the least busy pod holds 12/15 = 0.8 on average (a ReplicaSet's own choice: 4/3).
    stopped = [_stopped_by_removing(1, ready=3, in_flight=4, seed=seed, concurrency=2, least_busy=True)
               for seed in range(400)]
    assert set(stopped) == {0, 1}
    assert sum(stopped) / len(stopped) == pytest.approx(0.8, abs=0.06)
    blind = [_stopped_by_removing(1, ready=3, in_flight=4, seed=seed, concurrency=2) for seed in range(400)]
    assert sum(blind) / len(blind) == pytest.approx(4 / 3, abs=0.06)


def test_several_queues_lose_what_the_least_busy_pods_hold_of_each() -> None:
    takes = [least_busy_takes([3, 5], 4, 4, 2, random.Random(seed)) for seed in range(200)]
    for taken in takes:
        assert 0 <= taken[0] <= 3 and 0 <= taken[1] <= 5
    # 8 messages in 16 slots: the two least busy of four pods hold fewer than their half (4) of them.
    assert sum(sum(t) for t in takes) / len(takes) < 3.2
    assert least_busy_takes([0, 0], 4, 4, 2, random.Random(1)) == [0, 0]
    assert least_busy_takes([4, 4], 2, 4, 1, random.Random(1)) in ([4, 0], [0, 4], [2, 2], [1, 3], [3, 1])
    assert sum(least_busy_takes([4, 4], 2, 4, 1, random.Random(1))) == 4  # every slot full: a pod holds 4


def test_a_steady_stream_of_independent_jobs_keeps_a_poisson_count_in_flight() -> None:
    # Jobs taken at a steady rate, each its own service time, form an M/G/infinity queue while slots are free: the
    # number in flight is Poisson, its variance its mean (here 200 a second x 0.5 s = 100, sd 10). The simulator's
    # steps had shared four service-time draws among all the messages dequeued in a second, so 50 half-second jobs
    # ended together or not at all: the count swung 0 to 249 (sd 44) at this rate, and a policy read chance swings
    # five times too wide.
    sc = scenario(duration=1500, workers={"startupDelay": 0, "concurrency": 64, "initialReplicas": 4,
                                          "serviceTime": {"distribution": "exponential", "mean": 0.5}},
                  arrivals=[{"type": "poisson", "rate": 200}])
    run = simulate(sc, [Contender("static", lambda w: StaticAutoscaler("static", 4, w))], record_timeline=True)[0]
    counts = [s.approximate_count for s in run.timeline if s.t >= 60]
    mean = sum(counts) / len(counts)
    sd = (sum((c - mean) ** 2 for c in counts) / len(counts)) ** 0.5
    assert mean == pytest.approx(100, rel=0.05)
    assert 0.8 * mean ** 0.5 < sd < 1.25 * mean ** 0.5, (mean, sd)


def test_many_messages_taken_at_once_each_outlast_the_visibility_timeout_on_their_own() -> None:
    # 20 jobs of 40 s taken in one step by 20 pods under a 30 s visibility timeout (the many-at-once draw): each
    # reappears at 35 and, with slots free, is delivered again, and again at 65 and 95: a job longer than its
    # visibility timeout never gets its delete in while another slot is free to take it.
    workers = Workers(startup_delay=5, service_time=ServiceTime("constant", 40.0), concurrency=1)
    world = World(QueueParams(visibility_timeout=30), workers, workers.service_time.table(16), seed=1)
    world.set_desired(40, 0)
    world.put(0, 20)
    _steps(world, 0, 34)
    assert (world.visible_count, world.approximate_count) == (0, 20)  # invisible, each counted once
    _steps(world, 34, 40)
    assert world.tally.duplicates == 20
    _steps(world, 40, 100)
    assert (world.tally.duplicates, world.tally.processed, world.approximate_count) == (60, 0, 20)
