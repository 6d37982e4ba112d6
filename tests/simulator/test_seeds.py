"""benchmarks/seeds.py: the policy benchmark's verdicts counted over seeds.

The counting is checked on runs written by hand (the SLO itself counts as met, KEDA is tuned on seed 0 and again
on each seed); the seeding on a real scenario; the store that lets a run cut off resume.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import seeds
from benchmarks.seeds import (
    SEED_STEP,
    SeedRun,
    Store,
    cells,
    code_digest,
    run_all,
    seeded,
    spread,
    totals,
    tuned,
)
from controller.simulator.adapters import StaticAutoscaler
from controller.simulator.run import Contender, simulate
from tests.sim_helpers import scenario as small_scenario


def test_seed_zero_is_the_scenarios_own_and_the_others_draw_again() -> None:
    scenario = small_scenario(seed=7, duration=1800, arrivals=[{"type": "poisson", "rate": 0.9}],
                              workers={"startupDelay": 10, "serviceTime": {"distribution": "exponential", "mean": 2},
                                       "concurrency": 1, "maxReplicas": 10})
    assert seeded(scenario, 0) is scenario
    assert seeded(scenario, 3).seed == 7 + 3 * SEED_STEP

    def arrived(k: int) -> tuple[int, float]:
        sc = seeded(scenario, k)
        m = simulate(sc, [Contender("two", lambda w: StaticAutoscaler("two", 2, w), initial_replicas=2)])[0].metrics
        return m.messages_processed, m.wait_p99

    assert arrived(0) == arrived(0)  # the same seed, the same run
    assert arrived(1) != arrived(0)  # another seed, other arrivals and service times


def test_the_spread_counts_the_objective_met_at_the_slo_and_tunes_keda_on_seed_zero() -> None:
    runs = [
        # Seed 0: ql5 is the cheapest KEDA setting meeting 60 s, so it is the one tuned.
        SeedRun(0, {1.0: 60.0, 0.5: 75.0, 2.0: 20.0}, 80.0, {"keda-5": (60.0, 100.0), "keda-20": (90.0, 50.0)},
                in_flight=59.0),
        # Seed 1: ql5 misses; ql20 meets and is the one re-tuned for this seed.
        SeedRun(1, {1.0: 61.0, 0.5: 59.0, 2.0: 21.0}, 90.0, {"keda-5": (61.0, 100.0), "keda-20": (55.0, 60.0)},
                in_flight=60.0),
        # Seed 2: no setting meets.
        SeedRun(2, {1.0: 40.0, 0.5: 70.0, 2.0: 22.0}, 70.0, {"keda-5": (80.0, 100.0), "keda-20": (99.0, 50.0)},
                in_flight=60.5),
    ]
    s = spread("x", 60.0, list(reversed(runs)))  # the order the processes return in does not matter
    assert s.met == {1.0: 2, 0.5: 1, 2.0: 3}
    assert s.p99[1.0] == (40.0, 61.0)
    assert (s.setting, s.setting_met, s.keda_met) == ("keda-5", 1, 2)
    assert s.ratios == (0.8, 1.5)  # 80 / 100 on seed 0, 90 / 60 on seed 1; seed 2 has nothing to compare
    assert s.steady is None  # no setting meets on seed 2
    assert s.in_flight_met == 2  # 59 and 60 meet 60 s; 60.5 does not
    assert cells(s) == ("x", "60", "2/3 / 1/3 / 3/3", "40-61", "2/3", "1/3 (queueLength 5)",
                        "1.15x (0.80-1.50) on the 2 seeds some setting meets", "no setting meets on every seed")
    # Without seed 2, ql20 misses on seed 0 and ql5 on seed 1: still none meets on both.
    assert spread("x", 60.0, runs[:2]).steady is None
    # At an objective of 61 s ql5 meets on seeds 0 and 1 (and ql20 does not on seed 0): ours 170 / its 200.
    both = spread("x", 61.0, runs[:2])
    assert (both.steady, both.steady_ratio) == ("keda-5", 0.85)
    assert cells(both)[-1] == "0.85x (queueLength 5)"
    assert totals([s, s]) == ("queuescale meets the objective in 4 / 2 / 6 of 6 runs (serviceTime x1 / x0.5 / x2); "
                              "told the pods' in-flight counts, in 4")


def test_a_scenario_no_keda_setting_meets_says_so() -> None:
    runs = [SeedRun(k, {1.0: 100.0}, 10.0, {"keda-5": (200.0, 5.0)}) for k in range(2)]
    s = spread("y", 120.0, runs)
    assert tuned(runs[0], 120.0) is None
    assert cells(s)[2:] == ("2/2", "100", "not run", "no setting meets", "no setting meets on any seed",
                            "no setting meets on every seed")
    # A seed stored before the in-flight run was kept has none: the count is not made up from the others.
    assert s.in_flight_met is None
    assert totals([s]).endswith("of 2 runs (serviceTime x1 / x0.5 / x2)")


def test_a_stored_seed_is_taken_instead_of_run_and_only_for_the_code_it_was_made_with(tmp_path: Path) -> None:
    run = SeedRun(3, {1.0: 12.0, 0.5: 30.0, 2.0: 8.0}, 4321.5, {"keda-5": (9.0, 5000.0), "keda-20-10s": (40.0, 3000.0)},
                  11.0)
    Store(tmp_path, "digest-a").save("no-such-scenario", run)
    assert Store(tmp_path, "digest-a").load("no-such-scenario", 3) == run  # JSON's string keys read back as factors
    assert Store(tmp_path, "digest-b").load("no-such-scenario", 3) is None  # another policy: run it again
    assert Store(tmp_path, "digest-a").load("no-such-scenario", 4) is None
    # The scenario does not exist, so running it would raise: the stored result is what comes back.
    assert run_all([("no-such-scenario", 3)], 1, Store(tmp_path, "digest-a")) == {("no-such-scenario", 3): run}
    assert not list(tmp_path.glob("*.part"))


def test_a_stored_seed_of_a_scenario_file_that_changed_since_is_run_again(tmp_path: Path) -> None:
    scenario_file = tmp_path / "mine.yaml"
    scenario_file.write_text("name: mine\n")
    store = Store(tmp_path / "store", "digest-a")
    run = SeedRun(0, {1.0: 1.0}, 10.0, {})
    store.save(str(scenario_file), run)
    assert store.load(str(scenario_file), 0) == run
    scenario_file.write_text("name: mine\nseed: 2\n")
    assert store.load(str(scenario_file), 0) is None


def test_the_code_digest_moves_with_the_policy_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in ("controller", "benchmarks"):
        (tmp_path / folder).mkdir()
    (tmp_path / "controller" / "policy.py").write_text("X = 1\n")
    monkeypatch.setattr(seeds, "ROOT", tmp_path)
    before = code_digest()
    assert code_digest() == before
    (tmp_path / "controller" / "policy.py").write_text("X = 2\n")
    assert code_digest() != before


def test_ours_only_runs_no_keda_setting_and_says_so_instead_of_no_setting_meets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = small_scenario(seed=3, duration=900, arrivals=[{"type": "poisson", "rate": 0.5}],
                              workers={"startupDelay": 10, "serviceTime": {"distribution": "exponential", "mean": 2},
                                       "concurrency": 1, "maxReplicas": 5})
    monkeypatch.setattr(seeds, "named_scenario", lambda _name: scenario)
    alone = seeds.run_seed("small", 0, ours_only=True)
    full = seeds.run_seed("small", 0)
    assert alone.keda == {} and full.keda  # the sweep ran only without --ours-only
    assert (alone.ours, alone.in_flight) == (full.ours, full.in_flight)  # ours are the same runs either way
    s = spread("small", 30.0, [alone])
    assert cells(s)[-3:] == ("KEDA not run",) * 3
