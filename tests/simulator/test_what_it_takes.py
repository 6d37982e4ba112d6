"""benchmarks/what_it_takes.py prints the rows docs/benchmarks.md quotes outside the policy suite's table."""

from __future__ import annotations

from benchmarks.what_it_takes import ROWS, BurstReaction, cheapest_reaction, react, run_row
from controller.simulator.run import Contender, simulate
from controller.simulator.scenario import Scenario, plan_arrivals
from tests.sim_helpers import scenario


def row(label: str, factor: float = 1.0, scenario: str = "photo-mosaic") -> list[str]:
    (index,) = [i for i, (name, f, text, _) in enumerate(ROWS) if (name, f, text) == (scenario, factor, label)]
    return run_row(index).split()


def test_photo_mosaic_with_eleven_replicas_kept_ready_meets_its_objective_where_the_rule_as_stated_misses() -> None:
    # docs/benchmarks.md: 163,790 worker-seconds and 30 s with minReplicas 11; 43,297 and 39 s as stated (172,870 and
    # 83,747 while a cold start also counted its message's service time, before 2026-11-30). Before each simulated
    # message drew its own service time (2026-11-29), minReplicas 10 met it (163,250 and 30 s) and the rule as stated
    # cost 86,052.
    kept = row("minReplicas 11")
    stated = row("as stated")
    assert kept[-4:-1] == ["163,790", "30", "0"]
    assert stated[-4:-1] == ["43,297", "39", "0"]


def _timeline(sc: Scenario, base: int, extra: dict[int, int]) -> list[tuple[int, int]]:
    bursts = plan_arrivals(sc).bursts
    contender = Contender("reaction", lambda world: BurstReaction(world, bursts, base, extra), initial_replicas=base)
    result = simulate(sc, [contender], record_timeline=True)[0]
    return [(int(p.t), p.desired) for p in result.timeline]


def test_the_burst_aware_reaction_adds_its_replicas_at_the_first_poll_after_a_burst_began_and_keeps_them_until_the_base_holds_the_count() -> None:
    # A burst of 100 one-second jobs from 35 s over 5 s, one replica of two slots throughout: the poll at 40 s is
    # the first that sees it, so 1 -> 5 there. Ready at 50 s (a 10 s start-up), five replicas (ten slots) take
    # the last of the 100 by about 60 s; the count falls to the base's two slots then, and 5 -> 1.
    sc = scenario(duration=120, workers={"startupDelay": 10, "serviceTime": 1, "concurrency": 2, "maxReplicas": 10},
                  arrivals=[{"type": "burst", "at": [35], "messages": 100, "over": 5}])
    desired = dict(_timeline(sc, 1, {100: 4}))
    assert desired[39] == 1
    assert desired[40] == 5
    changes = [t for t in range(1, 120) if desired[t] != desired[t - 1]]
    assert changes[0] == 40 and len(changes) == 2
    assert 55 <= changes[1] <= 65 and desired[changes[1]] == 1


def test_the_cheapest_burst_aware_reaction_is_the_least_that_meets_the_objective() -> None:
    sc = scenario(duration=300, slo={"waitSeconds": 30},
                  workers={"startupDelay": 10, "serviceTime": 1, "concurrency": 2, "maxReplicas": 20},
                  arrivals=[{"type": "burst", "at": [35, 155], "messages": 200, "over": 5}])
    found = cheapest_reaction(sc, 1)
    assert found is not None
    extra, metrics = found
    assert metrics.wait_p99 <= 30
    # One replica fewer a burst misses the objective.
    assert react(sc, 1, {200: extra[200] - 1}).wait_p99 > 30


def test_image_ai_held_half_an_hour_before_scale_down_stops_fewer_jobs_than_its_tuned_keda() -> None:
    # docs/benchmarks.md, the misses table: its scale-ins stop 982 eight-second jobs as stated (KEDA tuned: 697);
    # with scaleDown.delay 1800 s, 498, at 272,520 worker-seconds (1.17x the 232,790 as stated), p99 3 s.
    held = row("scaleDown.delay 1800 s", scenario="benchmarks/scenarios/holdout-image-ai.yaml")
    assert held[-4:] == ["272,520", "3", "498", "0.40"]
