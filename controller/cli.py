"""Command-line parsing only: each command calls into the modules that do the work."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from controller import __version__


def _validate(args: argparse.Namespace) -> int:
    import controller.sources  # noqa: F401  (registers the queue kinds with the spec parser)
    from controller.rulefiles import load_files

    result = load_files(args.files)
    lines = list(result.error_lines())
    for line in lines:
        print(line)
    for note in result.notes:
        print(f"{note.file}: {note.message}", file=sys.stderr)
    valid = sum(1 for r in result.rules if r.rule is not None)
    total = len(result.rules)
    if result.ok:
        print(f"{valid} of {total} rules valid", file=sys.stderr)
        return 0
    print(f"{len(lines)} errors; {valid} of {total} rules valid", file=sys.stderr)
    return 1


def _check(args: argparse.Namespace) -> int:
    import os

    from controller.check import run

    return run(args.rule, secrets_file=args.secrets, current_replicas=args.current_replicas, as_json=args.json,
               environ=os.environ, out=sys.stdout, err=sys.stderr)


def _replicas(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return int(text)


def _simulate(args: argparse.Namespace) -> int:
    from controller.simulator.command import SimulateRequest, run

    return run(SimulateRequest(
        scenario=args.scenario, policies=args.policy, keda=args.keda, static=args.static,
        aws_target=args.aws_target, seed=args.seed, json=args.json, timeline=args.timeline, report=args.report,
        list=args.list,
    ))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queuescale",
        description="Scale queue workers from the length of their queues.",
    )
    parser.add_argument("--version", action="version", version=f"queuescale {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    validate = commands.add_parser(
        "validate", help="check QueueScaler YAML files", description="Check QueueScaler YAML files; "
        "print every error as FILE: NAME: field.path: message; exit 1 on any error.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(handler=_validate)

    check = commands.add_parser(
        "check", help="poll a rule's queues once and show the decision",
        description="Poll every source of every rule in RULE once (no cluster needed), print the counts or errors "
        "and what the policy would decide; exit 1 if any source did not answer. Secrets come from Secret "
        "manifests (--secrets, or in RULE) or from env QUEUESCALE_SECRET_<NAME>_<KEY>.",
    )
    check.add_argument("rule", metavar="RULE", help="a YAML file of QueueScaler rules")
    check.add_argument("--secrets", metavar="SECRETS", help="a YAML file of Kubernetes Secret manifests")
    check.add_argument("--current-replicas", type=_replicas, default=0, metavar="N",
                       help="the replica count to decide from (default 0)")
    check.add_argument("--json", action="store_true", help="one JSON object per rule, one per line")
    check.set_defaults(handler=_check)

    simulate = commands.add_parser(
        "simulate", help="replay a queue workload against policies offline",
        description="Run a scenario (built-in name or YAML file) against QueueScaler rules and baselines "
        "(KEDA ScaledObject, static, AWS-style target tracking) on a virtual clock; compare cost and latency.",
    )
    simulate.add_argument("--scenario", metavar="NAME|FILE", help="a built-in scenario (see --list) or a file")
    simulate.add_argument("--policy", action="append", default=[], metavar="RULE.yaml",
                          help="QueueScaler rule file (repeatable; default: a rule sized from the scenario)")
    simulate.add_argument("--keda", action="append", default=[], metavar="SCALEDOBJECT.yaml",
                          help="a KEDA ScaledObject with azure-queue triggers to emulate (repeatable)")
    simulate.add_argument("--static", action="append", default=[], type=int, metavar="N",
                          help="a fixed replica count (repeatable)")
    simulate.add_argument("--aws-target", action="append", default=[], type=float, metavar="N",
                          help="AWS-style target tracking on backlog per instance (repeatable)")
    simulate.add_argument("--seed", type=int, help="override the scenario's seed")
    simulate.add_argument("--json", action="store_true", help="print metrics as JSON keyed by policy")
    simulate.add_argument("--timeline", metavar="FILE.csv", help="write the timeline as CSV")
    simulate.add_argument("--report", metavar="FILE.html", help="write a self-contained HTML report")
    simulate.add_argument("--list", action="store_true", help="list the built-in scenarios")
    simulate.set_defaults(handler=_simulate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    return code
