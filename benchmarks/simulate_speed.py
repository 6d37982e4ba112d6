"""How fast the simulator runs: simulated seconds per wall second.

    .venv/bin/python benchmarks/simulate_speed.py [--sweep N] [--jobs N]

1. One queue over a 7-day scenario at 1-second resolution (diurnal web traffic with bursts, ~12 M messages),
   with a static policy (the world model alone), the KEDA+HPA baseline, and our rule (the real Reconciler and
   policy.decide every 10 s).
2. A sweep of N rules (targetPerReplica 1..N) over the flash-crowd scenario, in one process and in --jobs
   processes (default: one per CPU), against the same run of the world with a static policy measured in the same
   run: the ratio says what a policy costs on top of the world, whatever the machine's load.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import replace

from controller.commands.simulate import default_rule
from controller.simulator.adapters import StaticAutoscaler
from controller.simulator.keda import KedaAutoscaler, parse_scaled_object
from controller.simulator.run import Contender, rule_contender, simulate
from controller.simulator.scenario import Scenario, library, parse_scenario, plan_arrivals
from controller.simulator.world import World

WEEK = {
    "name": "week",
    "duration": "7d",
    "seed": 3,
    "slo": {"waitSeconds": 60},
    "workers": {"startupDelay": "30s", "serviceTime": {"distribution": "lognormal", "mean": "2s", "stddev": "1s"},
                "concurrency": 4, "maxReplicas": 100, "scaleIn": "drain"},
    "arrivals": [
        {"type": "diurnal", "mean": 20, "amplitude": 15},
        {"type": "burst", "at": ["3h", "27h", "75h", "123h"], "messages": 20000, "over": "60s"},
    ],
}
KEDA = {
    "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "bench"},
    "spec": {"scaleTargetRef": {"name": "worker"},
             "triggers": [{"type": "azure-queue", "metadata": {"queueName": "q", "queueLength": "40"}}]},
}


def timed(scenario: Scenario, contender: Contender) -> float:
    started = time.perf_counter()
    simulate(scenario, [contender])
    return time.perf_counter() - started


def static(replicas: int) -> Contender:
    def build(world: World) -> StaticAutoscaler:
        return StaticAutoscaler("static", replicas, world)

    return Contender("static", build, initial_replicas=replicas)


def target_rule(scenario: Scenario, target: float) -> Contender:
    """The scenario's default rule in count mode at `target` messages per replica, as a contender."""
    rule = default_rule(scenario)
    rule = replace(rule, spec=replace(rule.spec, policy=replace(rule.spec.policy, target_per_replica=target)))
    return rule_contender(f"target-{target:g}", rule, scenario.start_epoch)


def line(name: str, simulated: float, seconds: float) -> None:
    print(f"  {name:<34} {seconds:7.2f} s wall   {simulated / seconds:>10,.0f} simulated s per wall s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", type=int, default=100, help="rules in the sweep (default 100)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes for the parallel sweep (default: one per CPU)")
    args = parser.parse_args()

    week = parse_scenario(WEEK)
    started = time.perf_counter()
    plan = plan_arrivals(week)
    planning = time.perf_counter() - started
    print(f"7-day scenario, one queue, 1 s resolution: {week.steps:,} steps, {plan.total:,} messages")
    print(f"  arrivals planned (numpy)            {planning:7.2f} s wall")
    scaled = parse_scaled_object(KEDA)
    contenders: list[tuple[str, Callable[[], Contender]]] = [
        ("world + static policy", lambda: static(20)),
        ("world + KEDA/HPA baseline", lambda: Contender("keda", lambda w: KedaAutoscaler("keda", scaled, w))),
        ("world + our rule (Reconciler, 10 s)", lambda: target_rule(week, 15.0)),
    ]
    runs = {}
    for name, make in contenders:
        runs[name] = timed(week, make())
        line(name, week.duration, runs[name])
    ticks = week.duration / 10
    extra = runs["world + our rule (Reconciler, 10 s)"] - runs["world + static policy"]
    print(f"  => one Reconciler tick (poll, decide, scale) costs about {extra / ticks * 1e6:.0f} µs")

    crowd = library()["flash-crowd"]
    baseline = timed(crowd, static(20))
    rules = [target_rule(crowd, float(target)) for target in range(1, args.sweep + 1)]
    print(f"\n{args.sweep}-rule sweep over flash-crowd ({crowd.duration / 3600:g} h each):")
    line("baseline: world + static policy", crowd.duration, baseline)
    for jobs in sorted({1, args.jobs}):
        started = time.perf_counter()
        simulate(crowd, rules, jobs=jobs)
        sweep = time.perf_counter() - started
        line(f"sweep of {args.sweep} rules, {jobs} process{'es' if jobs > 1 else ''}", crowd.duration * args.sweep,
             sweep)
        print(f"  => {sweep / args.sweep:.3f} s per rule, {sweep / (baseline * args.sweep):.2f}x the static "
              f"baseline")


if __name__ == "__main__":
    main()
