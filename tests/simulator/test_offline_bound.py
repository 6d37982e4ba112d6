"""Issue 18: the offline lower bound, the fewest worker-seconds a policy knowing every arrival could spend and still
meet the objective (benchmarks/offline_bound.py). Its figures are checked against schedules worked out by hand,
and against what the simulator's contenders spend: none that meets its objective spends less."""

from __future__ import annotations

import pytest

from benchmarks.offline_bound import main, offline_bound
from benchmarks.policy_suite import contenders, kept_ready
from controller.simulator.run import simulate
from controller.simulator.scenario import Scenario, parse_scenario
from tests.sim_helpers import scenario

# Twenty 100 s jobs at once, one to a pod, each to be taken within 1 s, on pods that take 30 s to start.
AT_ONCE = scenario(duration=900, slo={"waitSeconds": 1},
                   workers={"startupDelay": 30, "serviceTime": 100, "concurrency": 1, "maxReplicas": 30},
                   arrivals=[{"type": "batch", "every": "1h", "at": 300, "messages": 20}])


def test_jobs_that_must_start_together_each_need_a_pod_and_its_start_up() -> None:
    # By hand: twenty pods, each billed a 30 s start-up and its 100 s job, 2,600 worker-seconds. Pods may be
    # fractions in the bound, so the 1 s of slack spreads the work over 101 s: 20 x 100 / 101 pods, each a
    # start-up and 101 s, 2,594.
    bound = offline_bound(AT_ONCE)
    assert bound.late_messages == 0
    assert bound.worker_seconds == pytest.approx(20 * 100 / 101 * (30 + 101), abs=1)
    assert bound.busy_worker_seconds == 2000


def sparse(duration: int, every: int, at: int) -> Scenario:
    """A 2 s job every `every` seconds from `at`, to be taken within 5 s, on pods that take 20 s to start."""
    return scenario(duration=duration, slo={"waitSeconds": 5},
                    workers={"startupDelay": 20, "serviceTime": 2, "concurrency": 4, "maxReplicas": 5},
                    arrivals=[{"type": "batch", "every": every, "at": at, "messages": 1}])


def test_a_message_a_start_up_cannot_reach_in_time_has_a_pod_billed_from_before_it_comes() -> None:
    # No pod can be asked for after its message comes and be ready in time. Each message has a pod billed from 15 s
    # before it comes to its job's end at the soonest (asked for then, ready as the message's 5 s run out): a
    # start-up and a job, 22 s, cheaper than keeping the pod through the 60 s to the next.
    bound = offline_bound(sparse(900, 60, 30))
    # Fifteen messages (30 s, 90 s, ... 870 s), none of which may be late (1 % of 15 rounds to none).
    assert bound.late_messages == 0
    assert bound.one_pod == pytest.approx(15 * (20 + 2))
    assert bound.worker_seconds == bound.one_pod
    # The fractional capacity bound alone misses it: a 2 s job needs a seventh of a pod over the 7 s it may take.
    assert bound.capacity < bound.one_pod / 2


def test_the_one_message_in_a_hundred_that_may_be_late_is_the_one_not_covered() -> None:
    # 120 such messages over an hour: one may wait past the objective (99 % of 120 is 118.8), and a policy saves
    # most by leaving one of them to wait for a pod asked for when it comes: 30 s apart, each still costs 22 s.
    bound = offline_bound(sparse(3600, 30, 15))
    assert bound.late_messages == 1
    assert bound.one_pod == pytest.approx(119 * 22, abs=0.5)


# Steady traffic and a burst, short enough to simulate every contender of the policy suite on it.
MIXED = scenario(duration=1200, seed=11, slo={"waitSeconds": 60},
                 workers={"startupDelay": 15, "serviceTime": {"distribution": "exponential", "mean": 2},
                          "concurrency": 2, "maxReplicas": 40},
                 arrivals=[{"type": "poisson", "rate": 3},
                           {"type": "batch", "every": "1h", "at": 480, "messages": 400, "over": 20}])

# A trickle under an objective shorter than a start-up, and a burst: only pods kept through the trickle meet it.
TRICKLE = scenario(duration=1200, seed=12, slo={"waitSeconds": 10},
                   workers={"startupDelay": 25, "serviceTime": 1, "concurrency": 4, "maxReplicas": 10},
                   arrivals=[{"type": "poisson", "rate": 0.05},
                             {"type": "batch", "every": "1h", "at": 600, "messages": 120, "over": 10}])


@pytest.mark.parametrize(("sc", "binding"), [(MIXED, "capacity"), (TRICKLE, "one_pod")], ids=["mixed", "trickle"])
def test_no_contender_meeting_the_objective_spends_less_than_the_bound(sc: Scenario, binding: str) -> None:
    bound = offline_bound(sc)
    assert bound.worker_seconds == getattr(bound, binding)
    runs = simulate(sc, [*contenders(sc, ()), *(kept_ready(n) for n in (1, 2, 3, 5, 8))])
    met = [r for r in runs if r.metrics.wait_p99 <= sc.slo_wait]
    assert len(met) >= 3
    for r in met:
        assert r.metrics.worker_seconds >= bound.worker_seconds, r.label
        assert r.metrics.efficiency <= bound.efficiency_at_most, r.label
    # And it is not a trivial bound: the cheapest of them is within a factor of it.
    assert min(r.metrics.worker_seconds for r in met) < 4 * bound.worker_seconds


def test_messages_that_expire_before_they_are_late_ask_nothing_of_the_bound_on_their_own_queue() -> None:
    # Two queues sharing the pods. The second's messages live 10 s under a 30 s objective: left untaken, each counts
    # a 10 s wait, never late, so a policy may ignore them. Its TTL, not the first queue's, decides.
    trickle = [{"type": "batch", "every": 120, "at": 30, "messages": 1}]

    def shared_pods(*queues: dict[str, object]) -> Scenario:
        return parse_scenario({"duration": 900, "seed": 1, "slo": {"waitSeconds": 30}, "queues": list(queues),
                               "workers": {"startupDelay": 40, "serviceTime": 2, "concurrency": 1,
                                           "maxReplicas": 5}})

    one = shared_pods({"name": "a", "arrivals": trickle})
    both = shared_pods({"name": "a", "arrivals": trickle},
                       {"name": "b", "ttl": "10s", "arrivals": [{"type": "poisson", "rate": 0.05}]})
    alone, shared = offline_bound(one), offline_bound(both)
    # Seven of its messages may be late by the end (30 s, 150 s, ... 750 s), each a start-up and a job apart.
    assert alone.one_pod == pytest.approx(7 * (40 + 2))
    assert shared.one_pod == alone.one_pod and shared.capacity <= alone.capacity + 1
    assert shared.late_messages == 0  # fewer than a hundred messages in all
    assert shared.busy_worker_seconds > 3 * alone.busy_worker_seconds  # the second queue's messages are still put


def test_a_scenario_that_does_not_exist_is_a_usage_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["no-such-scenario"])
    assert stopped.value.code == 2
    assert "no-such-scenario: no such scenario file or built-in scenario" in capsys.readouterr().err
