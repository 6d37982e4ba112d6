"""Command-line parsing only: each command calls into the modules that do the work."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from controller import __version__

# The output formats of `-o`, as kubectl names them: `json` and `yaml` for programs, `name` for one
# `kind.group/name` per line to pipe on, `wide` for the table with more columns.
OUTPUTS = ("json", "yaml", "wide", "name")


def _add_output(parser: argparse.ArgumentParser, choices: Sequence[str], default: str, *, json_alias: bool) -> None:
    parser.add_argument("-o", "--output", choices=choices, metavar="FORMAT",
                        help=f"one of {'|'.join(choices)} (default: {default})")
    if json_alias:
        parser.add_argument("--json", dest="output", action="store_const", const="json",
                            help="the same as -o json (kept for scripts written before -o)")


def _validate(args: argparse.Namespace) -> int:
    import json

    import yaml

    from controller.model.loading import load_files
    from controller.model.rule import API_GROUP, KIND
    from controller.model.textfmt import plural

    result = load_files(args.files)
    lines = list(result.error_lines())
    if args.output == "json":
        print(json.dumps(result.to_json(), indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(result.to_json(), sort_keys=False), end="")
    elif args.output == "name":
        for loaded in result.rules:
            if loaded.rule is not None:
                print(f"{KIND.lower()}.{API_GROUP}/{loaded.name}")
        for line in lines:  # the names are the result; what kept a rule out is an error
            print(line, file=sys.stderr)
    else:
        for line in lines:
            print(line)
        if args.output == "wide":
            for loaded in result.rules:
                if loaded.rule is not None:
                    spec = loaded.rule.spec
                    print(f"{loaded.file}: {loaded.name}: valid ({plural(len(spec.sources), 'source')}, "
                          f"{spec.min_replicas} to {spec.max_replicas} replicas)")
    for note in result.notes:
        print(f"{note.file}: {note.message}", file=sys.stderr)
    valid = sum(1 for r in result.rules if r.rule is not None)
    total = plural(len(result.rules), "rule")
    if result.ok:
        print(f"{valid} of {total} valid", file=sys.stderr)
        return 0
    print(f"{plural(len(lines), 'error')}; {valid} of {total} valid", file=sys.stderr)
    return 1


def _check(args: argparse.Namespace) -> int:
    import os

    from controller.commands.check import run

    return run(args.rule, secrets_file=args.secrets, current_replicas=args.current_replicas,
               output=args.output or "table", environ=os.environ, out=sys.stdout, err=sys.stderr)


def _replicas(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return int(text)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def _positive_float(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def _duration(text: str) -> float:
    from controller.model.fields import parse_duration

    seconds = parse_duration(text)
    if seconds is None:
        raise argparse.ArgumentTypeError(f'must be a duration like 15, "15s" or "1m", got "{text}"')
    return seconds


def _run(args: argparse.Namespace) -> int:
    import asyncio
    from dataclasses import fields

    from controller.operator import logs
    from controller.operator.options import OperatorOptions
    from controller.operator.runner import run

    logs.configure(args.log_format, args.log_level)
    # Every flag of `run` is the option of the same name; --namespace, repeatable, gives `namespaces`.
    flags = vars(args)
    options = OperatorOptions(namespaces=tuple(args.namespace or ()), **{
        option.name: flags[option.name] for option in fields(OperatorOptions) if option.name in flags})
    return asyncio.run(run(options))


def _add_run(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    import os

    from controller.model.secrets import SECRET_ACCESS_MODES
    from controller.model.textfmt import duration
    from controller.operator.options import OperatorOptions

    o = OperatorOptions()  # every default is the options' own
    run = _command(
        commands, "run", help="run the operator", description="Watch QueueScalers and scale their targets.",
    )
    run.add_argument("--kubeconfig", metavar="FILE",
                     help="kubeconfig file (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config)")
    run.add_argument("--context", help="kubeconfig context (default: the kubeconfig's current-context)")
    run.add_argument("--namespace", action="append", metavar="NS",
                     help="watch only this namespace (repeatable; default: all namespaces)")
    run.add_argument("--selector", metavar="LABELS",
                     help="watch only rules with these labels (e.g. shard=a), to shard rules (default: every rule)")
    run.add_argument("--leader-elect", action="store_true",
                     help="only the holder of a Lease scales (default: off, every replica scales)")
    run.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", o.lease_namespace),
                     metavar="NS", help="namespace of the leader election Lease (default: $POD_NAMESPACE, else "
                     "queuescale-system)")
    run.add_argument("--lease-name", default=o.lease_name, metavar="NAME",
                     help="name of the leader election Lease (default: %(default)s)")
    run.add_argument("--identity", default=os.environ.get("POD_NAME", ""),
                     help="leader election identity (default: $POD_NAME, else host name and process id)")

    def knob(flag: str, read: Callable[[str], object], metavar: str, meaning: str) -> None:
        """A flag of one of the operator's options: its default is OperatorOptions' own, shown in {default}."""
        default = getattr(o, flag[2:].replace("-", "_"))
        shown = duration(default) if read is _duration else f"{default:g}" if read is float else str(default)
        run.add_argument(flag, type=read, default=default, metavar=metavar, help=meaning.format(default=shown))

    knob("--lease-duration", _duration, "T",
         "how long a Lease holds without renewal before another replica may take it (default {default})")
    knob("--renew-deadline", _duration, "T",
         "the leader stops scaling if it cannot renew its Lease within this (default {default})")
    knob("--retry-period", _duration, "T", "how often to try to take or renew the Lease (default {default})")
    knob("--bind-address", str, "ADDRESS",
         "address for the health and metrics servers (default: {default}, every interface)")
    knob("--metrics-port", int, "PORT", "Prometheus metrics on /metrics (default {default}; 0: any free port)")
    knob("--health-port", int, "PORT", "/healthz and /readyz (default {default}; 0: any free port)")
    knob("--status-interval", _duration, "T",
         "write status changes that are only counts at most this often (default {default})")
    knob("--status-heartbeat", _duration, "T",
         "rewrite a status whose only change is lastPollTime this often (default {default})")
    knob("--status-rate", float, "N",
         "average count-only and heartbeat status writes per second over all rules (default {default}): with many "
         "rules each one's counts are written less often; 0: no limit")
    knob("--secret-ttl", _duration, "T",
         "how long a Secret read is reused (default {default}; an auth error from a queue drops it)")
    run.add_argument("--secret-access", choices=SECRET_ACCESS_MODES, default=o.secret_access,
                     help="annotated: a Secret serves only the rules its queuescale.io/allowed-rules annotation "
                          "names (or \"*\"); namespace: any rule of the Secret's namespace (default %(default)s)")
    knob("--target-refresh", _duration, "T",
         "re-read a target's scale this often when no scaling is due (default {default}; a tick that would scale "
         "always reads it first; 0 reads it every tick). Deployments and StatefulSets the operator may watch are "
         "read from the watch on every tick instead")
    knob("--max-concurrent-ticks", _positive_int, "N",
         "ticks in progress at once over all rules (default {default}): when the process has more due than it has "
         "CPU for, ticks start late rather than all at once and each timing out")
    knob("--kube-qps", float, "N",
         "API requests a second the operator makes on average, after a burst of --kube-burst (default {default}; "
         "watches, leader election and scale writes are not held back; 0: no limit): a fresh install of many rules "
         "writes their first statuses at this rate")
    knob("--kube-burst", _positive_int, "N",
         "API requests the operator may make at once before --kube-qps applies (default {default})")
    run.add_argument("--log-format", choices=("text", "json"), default="text",
                     help="text for people, json (one object per line) for log collectors (default %(default)s)")
    run.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info",
                     help="the least severe level logged (default %(default)s)")
    run.set_defaults(handler=_run)


def _simulate(args: argparse.Namespace) -> int:
    from controller.commands.simulate import SimulateRequest, run

    if args.scenario is None and not args.list:
        args.parser.error("give --scenario NAME|FILE (see --list for the built-in ones)")  # exit 2: a usage error

    return run(SimulateRequest(
        scenario=args.scenario, policies=args.policy, keda=args.keda, static=args.static,
        aws_target=args.aws_target, seed=args.seed, output=args.output or "table", timeline=args.timeline,
        report=args.report, list=args.list, quiet=args.quiet, jobs=args.jobs,
    ))


def _demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from controller.demo.options import DemoOptions
    from controller.demo.run import run

    if args.scenario is not None:
        from controller.demo.live import ScenarioDemoOptions
        from controller.demo.live import run as run_scenario

        return run_scenario(ScenarioDemoOptions(scenario=args.scenario, policy=args.policy, out_dir=Path(args.out),
                                                live=args.live))
    if args.policy is not None:
        args.parser.error("--policy goes with --scenario")
    return run(DemoOptions(
        burst=args.burst, burst_at=args.burst_at, second_burst=args.second_burst,
        second_burst_at=args.second_burst_at, work_time=args.work_time, polling_interval=args.polling_interval,
        max_workers=args.max_workers, target_per_replica=args.target_per_replica,
        scale_down_delay=args.scale_down_delay, scale_to_zero_delay=args.scale_to_zero_delay,
        max_duration=args.max_duration, out_dir=Path(args.out), live=args.live,
    ))


def _convert_keda(args: argparse.Namespace) -> int:
    from controller.keda.convert import run

    return run(args.scaledobject, args.out, sys.stdout, sys.stderr, output=args.output or "yaml")


def _record(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from controller.commands.record import RecordOptions, run

    return run(RecordOptions(
        rule_file=args.rule, duration=args.duration, out=Path(args.out), secrets_file=args.secrets,
        counts_out=Path(args.counts) if args.counts else None,
        scenario_out=Path(args.scenario) if args.scenario else None,
        completion_rate=args.completion_rate, interval=args.interval, rule_name=args.rule_name, quiet=args.quiet,
    ), environ=os.environ, out=sys.stdout, err=sys.stderr)


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from controller.demo.options import DemoOptions
    from controller.model.textfmt import duration

    d = DemoOptions()
    demo = _command(
        commands, "demo", help="a live local demo: Azurite, real workers, the real reconciler",
        description="Start Azurite on 127.0.0.1, send bursts to a queue and watch the operator's reconciler scale "
        "real worker processes; ends by itself, stops everything it started, writes a report.",
    )
    demo.add_argument("--scenario", metavar="NAME|FILE",
                      help="run a simulator scenario live instead of the bursts below, in its own duration, and "
                           "write the simulator's metrics measured live and simulated (default: the bursts)")
    demo.add_argument("--policy", metavar="RULE.yaml",
                      help="with --scenario: the QueueScaler to run (default: the simulator's default rule)")
    # The demo's knobs: flag, how it reads, what it is (its default from DemoOptions, printed as it reads).
    knobs: list[tuple[str, Callable[[str], object], str, str]] = [
        ("--burst", int, "N", "messages"),
        ("--burst-at", _duration, "T", "when, after the rule starts"),
        ("--second-burst", int, "N", "messages of a second burst, 0 for none"),
        ("--second-burst-at", _duration, "T", "when, after the rule starts"),
        ("--work-time", _duration, "T", "work per message"),
        ("--polling-interval", _duration, "T", "the rule's pollingInterval"),
        ("--max-workers", int, "N", "the rule's maxReplicas, 1 to 64"),
        ("--target-per-replica", float, "N", "messages per worker"),
        ("--scale-down-delay", _duration, "T", "the rule's scaleDown.delay"),
        ("--scale-to-zero-delay", _duration, "T", "the rule's scaleToZeroDelay"),
        ("--max-duration", _duration, "T", "stop anyway after this (exit 1)"),
    ]
    for flag, read, metavar, meaning in knobs:
        default = getattr(d, flag[2:].replace("-", "_"))
        shown = duration(default) if read is _duration else f"{default:g}"
        # "(default X)", or inside the meaning's own parenthesis: "stop anyway after this (exit 1; default 10m)"
        help_text = f"{meaning[:-1]}; default {shown})" if meaning.endswith(")") else f"{meaning} (default {shown})"
        demo.add_argument(flag, type=read, default=default, metavar=metavar, help=help_text)
    demo.add_argument("--out", default=str(d.out_dir), metavar="DIR",
                      help=f"report, timeline, summary and worker logs (default {d.out_dir}/)")
    demo.add_argument("--live", action=argparse.BooleanOptionalAction, default=None,
                      help="redraw in place (default: when stdout is a terminal)")
    demo.set_defaults(handler=_demo, parser=demo)


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's own layout, but an Examples section keeps its lines as written (one command a line)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("Examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


EXAMPLES = {
    "queuescale": """\
  queuescale validate examples/orders-worker.yaml
  queuescale simulate --scenario flash-crowd --static 4 --report flash.html
  queuescale COMMAND --help""",
    "validate": """\
  queuescale validate examples/orders-worker.yaml
  queuescale validate -o json examples/*.yaml
  kubectl get queuescalers -A -o yaml | queuescale validate -""",
    "check": """\
  queuescale check examples/orders-worker.yaml --secrets examples/orders-worker-secret.yaml
  queuescale check examples/orders-worker.yaml --current-replicas 3 -o json
  QUEUESCALE_SECRET_ORDERS_QUEUE_CONNECTION_STRING="$CONN" queuescale check examples/orders-worker.yaml""",
    "simulate": """\
  queuescale simulate --list
  queuescale simulate --scenario flash-crowd --static 4 --report flash.html
  queuescale simulate --scenario flash-crowd --policy examples/latency-first.yaml -o json""",
    "run": """\
  queuescale run --kubeconfig ~/.kube/config --namespace shop
  queuescale run --leader-elect --log-format json""",
    "demo": """\
  queuescale demo
  queuescale demo --burst 200 --max-workers 16 --out /tmp/demo --no-live
  queuescale demo --scenario benchmarks/scenarios/fidelity/fidelity-burst-drain.yaml --out /tmp/live""",
    "convert-keda": """\
  queuescale convert-keda examples/keda/orders-scaledobject.yaml --out orders-queuescaler.yaml
  kubectl get scaledobject orders -o yaml | queuescale convert-keda - | queuescale validate -""",
    "record": """\
  queuescale record examples/orders-worker.yaml --secrets examples/orders-worker-secret.yaml --duration 1h --out t.csv
  queuescale record examples/orders-worker.yaml --duration 30m --out trace.csv --scenario replay.yaml""",
}


def _epilog(command: str) -> str:
    return "Examples:\n" + EXAMPLES[command]


def _command(commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, *, help: str,
             description: str) -> argparse.ArgumentParser:
    """A subcommand's parser, with the help layout and examples every command has."""
    return commands.add_parser(name, formatter_class=_HelpFormatter, epilog=_epilog(name), help=help,
                               description=description)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queuescale",
        description="Scale queue workers from the length of their queues.",
        formatter_class=_HelpFormatter, epilog=_epilog("queuescale"),
    )
    parser.add_argument("--version", action="version", version=f"queuescale {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    validate = _command(
        commands, "validate", help="check QueueScaler YAML files",
        description="Check QueueScaler YAML files; "
        "print every error as FILE: NAME: field.path: message; exit 1 on any error.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE",
                          help="YAML files of QueueScaler rules (a List's items too); - reads standard input")
    _add_output(validate, OUTPUTS, "one line per error", json_alias=False)
    validate.set_defaults(handler=_validate)

    check = _command(
        commands, "check", help="poll a rule's queues once and show the decision",
        description="Poll every source of every rule in RULE once (no cluster needed), print the counts or errors "
        "and what the policy would decide; exit 1 if any source did not answer. Secrets come from Secret "
        "manifests (--secrets, or in RULE) or from env QUEUESCALE_SECRET_<NAME>_<KEY>.",
    )
    check.add_argument("rule", metavar="RULE", help="a YAML file of QueueScaler rules; - reads standard input")
    check.add_argument("--secrets", metavar="SECRETS",
                       help="a YAML file of Kubernetes Secret manifests (default: those in RULE, then env "
                       "QUEUESCALE_SECRET_<NAME>_<KEY>)")
    check.add_argument("--current-replicas", type=_replicas, default=0, metavar="N",
                       help="the replica count to decide from (default 0)")
    _add_output(check, OUTPUTS, "a table for people; json is one object per rule, one per line", json_alias=True)
    check.set_defaults(handler=_check)

    simulate = _command(
        commands, "simulate", help="replay a queue workload against policies offline",
        description="Run a scenario (built-in name or YAML file) against QueueScaler rules and baselines "
        "(KEDA ScaledObject, static, AWS-style target tracking) on a virtual clock; compare cost and latency.",
    )
    simulate.add_argument("--scenario", metavar="NAME|FILE",
                          help="a built-in scenario (see --list) or a file (required unless --list)")
    simulate.add_argument("--policy", action="append", default=[], metavar="RULE.yaml",
                          help="QueueScaler rule file (repeatable; default: a rule sized from the scenario)")
    simulate.add_argument("--keda", action="append", default=[], metavar="SCALEDOBJECT.yaml",
                          help="a KEDA ScaledObject with azure-queue triggers to emulate (repeatable; default: none)")
    simulate.add_argument("--static", action="append", default=[], type=_replicas, metavar="N",
                          help="a fixed replica count (repeatable; default: none)")
    simulate.add_argument("--aws-target", action="append", default=[], type=_positive_float, metavar="N",
                          help="AWS-style target tracking on backlog per instance (repeatable; default: none)")
    simulate.add_argument("--seed", type=_replicas, metavar="N",
                          help="override the scenario's seed (default: the scenario's)")
    simulate.add_argument("--jobs", type=_positive_int, metavar="N",
                          help="run the policies in N processes (default: one per CPU)")
    _add_output(simulate, OUTPUTS, "a table for people; json and yaml are the metrics keyed by policy",
                json_alias=True)
    simulate.add_argument("-q", "--quiet", action="store_true",
                          help="no progress bar (default: one on a terminal, none when stderr is not one)")
    simulate.add_argument("--timeline", metavar="FILE.csv", help="write the timeline as CSV (default: not written)")
    simulate.add_argument("--report", metavar="FILE.html",
                          help="write a self-contained HTML report (default: not written)")
    simulate.add_argument("--list", action="store_true", help="list the built-in scenarios and exit")
    simulate.set_defaults(handler=_simulate, parser=simulate)
    _add_run(commands)
    _add_demo(commands)
    convert = _command(
        commands, "convert-keda", help="turn KEDA ScaledObjects into QueueScalers",
        description="Print the QueueScaler equivalent to each ScaledObject in the file (azure-queue, rabbitmq, "
        "redis, postgresql and aws-sqs-queue triggers); TriggerAuthentications and Deployments in the same file are "
        "used to find the Secrets. Whatever cannot be carried over is a warning on stderr, one line each; an object "
        "that cannot be converted is an error (the others still are) and the exit code is 1.",
    )
    convert.add_argument("scaledobject", metavar="SCALEDOBJECT.yaml",
                         help="KEDA ScaledObjects, with the TriggerAuthentications and Deployments they name; "
                         "- reads standard input")
    _add_output(convert, ("yaml", "json", "name"), "yaml", json_alias=False)
    convert.add_argument("--out", metavar="FILE", help="write the QueueScalers here (default: standard output)")
    convert.set_defaults(handler=_convert_keda)
    record = _command(
        commands, "record", help="record a rule's queue traffic as a simulator trace",
        description="Poll a rule's queues every polling interval for DURATION and write the estimated arrivals per "
        "interval as a trace (t,arrivals) that `queuescale simulate --scenario` can replay. Without "
        "--completion-rate the arrivals are the count's growth (a lower bound); see docs/workflow.md.",
    )
    record.add_argument("rule", metavar="RULE.yaml",
                        help="a YAML file with the QueueScaler to record; - reads standard input")
    record.add_argument("--duration", type=_duration, required=True, metavar="T",
                        help='how long to record, e.g. "1h", "30m" (required)')
    record.add_argument("--out", required=True, metavar="TRACE.csv", help="the trace to write (required)")
    record.add_argument("--secrets", metavar="SECRETS.yaml",
                        help="Kubernetes Secret manifests, as for check (default: those in RULE.yaml, then env "
                        "QUEUESCALE_SECRET_<NAME>_<KEY>)")
    record.add_argument("--counts", metavar="COUNTS.csv",
                        help="also write the raw counts of every poll (default: not written)")
    record.add_argument("--scenario", metavar="SCENARIO.yaml",
                        help="also write a scenario that replays the trace (default: not written)")
    record.add_argument("--completion-rate", type=float, metavar="R",
                        help="messages/s your workers complete while they have work (improves the estimate; "
                        "default: count growth only, a lower bound)")
    record.add_argument("--interval", type=_duration, metavar="T", help="poll this often (default: the rule's)")
    record.add_argument("--rule", dest="rule_name", metavar="NAME",
                        help="the rule to record, if the file has several (default: the file's only rule)")
    record.add_argument("-q", "--quiet", action="store_true",
                        help="only the closing summary: no progress bar, no line per poll (default: a bar on a "
                        "terminal, a line per poll otherwise)")
    record.set_defaults(handler=_record)
    for sub in commands.choices.values():
        sub.set_defaults(command_parser=sub)  # for errors worded with the command's own usage
    return parser


# What a shell reports for a process ended by SIGPIPE (128 + 13), as `yes | head -1` leaves in PIPESTATUS.
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """The `queuescale` command; returns the exit code."""
    try:
        try:
            return _dispatch(argv)
        finally:
            sys.stdout.flush()  # inside the try: a reader that went away shows here, not at interpreter exit
    except BrokenPipeError:
        # The reader closed the pipe early (`queuescale simulate --list | head -1`): that is not an error to
        # report. Point stdout at devnull so Python's own flush at exit does not fail again (the recipe of the
        # Python docs, "Note on SIGPIPE"), and exit as a shell expects of a process the pipe ended.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _dispatch(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # As `parse_args` would, but with the command's own usage: argparse leaves a flag no subcommand knows to
        # the top parser, whose usage does not show the command's options.
        command_parser: argparse.ArgumentParser = args.command_parser
        command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    return code
