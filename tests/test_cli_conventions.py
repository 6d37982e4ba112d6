"""What every `queuescale` command does as a Unix command: output piped into a reader that stops early."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run with stdout on a pipe whose reader is gone before the command writes a byte (`... | head -0`)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "controller", *args], cwd=ROOT, stdout=write_end,
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


@pytest.mark.parametrize("args", [["--help"], ["simulate", "--help"], ["run", "--help"]])
def test_help_into_a_closed_pipe_is_quiet(args: list[str]) -> None:
    # argparse itself ignores an OSError while printing help (Lib/argparse.py, ArgumentParser._print_message)
    # and exits 0: what matters is that nothing is printed about it.
    done = run_into_a_closed_pipe(*args)
    assert done.returncode in (0, 141)
    assert done.stderr == ""
