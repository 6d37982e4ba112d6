"""`queuescale simulate`: load the scenario and the policies, run them, print or write the results."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import yaml

from controller.commands.terminal import progress_bar, wants_progress
from controller.model.fields import SpecError
from controller.model.rule import API_GROUP, API_VERSION, KIND, QueueScaler, parse_queuescaler
from controller.model.textfmt import duration, plural
from controller.simulator.adapters import (
    AwsTargetTracking,
    RuleError,
    StaticAutoscaler,
    source_queues,
)
from controller.simulator.keda import EmulatedScaledObject, KedaAutoscaler, ScaledObjectError, load_scaled_objects
from controller.simulator.report import format_table, write_html, write_timeline
from controller.simulator.run import Contender, RunResult, rule_contender, simulate
from controller.simulator.scenario import Scenario, ScenarioError, library, load_scenario
from controller.simulator.world import World

DEFAULT_RULE_NAME = "queuescale-default"


@dataclass
class SimulateRequest:
    """The command's inputs, as parsed from the command line."""

    scenario: str | None = None
    policies: list[str] = field(default_factory=list)
    keda: list[str] = field(default_factory=list)
    static: list[int] = field(default_factory=list)
    aws_target: list[float] = field(default_factory=list)
    seed: int | None = None
    output: str = "table"  # table, wide, json, yaml or name
    timeline: str | None = None
    report: str | None = None
    list: bool = False
    quiet: bool = False  # no progress bar even on a terminal
    jobs: int | None = None  # processes for the policies' runs; None: one per CPU


class InputError(Exception):
    """Bad input: each line names the file and the field."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


def default_rule(scenario: Scenario) -> QueueScaler:
    """The rule used when none is given: the latency-first policy, told what the scenario says a user knows.

    `targetWaitSeconds` is the scenario's SLO, `serviceTime` the mean service time, `messagesPerReplica` the
    pods' concurrency, `lookahead` their start-up delay and `onScaleIn` what they do when a scale-in stops them;
    everything else is the policy's defaults (docs/policy.md).
    """
    workers = scenario.workers
    # One source per queue of the scenario (their counts summed), each named after its queue.
    queue_names = [q.name for q in scenario.queues] or ["simulated"]
    doc = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": DEFAULT_RULE_NAME},
        "spec": {
            "scaleTargetRef": {"name": "worker"},
            "minReplicas": 0,
            "maxReplicas": workers.max_replicas,
            "pollingInterval": 10,
            "sources": [{"type": "azure-queue", "queueName": name,
                         "connectionSecretRef": {"name": "simulated", "key": "connection-string"}}
                        for name in queue_names],
            "policy": {
                "targetWaitSeconds": scenario.slo_wait,
                "serviceTime": workers.service_time.average,
                "messagesPerReplica": workers.concurrency,
                "lookahead": workers.startup_delay,
                "onScaleIn": workers.scale_in,
            },
        },
    }
    return parse_queuescaler(doc)


def load_rules(paths: Sequence[str]) -> list[QueueScaler]:
    from controller.model.loading import load_files, shown_path

    result = load_files(list(paths))
    lines = list(result.error_lines())
    for path in map(shown_path, paths):
        if not any(r.file == path for r in result.rules) and not any(p.file == path for p in result.problems):
            lines.append(f"{path}: no QueueScaler in this file")
    if lines:
        raise InputError(lines)
    return [r.rule for r in result.rules if r.rule is not None]


def _unique(label: str, taken: set[str]) -> str:
    candidate, n = label, 2
    while candidate in taken:
        candidate, n = f"{label}#{n}", n + 1
    taken.add(candidate)
    return candidate


def contenders(
    scenario: Scenario,
    rules: Sequence[QueueScaler],
    scaled_objects: Sequence[EmulatedScaledObject],
    static: Sequence[int],
    aws_targets: Sequence[float],
) -> list[Contender]:
    """Our rules first, then the baselines, each with a unique label."""
    taken: set[str] = set()
    found: list[Contender] = []
    names = tuple(q.name for q in scenario.all_queues)
    for rule in rules:
        try:
            source_queues(rule, names)
        except RuleError as exc:
            raise InputError([str(exc)]) from None
        found.append(rule_contender(_unique(rule.name, taken), rule, scenario.start_epoch))
    for scaled in scaled_objects:
        label = _unique(f"keda:{scaled.name}", taken)

        def build_keda(world: World, scaled: EmulatedScaledObject = scaled, label: str = label) -> KedaAutoscaler:
            return KedaAutoscaler(label, scaled, world)

        found.append(Contender(label, build_keda))
    for replicas in static:
        label = _unique(f"static-{replicas}", taken)

        def build_static(world: World, replicas: int = replicas, label: str = label) -> StaticAutoscaler:
            return StaticAutoscaler(label, replicas, world)

        found.append(Contender(label, build_static, initial_replicas=replicas))
    for target in aws_targets:
        label = _unique(f"aws-target-{target:g}", taken)

        def build_aws(world: World, target: float = target, label: str = label) -> AwsTargetTracking:
            return AwsTargetTracking(label, target, world, scenario.workers.max_replicas)

        found.append(Contender(label, build_aws))
    return found


def list_scenarios() -> str:
    scenarios = library()
    width = max(len(name) for name in scenarios)
    return "\n".join(f"{name:<{width}}  {s.description}" for name, s in scenarios.items())


def run(request: SimulateRequest, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """The whole command; returns the exit code. Bad input is reported line by line, exit 1."""
    if request.list:
        print(list_scenarios(), file=out)
        return 0
    if request.scenario is None:
        print("simulate: give --scenario NAME|FILE (see --list for the built-in ones)", file=err)
        return 1
    try:
        results, scenario = _run(request, err)
    except (InputError, ScenarioError, ScaledObjectError) as exc:
        for line in exc.lines:
            print(line, file=err)
        return 1
    except (SpecError, RuleError) as exc:
        print(str(exc), file=err)
        return 1
    metrics = {r.label: r.metrics.to_json() for r in results}
    if request.output == "json":
        json.dump(metrics, out, indent=2)
        out.write("\n")
    elif request.output == "yaml":
        out.write(yaml.safe_dump(metrics, sort_keys=False))
    elif request.output == "name":
        out.writelines(f"{r.label}\n" for r in results)
    else:
        print(format_table(scenario, results, wide=request.output == "wide"), file=out)
    try:
        if request.timeline:
            write_timeline(Path(request.timeline), results)
            print(f"timeline: {request.timeline}", file=err)
        if request.report:
            write_html(Path(request.report), scenario, results)
            print(f"report: {request.report}", file=err)
    except OSError as exc:
        print(f"cannot write {exc.filename}: {exc.strerror}", file=err)
        return 1
    return 0


def _run(request: SimulateRequest, err: TextIO) -> tuple[list[RunResult], Scenario]:
    assert request.scenario is not None
    scenario = load_scenario(request.scenario)
    if request.seed is not None:
        if request.seed < 0:
            raise InputError([f"--seed: must be >= 0, got {request.seed}"])
        from dataclasses import replace

        scenario = replace(scenario, seed=request.seed)
    for replicas in request.static:
        if replicas < 0:
            raise InputError([f"--static: must be >= 0 replicas, got {replicas}"])
    for target in request.aws_target:
        if not target > 0:
            raise InputError([f"--aws-target: must be > 0 messages per instance, got {target:g}"])
    rules = load_rules(request.policies) if request.policies else [default_rule(scenario)]
    scaled_objects = [so for path in request.keda for so in load_scaled_objects(path)]
    chosen = contenders(scenario, rules, scaled_objects, request.static, request.aws_target)
    record = bool(request.timeline or request.report)
    label = f"simulating {scenario.name} ({duration(scenario.duration)}, {plural(len(chosen), 'policy', 'policies')})"
    with progress_bar(err, label, 1.0, shown=wants_progress(err, request.quiet)) as bar:
        results = simulate(scenario, chosen, record_timeline=record, progress=bar.advance_to if bar.shown else None,
                           jobs=request.jobs or os.cpu_count() or 1)
    return results, scenario
