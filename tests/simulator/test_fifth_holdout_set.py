"""Issue 18: the fifth held-out set, written before any run (d8643a1), run first with the policy unchanged and then
moved into the suite (docs/benchmarks.md, *The fifth held-out set*). It must stay in the suite under its own names,
on seeds no other scenario draws."""

from __future__ import annotations

from benchmarks.policy_suite import HOLDOUT, ROOT, named_scenario
from controller.simulator.scenario import library, load_scenario

FIFTH = [ROOT / "benchmarks" / "scenarios" / f"holdout-{name}.yaml"
         for name in ("cron-offsets", "flaky-metrics", "monday-wake", "scheduled-retries", "slow-leak", "thumbnails")]


def test_the_fifth_set_is_in_the_suite_under_its_own_names() -> None:
    assert set(FIFTH) <= set(HOLDOUT)  # the suite runs every file directly under benchmarks/scenarios
    for path in FIFTH:
        scenario = load_scenario(str(path))
        assert scenario.name == path.stem
        assert scenario.slo_wait > 0


def test_the_fifth_set_shares_no_seed_with_the_rest_of_the_suite() -> None:
    fifth = {str(path) for path in FIFTH}
    others = {named_scenario(name).seed for name in [*library(), *map(str, HOLDOUT)] if name not in fifth}
    seeds = [named_scenario(path).seed for path in sorted(fifth)]
    assert len(set(seeds)) == len(seeds)
    assert not set(seeds) & others
