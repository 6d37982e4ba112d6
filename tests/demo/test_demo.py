"""`queuescale demo` end to end in a subprocess, with short timings: real Azurite, real workers, real reconciler."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from controller.sources.azure_auth import DEV_ACCOUNT_KEY
from tests.azurite import ROOT
from tests.commandline import alive, queuescale_command, started_pids

QUICK = [
    "--burst", "24", "--burst-at", "1", "--second-burst", "0", "--work-time", "0.2", "--polling-interval", "1",
    "--max-workers", "4", "--target-per-replica", "8", "--scale-down-delay", "2", "--scale-to-zero-delay", "2",
    "--no-live",
]


def demo_command(out: Path, *args: str) -> list[str]:
    return queuescale_command("demo", "--out", str(out), *args)


def test_demo_scales_up_for_the_burst_and_back_to_zero_then_stops_everything(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = subprocess.run(demo_command(out, *QUICK, "--max-duration", "120"), cwd=ROOT, capture_output=True,
                          text=True, timeout=200, check=False)
    assert done.returncode == 0, done.stdout + done.stderr

    summary = json.loads((out / "demo-summary.json").read_text())
    assert summary["outcome"] == "settled"
    assert summary["messages_sent"] == 24
    assert summary["messages_processed"] == 24
    events = summary["scale_events"]
    assert events[0]["from"] == 0 and events[0]["to"] >= 1
    assert max(e["to"] for e in events) >= 2, "24 messages at 8 per worker should ask for 3 workers"
    assert events[-1]["to"] == 0
    assert summary["peak_workers"] <= 4
    assert summary["final_workers"] == 0
    assert f"workers 0 -> {summary['peak_workers']} -> 0 (" in done.stdout

    pids = started_pids(summary)
    assert len(pids) >= 3
    assert [pid for pid in pids if alive(pid)] == []
    assert all(not w["killed"] for w in summary["worker_processes"]), "workers should stop on SIGTERM"

    report = Path(summary["report"])
    assert report == out / "demo-report.html"
    page = report.read_text()
    assert page.count("<svg") == 3
    assert "ActivatedFromZero" in page and "ScaledToZero" in page
    assert f"report: {report}" in done.stdout
    for text in (done.stdout, done.stderr, page, (out / "demo-summary.json").read_text(),
                 (out / "demo-timeline.csv").read_text(), (out / "demo-rule.yaml").read_text()):
        assert DEV_ACCOUNT_KEY not in text
        assert "AccountKey" not in text


def test_ctrl_c_stops_azurite_and_the_workers_and_still_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    options = [*QUICK, "--burst", "200", "--work-time", "1", "--max-duration", "120"]
    process = subprocess.Popen(demo_command(out, *options), cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 90
        for line in process.stdout:  # wait until workers are running
            if re.search(r"0 -> \d+ workers", line):
                break
            assert time.monotonic() < deadline
        time.sleep(1.0)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stdout + stderr
    summary = json.loads((out / "demo-summary.json").read_text())
    assert summary["outcome"] == "interrupted"
    assert summary["messages_processed"] < 200
    # The rule still had workers when Ctrl-C came: the closing line says so, and that the clean-up stopped them,
    # instead of "-> 0" as if the policy had scaled them in.
    final = summary["final_workers"]
    assert final >= 1
    assert (f"workers 0 -> {summary['peak_workers']} -> {final} when the demo ended (the clean-up stopped the "
            f"{final} still running)") in stdout
    pids = started_pids(summary)
    assert len(pids) >= 2
    assert [pid for pid in pids if alive(pid)] == []
    assert (out / "demo-report.html").exists()


def test_bad_options_name_the_option(tmp_path: Path) -> None:
    done = subprocess.run(demo_command(tmp_path, "--burst", "0", "--max-workers", "0"), cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--burst: must be >= 1, got 0" in done.stderr
    assert "--max-workers: must be 1 to 64, got 0" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_azurite_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "AZURITE_QUEUE_BIN": str(tmp_path / "no-azurite")}
    done = subprocess.run(demo_command(tmp_path / "demo", *QUICK), cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert f"azurite-queue not found at {tmp_path / 'no-azurite'}" in done.stderr
    assert "Traceback" not in done.stderr
