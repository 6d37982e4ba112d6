"""Small builders shared by the simulator tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.fidelity import SCENARIOS, rule_for
from benchmarks.policy_suite import HOLDOUT
from controller.commands.simulate import load_rules
from controller.model.rule import API_GROUP, API_VERSION, KIND, QueueScaler, parse_queuescaler
from controller.simulator.adapters import RuleAutoscaler
from controller.simulator.run import Contender, RunResult, simulate
from controller.simulator.scenario import Scenario, load_scenario, parse_scenario
from controller.simulator.world import World


def scenario(**overrides: Any) -> Scenario:
    """A small scenario; `overrides` replace top-level fields (workers, queue and arrivals whole)."""
    raw: dict[str, Any] = {
        "duration": 600,
        "seed": 1,
        "slo": {"waitSeconds": 30},
        "queue": {"visibilityTimeout": 60},
        "workers": {"startupDelay": 10, "serviceTime": 2, "concurrency": 1, "maxReplicas": 50},
        "arrivals": [{"type": "poisson", "rate": 2}],
    }
    raw.update(overrides)
    return parse_scenario(raw)


def parse_rule(name: str, **spec: Any) -> QueueScaler:
    """A QueueScaler named `name`, parsed as the operator parses one; `spec` over a target named worker."""
    return parse_queuescaler({"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "metadata": {"name": name},
                              "spec": {"scaleTargetRef": {"name": "worker"}, **spec}})


class ScaleAt:
    """An autoscaler that sets given replica counts at given seconds."""

    def __init__(self, world: World, plan: dict[int, int], label: str = "scripted") -> None:
        self.world = world
        self.plan = dict(plan)
        self.label = label
        self.next_at = float(min(self.plan)) if self.plan else float("inf")

    async def act(self, t: int) -> None:
        self.world.set_desired(self.plan.pop(t), t)
        self.next_at = float(min(self.plan)) if self.plan else float("inf")


def run_scripted(sc: Scenario, plan: dict[int, int], **kwargs: Any) -> RunResult:
    return simulate(sc, [Contender("scripted", lambda w: ScaleAt(w, plan), **kwargs)])[0]


def run_rule(sc: Scenario, rule: QueueScaler) -> RunResult:
    """`rule` through the reconciler and policy on `sc`, as `queuescale simulate` runs it."""
    return simulate(sc, [Contender("q", lambda w: RuleAutoscaler("q", rule, w, sc.start_epoch))])[0]


def holdout_path(name: str) -> Path:
    """benchmarks/scenarios/NAME.yaml, a held-out scenario file of the policy suite."""
    return next(path for path in HOLDOUT if path.stem == name)


def holdout_scenario(name: str) -> Scenario:
    """The held-out scenario of the policy suite named NAME, loaded."""
    return load_scenario(str(holdout_path(name)))


def fidelity_scenario(name: str) -> tuple[Scenario, QueueScaler]:
    """benchmarks/scenarios/fidelity/fidelity-NAME.yaml and the rule benchmarks/fidelity.py runs it with."""
    path = SCENARIOS / f"fidelity-{name}.yaml"
    [rule] = load_rules([str(rule_for(path))])
    return load_scenario(str(path)), rule


class FakeWorld:
    """Just the counts and the replica count a KEDA emulation reads and writes."""

    def __init__(self, count: int, desired: int) -> None:
        self.visible_count = count
        self.approximate_count = count
        self.desired = desired
        self.ready = desired  # pods are ready at once here
        self.changes: list[tuple[int, int]] = []

    def set_count(self, count: int) -> None:
        self.visible_count = self.approximate_count = count

    def set_desired(self, replicas: int, t: int) -> None:
        self.desired = self.ready = replicas
        self.changes.append((t, replicas))
