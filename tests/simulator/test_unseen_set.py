"""Issue 18: a sixth held-out set, written before any run and kept out of the suite until a policy change is judged
on it (docs/benchmarks.md, *A sixth held-out set*). Loading a scenario parses and checks it; nothing here simulates
one, so the set stays unseen."""

from __future__ import annotations

from pathlib import Path

from benchmarks.policy_suite import HOLDOUT, ROOT, named_scenario
from controller.simulator.scenario import library, load_scenario

UNSEEN = sorted((ROOT / "benchmarks" / "scenarios" / "unseen").glob("*.yaml"))


def test_the_unseen_set_has_six_scenarios_that_load_under_their_own_names() -> None:
    assert len(UNSEEN) >= 6
    for path in UNSEEN:
        scenario = load_scenario(str(path))
        assert scenario.name == path.stem
        assert scenario.slo_wait > 0


def test_the_unseen_set_is_not_in_the_suite_and_shares_no_seed_with_it() -> None:
    # The suite runs every file directly under benchmarks/scenarios: none of these may be there yet.
    assert not {path.name for path in UNSEEN} & {Path(path).name for path in HOLDOUT}
    suite_seeds = {named_scenario(name).seed for name in [*library(), *map(str, HOLDOUT)]}
    unseen_seeds = [load_scenario(str(path)).seed for path in UNSEEN]
    assert len(set(unseen_seeds)) == len(unseen_seeds)
    assert not set(unseen_seeds) & suite_seeds
