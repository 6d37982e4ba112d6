"""What meeting the missed objectives would take: queuescale's rule with one knob changed, workers that hand
their messages back on scale-in, and a reaction no policy can beat by reacting. The rows docs/benchmarks.md quotes
outside the policy suite's table.

    .venv/bin/python -m benchmarks.what_it_takes [--jobs 2]

Each row: scenario, serviceTime factor the rule is told, the variant, worker-seconds, p99 wait, duplicates,
efficiency (busy worker-seconds over worker-seconds).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from benchmarks.policy_suite import named_scenario, our_rule
from controller.model.rule import QueueScaler, Schedule
from controller.simulator.adapters import RuleAutoscaler
from controller.simulator.run import Contender, Metrics, simulate
from controller.simulator.scenario import Burst, Scenario, plan_arrivals
from controller.simulator.world import World

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


def drain_time(seconds: float) -> Change:
    def change(scenario: Scenario, rule: QueueScaler) -> tuple[Scenario, QueueScaler]:
        return scenario, replace(rule, spec=replace(rule.spec, policy=replace(rule.spec.policy, drain_time=seconds)))
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
    *(("photo-mosaic", f, "minReplicas 11", min_replicas(11)) for f in (1.0, 0.5, 2.0)),
    ("benchmarks/scenarios/holdout-sawtooth.yaml", 0.5, "as stated", as_stated),
    ("benchmarks/scenarios/holdout-sawtooth.yaml", 0.5, "never releasing anything", never_releasing),
    *(("benchmarks/scenarios/holdout-sawtooth.yaml", 0.5, f"minReplicas {n}", min_replicas(n)) for n in (3, 4)),
    *(("benchmarks/scenarios/holdout-long-batch.yaml", 1.0, f"scaleDown.delay {s:g} s", scale_down_delay(s))
      for s in (120.0, 1800.0, 2400.0)),
    *(("benchmarks/scenarios/holdout-slow-start.yaml", f, "drainTime 210 s (0.7 of the objective)", drain_time(210.0))
      for f in (1.0, 0.5, 2.0)),
    *((name, 1.0, label, change) for name in ("benchmarks/scenarios/holdout-image-ai.yaml",
                                               "benchmarks/scenarios/holdout-probe-fanout.yaml")
      for label, change in (("scaleDown.delay 1800 s", scale_down_delay(1800.0)),
                            ("never releasing anything", never_releasing))),
    *((name, f, "workers release on scale-in", releasing)
      for name in ("benchmarks/scenarios/holdout-report-renders.yaml", "flash-crowd",
                   "benchmarks/scenarios/holdout-long-batch.yaml") for f in (1.0, 0.5, 2.0)),
)


class BurstReaction:
    """A referee that knows what no policy can know in time: each burst's size, as soon as the first poll after it
    began (every `poll` seconds) could see it. `base` replicas throughout; a burst of `messages` adds
    `extra[messages]` replicas at that poll, kept until the burst is over and the count is no more than the base's
    slots hold. The cheapest such reaction meeting an objective is what reacting perfectly to the bursts costs; a
    policy that learns each burst's size only as it arrives does no better."""

    def __init__(self, world: World, bursts: Sequence[Burst], base: int, extra: Mapping[int, int],
                 poll: float = 10.0) -> None:
        self.label = "burst-aware reaction"
        self.next_at = 0.0
        self.world = world
        self.base = base
        self.extra = extra
        self.pending = sorted(((math.floor(b.start / poll) + 1) * poll, b) for b in bursts)
        self.active: list[Burst] = []

    async def act(self, t: int) -> None:
        world = self.world
        while self.pending and self.pending[0][0] <= t:
            self.active.append(self.pending.pop(0)[1])
        held = self.base * world.workers.concurrency
        self.active = [b for b in self.active if t < b.start + b.spread or world.approximate_count > held]
        desired = self.base + max((self.extra.get(b.messages, 0) for b in self.active), default=0)
        if desired != world.desired:
            world.set_desired(desired, t)
        self.next_at = t + 1


def react(scenario: Scenario, base: int, extra: Mapping[int, int]) -> Metrics:
    """The scenario under a `BurstReaction` (from `base` replicas at the start)."""
    bursts = plan_arrivals(scenario).bursts
    contender = Contender("reaction", lambda world: BurstReaction(world, bursts, base, extra), initial_replicas=base)
    return simulate(scenario, [contender])[0].metrics


def cheapest_reaction(scenario: Scenario, base: int) -> tuple[dict[int, int], Metrics] | None:
    """The fewest extra replicas per burst size for which a `BurstReaction` from `base` meets the objective: one
    bisection per size, largest bursts first, from maxReplicas; None when even that misses."""
    sizes = sorted({b.messages for b in plan_arrivals(scenario).bursts}, reverse=True)
    extra = dict.fromkeys(sizes, scenario.workers.max_replicas - base)
    best = react(scenario, base, extra)
    if best.wait_p99 > scenario.slo_wait:
        return None
    for size in sizes:
        low, high = -1, extra[size]  # high meets the objective; find the least that does
        while high - low > 1:
            middle = (low + high) // 2
            trial = react(scenario, base, {**extra, size: middle})
            if trial.wait_p99 <= scenario.slo_wait:
                high, best = middle, trial
            else:
                low = middle
        extra[size] = high
    return extra, react(scenario, base, extra)


# The base: replicas enough for the steady traffic alone (retry-storms: 1/s of 2 s jobs on two slots a pod needs
# two pods, one being exactly saturated; slow-start: 0.15/s of 12 s jobs, one slot a pod).
REACTIONS: tuple[tuple[str, int], ...] = (
    ("benchmarks/scenarios/holdout-retry-storms.yaml", 2),
    ("benchmarks/scenarios/holdout-slow-start.yaml", 2),
)


def run_reaction(index: int) -> str:
    name, base = REACTIONS[index]
    scenario = named_scenario(name)
    found = cheapest_reaction(scenario, base)
    if found is None:
        return f"{scenario.name:28} {'-':5} {f'burst-aware reaction from {base}: none meets the objective':58}"
    extra, metrics = found
    label = f"burst-aware reaction: {base} + " + ", ".join(f"{n} a burst of {size}" for size, n in extra.items())
    return f"{scenario.name:28} {'-':5} {label:58} {_figures(metrics)}"


def run_row(index: int) -> str:
    name, factor, label, change = ROWS[index]
    stated = named_scenario(name)
    scenario, rule = change(stated, our_rule(stated, factor))
    metrics = simulate(scenario, [Contender("q", lambda world: RuleAutoscaler("q", rule, world,
                                                                              scenario.start_epoch))])[0].metrics
    return f"{scenario.name:28} x{factor:<4g} {label:58} {_figures(metrics)}"


def _figures(metrics: Metrics) -> str:
    return (f"{metrics.worker_seconds:>12,.0f} {metrics.wait_p99:>7g} {metrics.duplicate_deliveries:>6} "
            f"{metrics.efficiency:>5.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"{'scenario':28} {'told':5} {'variant':58} {'worker-s':>12} {'p99 s':>7} {'dups':>6} {'eff':>5}")
    with ProcessPoolExecutor(args.jobs) as pool:
        for line in pool.map(run_row, range(len(ROWS))):
            print(line)
        for line in pool.map(run_reaction, range(len(REACTIONS))):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
