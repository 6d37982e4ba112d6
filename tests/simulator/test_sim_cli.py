"""`queuescale simulate` end to end, in a subprocess, as a user runs it."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

from tests.commandline import queuescale

KEYS = {"worker_seconds", "busy_worker_seconds", "efficiency", "wait_p50", "wait_p95", "wait_p99", "wait_max",
        "slo_violation_seconds", "scale_actions", "direction_reversals", "duplicate_deliveries", "expired_messages",
        "messages_arrived", "messages_processed"}


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return queuescale("simulate", *args)


def test_json_timeline_and_report_for_a_rule_and_the_baselines(tmp_path: Path) -> None:
    timeline, report = tmp_path / "timeline.csv", tmp_path / "report.html"
    done = simulate("--scenario", "flash-crowd", "--policy", "examples/orders-worker.yaml",
                    "--keda", "examples/keda/orders-scaledobject.yaml", "--static", "12", "--aws-target", "4",
                    "--json", "--timeline", str(timeline), "--report", str(report))
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert list(results) == ["orders-worker", "keda:orders-worker", "static-12", "aws-target-4"]
    for metrics in results.values():
        assert set(metrics) >= KEYS
        assert metrics["messages_arrived"] == results["static-12"]["messages_arrived"]  # the same arrivals
    assert results["static-12"]["scale_actions"] == 0

    with timeline.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["t", "policy", "arrivals", "visible", "approximate_count", "in_flight", "desired",
                             "ready_replicas"]
    assert {r["policy"] for r in rows} == set(results)
    assert sum(int(r["arrivals"]) for r in rows if r["policy"] == "static-12") == \
        results["static-12"]["messages_arrived"]

    page = report.read_text(encoding="utf-8")
    assert page.count("<svg") >= 5
    for label in results:
        assert label in page
    assert "<script" not in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_the_default_rule_runs_alone_and_prints_a_table() -> None:
    done = simulate("--scenario", "trickle-spikes", "--seed", "4")
    assert done.returncode == 0, done.stderr
    assert "queuescale-default" in done.stdout
    assert "wait p99 (s)" in done.stdout


def test_list_shows_every_built_in_scenario() -> None:
    done = simulate("--list")
    assert done.returncode == 0
    for name in ("flash-crowd", "photo-mosaic", "nightly-batch", "trickle-spikes", "diurnal-web"):
        assert name in done.stdout


def test_a_bad_scenario_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("duration: 1h\nworkers: {concurrency: zero}\narrivals: [{type: poisson, rate: -2}]\n",
                   encoding="utf-8")
    done = simulate("--scenario", str(bad))
    assert done.returncode == 1
    assert "workers.concurrency: must be an integer" in done.stderr
    assert "arrivals[0].rate: must be >= 0" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_scaled_object_and_a_bad_rule_are_clear_errors(tmp_path: Path) -> None:
    so = tmp_path / "so.yaml"
    so.write_text("apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\n"
                  "spec: {scaleTargetRef: {name: w}, triggers: [{type: azure-queue, metadata: {queueLength: '5'}}]}\n",
                  encoding="utf-8")
    done = simulate("--scenario", "flash-crowd", "--keda", str(so))
    assert done.returncode == 1
    assert "spec.triggers[0].metadata.queueName: is required" in done.stderr
    done = simulate("--scenario", "flash-crowd", "--policy", "tests/data/broken-rules.yaml")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip()
