"""What every `queuescale` command does as a Unix command: output piped into a reader that stops early, a help
line and a default for every option, exit 2 for a usage error."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from pathlib import Path

import pytest

from controller.cli import build_parser
from tests.commandline import ROOT, queuescale, queuescale_command, subcommands


def run_into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run with stdout on a pipe whose reader is gone before the command writes a byte (`... | head -0`)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(queuescale_command(*args), cwd=ROOT, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [
    ["simulate", "--list"],
    ["simulate", "--scenario", "flash-crowd", "--static", "4", "--json"],
    ["validate", "tests/data/broken-rules.yaml"],
    ["convert-keda", "examples/keda/orders-scaledobject.yaml"],
], ids=lambda args: " ".join(args[:2]))
def test_a_reader_that_stops_early_ends_the_command_quietly_as_sigpipe_does(args: list[str]) -> None:
    # A C program killed by SIGPIPE exits silently and the shell reports 128 + 13; Python ignores SIGPIPE and
    # raises BrokenPipeError instead, which without handling is a traceback (docs.python.org/3/library/signal.html,
    # "Note on SIGPIPE").
    done = run_into_a_closed_pipe(*args)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr
    assert "BrokenPipeError" not in done.stderr
    assert "Exception ignored" not in done.stderr


def test_the_demo_into_a_closed_pipe_ends_quietly_and_starts_nothing_it_leaves(tmp_path: Path) -> None:
    done = run_into_a_closed_pipe("demo", "--out", str(tmp_path / "demo"), "--no-live")
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""  # not "demo: failed: BrokenPipeError"


@pytest.mark.parametrize("args", [["--help"], ["simulate", "--help"], ["run", "--help"]])
def test_help_into_a_closed_pipe_is_quiet(args: list[str]) -> None:
    # argparse itself ignores an OSError while printing help (Lib/argparse.py, ArgumentParser._print_message)
    # and exits 0: what matters is that nothing is printed about it.
    done = run_into_a_closed_pipe(*args)
    assert done.returncode in (0, 141)
    assert done.stderr == ""


# --------------------------------------------------------------------------------------------------------------
# --help: every argument says what it is, and every option that takes a value says its default


def _help_problems(name: str, parser: argparse.ArgumentParser) -> list[str]:
    problems = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction):
            continue
        flag = "/".join(action.option_strings) or action.metavar or action.dest
        text = (action.help or "") % {"default": action.default} if action.help else ""
        if not re.sub(r"\(?\bdefault\b[^)]*\)?", "", text).strip(" ;,()"):
            problems.append(f"{name} {flag}: no help line")
        takes_value = action.option_strings and action.nargs != 0
        if takes_value and not action.required and not re.search(r"\bdefault\b|\brequired\b", text):
            problems.append(f"{name} {flag}: the help does not show the default ({action.default!r})")
    return problems


def test_every_argument_of_every_command_has_a_help_line_and_its_default() -> None:
    parser = build_parser()
    commands = subcommands(parser)
    assert set(commands) >= {"validate", "check", "simulate", "run", "demo", "convert-keda", "record"}
    problems = [p for name, sub in commands.items() for p in _help_problems(name, sub)]
    assert problems == []


def test_the_help_walker_finds_a_flag_without_help_or_default() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--metrics-port", type=int, default=8080)
    parser.add_argument("--lease-name", default="x", help="the Lease's name")
    assert _help_problems("run", parser) == [
        "run --metrics-port: no help line",
        "run --metrics-port: the help does not show the default (8080)",
        "run --lease-name: the help does not show the default ('x')",
    ]


def test_run_help_shows_the_defaults_of_the_lease_ports_and_log_format() -> None:
    done = queuescale("run", "--help", env={"COLUMNS": "200"}, timeout=60)
    assert done.returncode == 0
    entries: dict[str, str] = {}  # "--flag METAVAR" -> its help, joined over argparse's wrapped lines
    for line in done.stdout.splitlines():
        if line.startswith("  -"):
            flag, _, text = line.strip().partition("  ")
            entries[flag] = text
            last = flag
        elif line.startswith("    ") and entries:
            entries[last] += " " + line.strip()
    for flag in ("--lease-duration T", "--metrics-port PORT", "--health-port PORT", "--log-format {text,json}"):
        assert "default" in entries[flag], entries[flag]


def test_simulate_without_a_scenario_is_a_usage_error() -> None:
    done = queuescale("simulate", timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "give --scenario NAME|FILE" in done.stderr and done.stderr.startswith("usage: ")
