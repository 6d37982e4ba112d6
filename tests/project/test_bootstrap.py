"""scripts/bootstrap's apt part (scripts/apt-install) against a stand-in apt-get that holds apt's locks as a real
one running elsewhere does: it waits, bounded, and the demo installs only what the demo needs."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests.azurite import ROOT

APT_INSTALL = ROOT / "scripts" / "apt-install"
LISTS_LOCKED = "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 2023 (apt-get)"

# apt-get as it behaves while another apt-get holds the lists lock: `update` fails at once with "Could not get
# lock" (DPkg::Lock::Timeout covers the dpkg locks only: apt-pkg/deb/debsystem.cc, debSystem::Lock), exit 100.
FAKE_APT_GET = """#!/usr/bin/env bash
echo "$*" >> "$APT_CALLS"
if [ "$1 $2 $3" = "-o DPkg::Lock::Timeout=${EXPECTED_TIMEOUT} update" ] || [ "$1" = "update" ]; then
  held=$(cat "$LOCK_HELD_FOR")
  if [ "$held" != "0" ]; then
    [ "$held" != "forever" ] && echo $((held - 1)) > "$LOCK_HELD_FOR"
    echo "$LOCKED_MESSAGE" >&2
    exit 100
  fi
fi
exit 0
"""


def apt_install(tmp_path: Path, *, held_for: str, timeout: str = "300",
                locked_message: str = LISTS_LOCKED) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """`apt_install_packages redis-server` from scripts/apt-install, with the stand-in apt-get first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "apt-get"
    fake.write_text(FAKE_APT_GET)
    fake.chmod(0o755)
    calls, lock = tmp_path / "calls", tmp_path / "lock"
    calls.write_text("")
    lock.write_text(held_for)
    environ = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "APT_CALLS": str(calls),
               "LOCK_HELD_FOR": str(lock), "LOCKED_MESSAGE": locked_message, "EXPECTED_TIMEOUT": timeout,
               "QUEUESCALE_APT_LOCK_TIMEOUT": timeout, "QUEUESCALE_APT_LOCK_POLL": "0.1"}
    done = subprocess.run(["bash", "-c", f'source "{APT_INSTALL}" && apt_install_packages redis-server'],
                          env=environ, capture_output=True, text=True, timeout=60, check=False)
    return done, calls.read_text().splitlines()


def test_apt_get_update_waits_while_another_apt_holds_the_lists_lock(tmp_path: Path) -> None:
    done, calls = apt_install(tmp_path, held_for="2")
    assert done.returncode == 0, done.stderr
    assert calls == [
        "-o DPkg::Lock::Timeout=300 update -qq",
        "-o DPkg::Lock::Timeout=300 update -qq",
        "-o DPkg::Lock::Timeout=300 update -qq",
        # apt >= 1.9.11 waits for the dpkg frontend lock itself with this option (apt merge request 109)
        "-o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends redis-server",
    ]
    assert done.stderr.count("holds apt's lock; waiting for it (at most 300s)") == 1


def test_the_wait_for_the_lock_is_bounded(tmp_path: Path) -> None:
    started = time.monotonic()
    done, calls = apt_install(tmp_path, held_for="forever", timeout="1")
    assert done.returncode == 1
    assert time.monotonic() - started < 20
    assert "still holds apt's lock after 1s" in done.stderr
    assert not any(" install " in call for call in calls)


def test_an_apt_error_that_is_not_a_lock_fails_at_once_with_apts_words(tmp_path: Path) -> None:
    done, calls = apt_install(tmp_path, held_for="forever", locked_message="E: Some index files failed to download")
    assert done.returncode == 1
    assert len(calls) == 1
    assert "E: Some index files failed to download" in done.stderr


def packages(purpose: str) -> list[str]:
    done = subprocess.run(["bash", str(APT_INSTALL), "--list", purpose], capture_output=True, text=True, timeout=60,
                          check=True)
    return [word for line in done.stdout.splitlines() for word in line.split("\t")[0].split()]


def test_the_demo_installs_only_what_the_demo_needs_and_the_tests_everything() -> None:
    servers = {"redis-server", "postgresql", "rabbitmq-server"}
    assert set(packages("demo")) == {"python3", "python3-venv", "nodejs", "npm"}
    assert set(packages("test")) == set(packages("demo")) | servers
    assert "bash scripts/bootstrap --for demo" in (ROOT / "scripts" / "demo").read_text()
    assert "bash scripts/bootstrap --for test" in (ROOT / "scripts" / "test").read_text()


def test_bootstrap_refuses_an_unknown_purpose_before_installing_anything() -> None:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap"), "--for", "everything"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr == "bootstrap: --for must be demo or test, got 'everything'\n"
