"""A pytest run stopped by SIGTERM stops the servers its fixtures started (tests/stop_on_term.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SESSION = '''
import subprocess, time
from pathlib import Path
import pytest

@pytest.fixture(scope="session")
def server():
    process = subprocess.Popen(["sleep", "120"])
    Path("server.pid").write_text(str(process.pid))
    yield process
    process.terminate()
    process.wait(10)

def test_long(server):
    Path("started").write_text("yes")
    time.sleep(60)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child of a dead pytest is reaped by init; a zombie still answers signal 0, so read its state.
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split(")")[-1].split()[0] != "Z"


def test_a_sigterm_tears_the_fixtures_down_so_the_servers_they_started_stop(tmp_path: Path) -> None:
    (tmp_path / "test_session.py").write_text(SESSION)
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "tests.stop_on_term", "-p", "no:cacheprovider",
                            "--rootdir", str(tmp_path), "test_session.py"],
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    server = 0
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert run.poll() is None, run.communicate()[0].decode()
            assert time.monotonic() < deadline, "the test session never started"
            time.sleep(0.1)
        server = int((tmp_path / "server.pid").read_text())
        assert _alive(server)
        run.send_signal(signal.SIGTERM)
        output = run.communicate(timeout=30)[0].decode()
        assert run.returncode != 0, output  # interrupted, not passed
        assert not _alive(server), f"the fixture's server outlived pytest:\n{output}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if server and _alive(server):
            os.kill(server, signal.SIGKILL)


def test_this_run_has_the_handler_too() -> None:
    # tests/conftest.py takes the plugin's hooks in, so the suite itself is stopped the same way.
    from tests import stop_on_term
    assert signal.getsignal(signal.SIGTERM) is stop_on_term._interrupt
