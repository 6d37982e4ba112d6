"""What meeting the missed objectives would take: queuescale's rule with one knob changed, and workers that hand
their messages back on scale-in. The rows docs/benchmarks.md quotes outside the policy suite's table.

    .venv/bin/python -m benchmarks.what_it_takes [--jobs 2]

Each row: scenario, serviceTime factor the rule is told, the variant, worker-seconds, p99 wait, duplicates.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from benchmarks.policy_suite import named_scenario, our_rule
from controller.model.rule import QueueScaler, Schedule
from controller.simulator.adapters import RuleAutoscaler
from controller.simulator.run import Contender, simulate
from controller.simulator.scenario import Scenario

FOREVER = 1e6  # seconds: longer than any scenario

Change = Callable[[Scenario, QueueScaler], tuple[Scenario, QueueScaler]]


def as_stated(scenario: Scenario, rule: QueueScaler) -> tuple[Scenario, QueueScaler]:
    return scenario, rule


def never_releasing(scenario: Scenario, rule: QueueScaler) -> tuple[Scenario, QueueScaler]:
    policy = rule.spec.policy
    policy = replace(policy, scale_down=replace(policy.scale_down, delay=FOREVER), scale_to_zero_delay=FOREVER)
    return scenario, replace(rule, spec=replace(rule.spec, policy=policy))


def scale_down_delay(seconds: float) -> Change:
    def change(scenario: Scenario, rule: QueueScaler) -> tuple[Scenario, QueueScaler]:
        policy = rule.spec.policy
        policy = replace(policy, scale_down=replace(policy.scale_down, delay=seconds))
        return scenario, replace(rule, spec=replace(rule.spec, policy=policy))
    return change


def min_replicas(count: int) -> Change:
    def change(scenario: Scenario, rule: QueueScaler) -> tuple[Scenario, QueueScaler]:
        return scenario, replace(rule, spec=replace(rule.spec, min_replicas=count))
    return change


def max_replicas_from(minutes: Sequence[int], length: int) -> Change:
    """maxReplicas ready-asked from each of `minutes` (after the scenario's start, a Monday) for `length` minutes:
    a perfect reaction to bursts starting then."""
    def change(scenario: Scenario, rule: QueueScaler) -> tuple[Scenario, QueueScaler]:
        windows = tuple(Schedule(name=f"burst-{i}", days=frozenset({0}), start_minute=m,
                                 end_minute=min(1440, m + length), min_replicas=scenario.workers.max_replicas)
                        for i, m in enumerate(minutes))
        return scenario, replace(rule, spec=replace(rule.spec, schedules=windows))
    return change


def releasing(scenario: Scenario, rule: QueueScaler) -> tuple[Scenario, QueueScaler]:
    return replace(scenario, workers=replace(scenario.workers, scale_in="release")), rule


ROWS: tuple[tuple[str, float, str, Change], ...] = (
    ("flash-crowd", 1.0, "as stated", as_stated),
    ("flash-crowd", 1.0, "never releasing anything", never_releasing),
    *(("flash-crowd", 1.0, f"maxReplicas for {n} min from each crowd's first minute",
       max_replicas_from((30, 130, 180, 240), n)) for n in (6, 10, 15)),
    ("flash-crowd", 1.0, "maxReplicas from the first crowd's first minute to the end",
     max_replicas_from((30,), 1440)),
    ("photo-mosaic", 1.0, "as stated", as_stated),
    ("photo-mosaic", 1.0, "never releasing anything", never_releasing),
    ("photo-mosaic", 1.0, "maxReplicas from the first large mosaic (minute 11)", max_replicas_from((11,), 1440)),
    ("photo-mosaic", 1.0, "maxReplicas from the first small mosaic (minute 2)", max_replicas_from((2,), 1440)),
    *(("photo-mosaic", f, "minReplicas 10", min_replicas(10)) for f in (1.0, 0.5, 2.0)),
    ("benchmarks/scenarios/holdout-sawtooth.yaml", 0.5, "as stated", as_stated),
    ("benchmarks/scenarios/holdout-sawtooth.yaml", 0.5, "never releasing anything", never_releasing),
    *(("benchmarks/scenarios/holdout-sawtooth.yaml", 0.5, f"minReplicas {n}", min_replicas(n)) for n in (3, 4)),
    *(("benchmarks/scenarios/holdout-long-batch.yaml", 1.0, f"scaleDown.delay {s:g} s", scale_down_delay(s))
      for s in (120.0, 1800.0, 2400.0)),
    *((name, f, "workers release on scale-in", releasing)
      for name in ("benchmarks/scenarios/holdout-report-renders.yaml", "flash-crowd",
                   "benchmarks/scenarios/holdout-long-batch.yaml") for f in (1.0, 0.5, 2.0)),
)


def run_row(index: int) -> str:
    name, factor, label, change = ROWS[index]
    stated = named_scenario(name)
    scenario, rule = change(stated, our_rule(stated, factor))
    metrics = simulate(scenario, [Contender("q", lambda world: RuleAutoscaler("q", rule, world,
                                                                              scenario.start_epoch))])[0].metrics
    return (f"{scenario.name:28} x{factor:<4g} {label:58} {metrics.worker_seconds:>12,.0f} "
            f"{metrics.wait_p99:>7g} {metrics.duplicate_deliveries:>6}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"{'scenario':28} {'told':5} {'variant':58} {'worker-s':>12} {'p99 s':>7} {'dups':>6}")
    with ProcessPoolExecutor(args.jobs) as pool:
        for line in pool.map(run_row, range(len(ROWS))):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
