"""What every `queuescale` command does as kubectl does: `-o json|yaml|wide|name`, `-` for standard input, results
on stdout and errors on stderr, exit 2 for a usage error and 1 for a failed check; an Examples section in every
--help; one style of durations and plurals; a progress bar only for a person at a terminal."""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import select
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from controller.cli import build_parser, main
from controller.model.textfmt import duration, offset, plural
from tests.azurite import Azurite
from tests.commandline import ROOT, environ, queuescale, queuescale_command, subcommands
from tests.helpers import new_queue, rule_yaml

ORDERS = "examples/orders-worker.yaml"
KEDA = "examples/keda/orders-scaledobject.yaml"

# A rule whose queue refuses the connection at once: `check` gets an answer (an error) without any wait.
UNREACHABLE_RULE = """\
apiVersion: queuescale.io/v1alpha1
kind: QueueScaler
metadata: {name: orders-worker, namespace: shop}
spec:
  scaleTargetRef: {name: orders-worker}
  maxReplicas: 5
  sources:
    - type: azure-queue
      queueName: orders
      connectionSecretRef: {name: orders-queue, key: connection-string}
"""
UNREACHABLE_ENV = {
    "QUEUESCALE_SECRET_ORDERS_QUEUE_CONNECTION_STRING":
        "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;QueueEndpoint=http://127.0.0.1:1/acct",
}


def output_choices(parser: argparse.ArgumentParser) -> tuple[str, ...]:
    for action in parser._actions:
        if "--output" in action.option_strings:
            return tuple(action.choices or ())
    return ()


@pytest.fixture
def unreachable_rule(tmp_path: Path) -> str:
    path = tmp_path / "rule.yaml"
    path.write_text(UNREACHABLE_RULE)
    return str(path)


# --------------------------------------------------------------------------------------------------------------
# -o: every command that prints objects or results


def test_every_command_that_prints_results_takes_o_as_kubectl_does() -> None:
    # kubectl's printers: json, yaml, name, wide (k8s.io/cli-runtime/pkg/genericclioptions/print_flags.go,
    # AllowedFormats, and kubectl get's HumanPrintFlags for wide).
    commands = subcommands(build_parser())
    with_output = {name for name, sub in commands.items() if output_choices(sub)}
    assert with_output == {"validate", "check", "simulate", "convert-keda"}
    for name in with_output:
        assert {"json", "yaml", "name"} <= set(output_choices(commands[name])), name
    for name in ("validate", "check", "simulate"):  # the commands that print a table
        assert "wide" in output_choices(commands[name]), name


def _invocation(command: str, rule: str) -> list[str]:
    return {
        "validate": ["validate", ORDERS],
        "check": ["check", rule],
        "simulate": ["simulate", "--scenario", "flash-crowd", "--static", "4"],
        "convert-keda": ["convert-keda", KEDA],
    }[command]


def _parses_as(output: str, text: str) -> None:
    if output == "json":
        for line in [text] if text.lstrip().startswith("{\n") else text.splitlines():
            json.loads(line)
    elif output == "yaml":
        assert [doc for doc in yaml.safe_load_all(text) if doc is not None]
    elif output == "name":
        assert all(re.fullmatch(r"[\w.:#-]+(/[\w.-]+)?", line) for line in text.splitlines()), text


FORMATS = [(command, output) for command, parser in sorted(subcommands(build_parser()).items())
           for output in output_choices(parser)]


@pytest.mark.parametrize(("command", "output"), FORMATS, ids=[f"{c} -o {o}" for c, o in FORMATS])
def test_each_output_format_prints_what_it_names(command: str, output: str, unreachable_rule: str) -> None:
    done = queuescale(*_invocation(command, unreachable_rule), "-o", output, env=UNREACHABLE_ENV)
    assert done.returncode == (1 if command == "check" else 0), done.stderr  # the queue refused: a failed check
    assert done.stdout.strip(), done.stderr
    _parses_as(output, done.stdout)
    assert "Traceback" not in done.stderr


def test_o_name_prints_kind_dot_group_slash_name() -> None:
    assert queuescale("validate", ORDERS, "-o", "name").stdout == "queuescaler.queuescale.io/orders-worker\n"
    assert queuescale("convert-keda", KEDA, "-o", "name").stdout == "queuescaler.queuescale.io/orders-worker\n"


@pytest.mark.parametrize("command", ["check", "simulate"])
def test_the_old_json_flag_is_o_json(command: str, unreachable_rule: str) -> None:
    args = _invocation(command, unreachable_rule)
    assert queuescale(*args, "--json", env=UNREACHABLE_ENV).stdout == queuescale(*args, "-o", "json", env=UNREACHABLE_ENV).stdout


def test_convert_keda_o_json_of_several_objects_is_a_list_validate_reads_back(tmp_path: Path) -> None:
    two = tmp_path / "two.yaml"
    text = (ROOT / KEDA).read_text()
    two.write_text(text + "\n---\n" + text.replace("name: orders-worker\n", "name: invoices-worker\n", 1))
    done = queuescale("convert-keda", str(two), "-o", "json")
    listed = json.loads(done.stdout)
    assert listed["kind"] == "List" and len(listed["items"]) == 2
    back = queuescale("validate", "-", stdin=done.stdout)
    assert back.returncode == 0, back.stdout + back.stderr
    assert "2 of 2 rules valid" in back.stderr


# --------------------------------------------------------------------------------------------------------------
# -: standard input for every file argument


def test_every_rule_file_argument_reads_standard_input_for_a_dash(unreachable_rule: str) -> None:
    text = (ROOT / ORDERS).read_text()
    assert queuescale("validate", "-", stdin=text).stderr == "1 of 1 rule valid\n"
    checked = queuescale("check", "-", "-o", "name", stdin=UNREACHABLE_RULE, env=UNREACHABLE_ENV)
    assert checked.stdout == "queuescaler.queuescale.io/orders-worker\n"
    converted = queuescale("convert-keda", "-", stdin=(ROOT / KEDA).read_text())
    assert converted.returncode == 0 and "kind: QueueScaler" in converted.stdout
    simulated = queuescale("simulate", "--scenario", "flash-crowd", "--policy", "-", "-o", "name", stdin=text)
    assert simulated.stdout == "orders-worker\n", simulated.stderr
    keda = queuescale("simulate", "--scenario", "flash-crowd", "--keda", "-", "-o", "name", stdin=(ROOT / KEDA).read_text())
    assert keda.stdout == "queuescale-default\nkeda:orders-worker\n", keda.stderr
    recorded = queuescale("record", "-", "--duration", "1s", "--out", os.devnull, stdin=UNREACHABLE_RULE,
                   env=UNREACHABLE_ENV)
    assert "shop/orders-worker: the first poll failed" in recorded.stderr  # the rule came from stdin


def test_check_reads_its_secrets_from_standard_input(unreachable_rule: str) -> None:
    secret = "kind: Secret\nmetadata: {name: orders-queue}\nstringData: {connection-string: 'QueueEndpoint=x'}\n"
    done = queuescale("check", unreachable_rule, "--secrets", "-", stdin=secret)
    assert "SecretNotFound" not in done.stdout, done.stdout  # the Secret on stdin was found


# --------------------------------------------------------------------------------------------------------------
# Exit codes and streams


@pytest.mark.parametrize("command", sorted(subcommands(build_parser())))
def test_a_usage_error_exits_2_with_the_usage_on_stderr_for_every_command(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--no-such-flag"])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"usage: queuescale {command}")


@pytest.mark.parametrize("args", [
    ["simulate", "--scenario", "flash-crowd", "--seed", "-1"],
    ["simulate", "--scenario", "flash-crowd", "--static", "-3"],
    ["simulate", "--scenario", "flash-crowd", "--aws-target", "0"],
    ["validate", ORDERS, "-o", "table"],
    ["record", ORDERS, "--duration", "1h"],  # --out is required
], ids=lambda args: " ".join(args[-2:]))
def test_a_bad_flag_value_is_a_usage_error_too(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("args", "flag"), [
    (["demo", "--burst", "0", "--out", os.devnull], "--burst"),
    (["record", ORDERS, "--duration", "0", "--out", os.devnull], "--duration"),
], ids=["demo --burst", "record --duration"])
def test_an_option_value_checked_after_parsing_is_a_usage_error_too(args: list[str], flag: str) -> None:
    done = queuescale(*args)
    assert done.returncode == 2
    assert done.stdout == "" and f"{flag}: must be" in done.stderr


@pytest.mark.parametrize("args", [
    ["check", "missing.yaml"],
    ["convert-keda", "missing.yaml"],
    ["simulate", "--scenario", "missing.yaml"],
    ["simulate", "--scenario", "flash-crowd", "--policy", "missing.yaml"],
    ["record", "missing.yaml", "--duration", "1s", "--out", os.devnull],
], ids=lambda args: " ".join(args[:2]))
def test_an_input_that_cannot_be_read_is_an_error_on_stderr_and_exit_1(args: list[str]) -> None:
    # validate is the exception by design: its findings, a file it cannot read among them, are its result.
    done = queuescale(*args)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "missing.yaml" in done.stderr and "Traceback" not in done.stderr


def test_a_failed_check_exits_1_with_the_result_on_stdout(unreachable_rule: str) -> None:
    done = queuescale("check", unreachable_rule, env=UNREACHABLE_ENV)
    assert done.returncode == 1
    assert "orders-worker" in done.stdout and "error" in done.stdout
    assert done.stderr == "1 of 1 rule had a source that did not answer\n"


# --------------------------------------------------------------------------------------------------------------
# validate: empty files, Lists, duplicate keys, one error per problem


def test_validate_says_a_file_is_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n---\n")
    done = queuescale("validate", str(empty))
    assert done.stderr.splitlines()[0] == f"{empty}: empty: no objects in this file"


def test_validate_checks_the_items_of_a_list_as_kubectl_flattens_it(tmp_path: Path) -> None:
    # kubectl apply -f of a `kind: List` applies its items (k8s.io/cli-runtime/pkg/resource/visitor.go,
    # FlattenListVisitor), so `kubectl get qs -o yaml` output is a file of rules.
    rule = yaml.safe_load((ROOT / ORDERS).read_text())
    broken = {**rule, "metadata": {"name": "broken"}, "spec": {**rule["spec"], "maxReplicas": -1}}
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [rule, broken, "text"]}))
    done = queuescale("validate", str(listed))
    assert done.returncode == 1
    assert f"{listed}: document 1 is a List of 3 items: each item is checked" in done.stderr
    assert f"{listed}: document 1 (List): items[2] is not an object" in done.stdout
    assert any(line.startswith(f"{listed}: broken: spec.maxReplicas:") for line in done.stdout.splitlines())
    assert "1 of 2 rules valid" in done.stderr


def test_a_duplicate_key_is_an_error_with_both_lines_as_strict_field_validation_refuses_it(tmp_path: Path) -> None:
    # A server with fieldValidation=Strict (the kubectl default since 1.27) refuses a duplicate key:
    # sigs.k8s.io/yaml's strict unmarshal reports `key "x" already set in map` with its line.
    text = (ROOT / ORDERS).read_text()
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("maxReplicas:"))
    lines.insert(at + 1, lines[at].replace(lines[at].split(":", 1)[1], " 99"))
    duplicated = tmp_path / "dup.yaml"
    duplicated.write_text("\n".join(lines) + "\n")
    done = queuescale("validate", str(duplicated))
    assert done.returncode == 1
    assert done.stdout == f'{duplicated}: line {at + 2}: duplicate key "maxReplicas" (already set on line {at + 1})\n'


def test_a_merge_key_overridden_on_purpose_is_not_a_duplicate(tmp_path: Path) -> None:
    anchored = tmp_path / "anchored.yaml"
    anchored.write_text("base: &base {a: 1, b: 2}\nother:\n  <<: *base\n  a: 3\n")
    assert queuescale("validate", str(anchored)).stdout == ""


def test_a_missing_parent_is_one_error_not_one_more_for_its_child(tmp_path: Path) -> None:
    rule = yaml.safe_load((ROOT / ORDERS).read_text())
    del rule["spec"]["scaleTargetRef"]
    path = tmp_path / "rule.yaml"
    path.write_text(yaml.safe_dump(rule))
    done = queuescale("validate", str(path))
    assert done.stdout == f"{path}: orders-worker: spec.scaleTargetRef: is required\n"
    assert "1 error;" in done.stderr


# --------------------------------------------------------------------------------------------------------------
# --help: an Examples section whose commands parse


def _example_commands(help_text: str) -> list[list[str]]:
    section = help_text.split("Examples:\n", 1)[1]
    commands = []
    for line in section.splitlines():
        for part in line.split("|"):
            words = shlex.split(part)
            while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                words.pop(0)  # an environment variable set for the command
            if words and words[0] == "queuescale":
                commands.append(words[1:])
    return commands


def test_every_help_has_an_examples_section_whose_commands_parse_and_files_exist() -> None:
    parser = build_parser()
    helps = {"queuescale": parser.format_help(),
             **{name: sub.format_help() for name, sub in subcommands(parser).items()}}
    for name, text in helps.items():
        assert "\nExamples:\n" in text, name
        examples = _example_commands(text)
        assert examples, name
        for args in examples:
            if args[-1:] == ["--help"]:
                continue
            build_parser().parse_args([word for word in args if word != "COMMAND"])
            for word in args:
                if word.startswith("examples/"):
                    assert list(ROOT.glob(word)), f"{name}: {word}"


def test_the_example_walker_can_fail() -> None:
    [args] = _example_commands("Examples:\n  X=1 queuescale simulate --no-such-flag | head\n")
    assert args == ["simulate", "--no-such-flag"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(args)


# --------------------------------------------------------------------------------------------------------------
# Units: one style of durations, plurals that agree


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (0.25, "0.25s"), (0.999, "0.999s"), (9, "9s"), (12.5, "12.5s"), (59.94, "59.9s"), (59.96, "1m"),
    (90, "1m30s"), (13, "13s"), (3600, "1h"), (3 * 3600 + 37 * 60, "3h37m"), (7 * 86400, "7d"),
    (2 * 86400 + 3 * 3600 + 4 * 60, "2d3h"),
])
def test_durations_have_one_style_at_every_scale(seconds: float, shown: str) -> None:
    # The issue's examples: `999ms` beside `9s`, and a 13-second scenario as `0.00361111 h`.
    assert duration(seconds) == shown


def test_plurals_agree_with_their_count() -> None:
    assert [plural(n, "rule") for n in (0, 1, 2)] == ["0 rules", "1 rule", "2 rules"]
    assert plural(1, "policy", "policies") == "1 policy" and plural(3, "policy", "policies") == "3 policies"
    assert plural(1500, "message") == "1,500 messages" and plural(1.5, "message") == "1.5 messages"
    assert offset(12.25) == "+ 12.2s" and offset(90) == "+ 1m30s"


# The files whose printed text was moved onto controller/model/textfmt.py; a duration printed with a bare format spec
# and a unit (`{x:g}s`, `{x / 3600:g} h`, `{x:.1f}s`) is the inconsistency coming back.
FORMATTED_FILES = ["controller/cli.py", "controller/commands/check.py", "controller/commands/record.py", "controller/model/loading.py",
                   "controller/commands/simulate.py", "controller/simulator/report.py", "controller/demo/report.py",
                   "controller/demo/run.py", "controller/reconciler.py", "controller/report/status.py",
                   "controller/simulator/scenario.py", "controller/sources/aws_sqs.py",
                   "controller/sources/azure_queue.py", "controller/sources/retries.py", "controller/sources/rabbitmq.py",
                   "controller/sources/redis_list.py"]
AD_HOC_DURATION = re.compile(r"\{[^{}]*:[.0-9,]*[gfd]\}\s?(?:s|ms|h|min)\b|\{[^{}]*/ 3600[^{}]*\}")


@pytest.mark.parametrize("path", FORMATTED_FILES)
def test_printed_durations_go_through_the_one_helper(path: str) -> None:
    found = [line.strip() for line in (ROOT / path).read_text().splitlines() if AD_HOC_DURATION.search(line)]
    assert found == []


def test_the_ad_hoc_duration_pattern_finds_the_old_forms() -> None:
    for old in ('f"{scenario.duration / 3600:g} h"', 'f"within {budget:g}s"', 'f"+{t:7.1f}s"'):
        assert AD_HOC_DURATION.search(old), old


def test_policy_messages_agree_in_number() -> None:
    """`holding 1 replica`, not `holding 1 replicas` (what a paused rule's status said)."""
    from controller.model.readings import Observation, ScalingMemory
    from controller.model.rule import parse_queuescaler
    from controller.policy import decide

    rule = parse_queuescaler({
        "apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler",
        "metadata": {"name": "r", "namespace": "ns", "annotations": {"queuescale.io/paused": "true"}},
        "spec": {"scaleTargetRef": {"name": "w"}, "maxReplicas": 5,
                 "sources": [{"type": "azure-queue", "queueName": "orders",
                              "connectionSecretRef": {"name": "s", "key": "k"}}]}})
    assert rule.paused
    decision = decide(rule.spec, Observation(time=0.0, readings=()), [], 1, ScalingMemory(), 0.0, paused=True)
    assert decision.message == "paused: holding 1 replica"


def test_simulate_prints_a_short_scenario_in_seconds_not_a_fraction_of_an_hour(tmp_path: Path) -> None:
    scenario = tmp_path / "short.yaml"
    scenario.write_text("name: short\nduration: 13s\nseed: 1\nslo: {waitSeconds: 30}\n"
                        "arrivals: [{type: burst, at: 0, messages: 5}]\n"
                        "workers: {startupDelay: 1s, serviceTime: 1s, maxReplicas: 2}\n")
    done = queuescale("simulate", "--scenario", str(scenario), "--static", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "scenario short: 13s, seed 1, SLO wait 30s"


# --------------------------------------------------------------------------------------------------------------
# Progress: a bar on a terminal, nothing when not one or with --quiet


def run_on_a_terminal(args: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> tuple[int, str, str]:
    """Run with stderr on a pseudo-terminal (what a person sees) and stdout on a pipe; (code, stdout, terminal)."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(queuescale_command(*args), cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=terminal, stdin=subprocess.DEVNULL, text=False,
                               env={**environ(), "COLUMNS": "120", "TERM": "xterm", **(env or {})})
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the other side closed
                    break
                if not chunk:
                    break
                seen += chunk
            elif process.poll() is not None:
                break
        assert process.stdout is not None
        stdout = process.stdout.read().decode()
        code = process.wait(timeout=30)
    finally:
        os.close(controller)
        if process.poll() is None:
            process.kill()
            process.wait()
    return code, stdout, seen.decode(errors="replace")


BAR = "━"  # rich's bar


def test_simulate_draws_a_progress_bar_on_a_terminal_and_says_where_it_wrote(tmp_path: Path) -> None:
    report, timeline = tmp_path / "r.html", tmp_path / "t.csv"
    code, stdout, terminal = run_on_a_terminal(["simulate", "--scenario", "flash-crowd", "--static", "4",
                                                "--report", str(report), "--timeline", str(timeline)])
    assert code == 0, terminal
    assert BAR in terminal and "100%" in terminal and "simulating flash-crowd (6h, 2 policies)" in terminal
    assert f"report: {report}" in terminal and f"timeline: {timeline}" in terminal
    assert BAR not in stdout and "\x1b[" not in stdout  # the table on stdout stays plain


def test_simulate_quiet_on_a_terminal_draws_no_bar() -> None:
    code, _, terminal = run_on_a_terminal(["simulate", "--scenario", "flash-crowd", "--static", "4", "--quiet"])
    assert code == 0
    assert BAR not in terminal and "%" not in terminal


def test_simulate_into_a_pipe_draws_no_bar_but_says_where_it_wrote(tmp_path: Path) -> None:
    done = queuescale("simulate", "--scenario", "flash-crowd", "--static", "4", "--report", str(tmp_path / "r.html"))
    assert done.returncode == 0
    assert done.stderr == f"report: {tmp_path / 'r.html'}\n"  # no bar, no \r, no escape codes in a log


def test_record_draws_a_bar_on_a_terminal_and_lines_into_a_pipe(azurite: Azurite, tmp_path: Path) -> None:
    queue = new_queue(azurite)
    queue.send_message("waiting")
    rule = tmp_path / "rule.yaml"
    rule.write_text(rule_yaml(azurite, queue.queue_name))
    args = ["record", str(rule), "--duration", "2s", "--out", str(tmp_path / "t.csv")]
    code, stdout, terminal = run_on_a_terminal(args)
    assert code == 0, terminal
    assert BAR in terminal and "recording" in terminal and "of 2s" in terminal
    assert "count 1 (the baseline" in terminal  # the lines still show, above the bar
    assert "recorded " in stdout and "trace written to" in stdout

    piped = queuescale(*args)
    assert piped.returncode == 0, piped.stderr
    assert BAR not in piped.stderr and "\r" not in piped.stderr and "\x1b[" not in piped.stderr
    assert re.search(r"^\+ +0s  count 1 \(the baseline", piped.stderr, re.M), piped.stderr

    quiet = queuescale(*args, "--quiet")
    assert quiet.returncode == 0
    assert quiet.stderr == ""
    assert quiet.stdout.startswith("recorded ")
