"""Running `queuescale` as a user does: `python -m controller` in a subprocess from the repository root, with none
of the caller's `QUEUESCALE_SECRET_*` variables; and whether a process a command started is still alive."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def queuescale_command(*args: str) -> list[str]:
    """The command line of `queuescale ARGS...` for this checkout."""
    return [sys.executable, "-m", "controller", *args]


def environ() -> dict[str, str]:
    """Our environment without queuescale secrets, so a test sees only the secrets it sets."""
    return {k: v for k, v in os.environ.items() if not k.startswith("QUEUESCALE_SECRET_")}


def queuescale(*args: str, stdin: str | None = None, env: dict[str, str] | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`queuescale ARGS...` run to its end; `env` is added to `environ()`."""
    return subprocess.run(queuescale_command(*args), cwd=ROOT, capture_output=True, text=True, input=stdin,
                          timeout=timeout, check=False, env={**environ(), **(env or {})})


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser by name."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def alive(pid: int) -> bool:
    """Exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def run_check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`queuescale check ARGS...` run to its end."""
    return queuescale("check", *args, env=env, timeout=60)


def rule_file(name: str, sources: str, *, namespace: str = "shop", extra: str = "") -> str:
    """A rule file's text for `queuescale check`: rule `name` around the given `sources:` lines (and `extra`)."""
    return f"""
apiVersion: queuescale.io/v1alpha1
kind: QueueScaler
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  scaleTargetRef: {{name: {name}}}
  maxReplicas: 20
  pollingInterval: 5s
  policy: {{targetPerReplica: 5}}
  sources:
{sources}{extra}
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    """Write `text` to `tmp_path/name`; its path, as a command's argument."""
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def started_pids(summary: dict[str, object]) -> list[int]:
    """Every PID a live demo's summary says it started: Azurite and each worker."""
    azurite = summary["azurite"]
    workers = summary["worker_processes"]
    assert isinstance(azurite, dict) and isinstance(workers, list)
    return [int(azurite["pid"]), *(int(w["pid"]) for w in workers)]
