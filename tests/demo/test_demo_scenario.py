"""`queuescale demo --scenario FILE --policy RULE` end to end in a subprocess: a small scenario run live on real
Azurite with real worker processes and the real reconciler, measured as the simulator measures (under 40 s)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import fields
from pathlib import Path

from controller.commands.simulate import load_rules
from controller.demo.live import COMPARED, simulated_spread
from controller.simulator.run import Metrics
from controller.simulator.scenario import load_scenario, plan_arrivals
from controller.sources.azure_auth import DEV_ACCOUNT_KEY
from tests.azurite import ROOT
from tests.commandline import alive, queuescale_command, started_pids

SCENARIO = """\
name: live-small
duration: 22s
seed: 9
slo: {waitSeconds: 4}
queue: {visibilityTimeout: 10s}
workers:
  startupDelay: 1s
  serviceTime: 300ms
  concurrency: 2
  scaleIn: drain
  terminationGracePeriod: 5s
  maxReplicas: 3
arrivals:
  - {type: burst, at: 1s, messages: 20, over: 2s}
  - {type: constant, rate: 0.5, end: 10s}
"""

RULE = """\
apiVersion: queuescale.io/v1alpha1
kind: QueueScaler
metadata: {name: live-small, namespace: demo}
spec:
  scaleTargetRef: {name: worker}
  maxReplicas: 3
  pollingInterval: 2s
  sources:
    - {type: azure-queue, queueName: anything, connectionSecretRef: {name: elsewhere, key: connection}}
  policy:
    targetWaitSeconds: 4
    serviceTime: 0.3
    messagesPerReplica: 2
    lookahead: 1
    scaleToZeroDelay: 4s
    scaleDown: {delay: 4s}
"""


def demo(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(queuescale_command("demo", *args), cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_a_scenario_runs_live_and_its_summary_holds_the_simulators_metrics_measured(tmp_path: Path) -> None:
    scenario, rule, out = tmp_path / "small.yaml", tmp_path / "rule.yaml", tmp_path / "out"
    scenario.write_text(SCENARIO)
    rule.write_text(RULE)
    done = demo(tmp_path, "--scenario", str(scenario), "--policy", str(rule), "--out", str(out), "--no-live")
    assert done.returncode == 0, done.stdout + done.stderr

    summary = json.loads((out / "demo-summary.json").read_text())
    keys = {f.name for f in fields(Metrics)}
    assert keys <= set(summary), "the live run writes every key `simulate --json` prints"
    assert set(summary["simulated"]) == keys, "and the same scenario and rule simulated, under the same keys"
    planned = plan_arrivals(load_scenario(str(scenario))).total
    assert summary["messages_arrived"] == summary["simulated"]["messages_arrived"] == planned == 25
    given = summary["simulated_with_live_jobs"]
    assert set(given) == set(summary["simulated_spread"]), "and simulated again given the live jobs' service times"
    assert {"burst_first_scale_out_mean", "burst_enough_capacity_mean"} <= set(given), "and its burst's metrics too"
    assert given["messages_arrived"] == [25, 25, 25]
    assert summary["messages_processed"] == planned, "every message was worked on and deleted"
    assert summary["messages_remaining"] == 0
    assert summary["duplicate_deliveries"] == 0  # 0.3 s jobs, a 10 s visibility timeout, drained on scale-in
    assert summary["scale_actions"] >= 2 and summary["peak_replicas"] >= 1
    assert 0 < summary["busy_worker_seconds"] <= summary["worker_seconds"] <= 3 * 22
    assert summary["busy_worker_seconds"] >= 25 * 0.3 / 2 * 0.9
    assert summary["wait_p50"] <= summary["wait_p99"] <= summary["wait_max"]

    pids = started_pids(summary)
    assert len(pids) >= 2
    assert [pid for pid in pids if alive(pid)] == [], "every process started was stopped"
    assert all(w["stopped"] is not None for w in summary["worker_processes"])
    assert "wait_p99" in done.stdout and "simulated" in done.stdout
    for text in (done.stdout, done.stderr, (out / "demo-summary.json").read_text()):
        assert DEV_ACCOUNT_KEY not in text and "AccountKey" not in text


def test_the_spread_leaves_out_the_burst_metrics_of_a_scenario_without_bursts(tmp_path: Path) -> None:
    # A scenario with no burst has no burst metrics (None), in every draw: the spread has no entry for them, and
    # the other metrics are spread as before.
    (tmp_path / "rule.yaml").write_text(RULE)
    [rule] = load_rules([str(tmp_path / "rule.yaml")])
    (tmp_path / "steady.yaml").write_text(SCENARIO.replace("  - {type: burst, at: 1s, messages: 20, over: 2s}\n", ""))
    (tmp_path / "bursty.yaml").write_text(SCENARIO)
    spread = simulated_spread(load_scenario(str(tmp_path / "steady.yaml")), rule, draws=3)
    assert "burst_enough_capacity_mean" not in spread and "burst_first_scale_out_mean" not in spread
    assert set(spread) == set(COMPARED) - {"burst_enough_capacity_mean", "burst_first_scale_out_mean"}
    bursty = simulated_spread(load_scenario(str(tmp_path / "bursty.yaml")), rule, draws=3)
    low, median, high = bursty["burst_enough_capacity_mean"]
    assert 0 <= low <= median <= high


def test_a_rule_the_live_run_cannot_read_is_refused_naming_its_field(tmp_path: Path) -> None:
    scenario, rule = tmp_path / "small.yaml", tmp_path / "rule.yaml"
    scenario.write_text(SCENARIO)
    rule.write_text(RULE.replace("maxReplicas: 3\n  pollingInterval", "maxReplicas: 500\n  pollingInterval"))
    done = demo(tmp_path, "--scenario", str(scenario), "--policy", str(rule), "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "spec.maxReplicas" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists(), "nothing started, nothing written"


def test_a_bad_scenario_is_refused_naming_its_field(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(SCENARIO.replace("concurrency: 2", "concurrency: zero"))
    done = demo(tmp_path, "--scenario", str(scenario), "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "workers.concurrency" in done.stderr and "Traceback" not in done.stderr


def test_policy_without_a_scenario_is_a_usage_error(tmp_path: Path) -> None:
    done = demo(tmp_path, "--policy", "rule.yaml", "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "--policy goes with --scenario" in done.stderr


def test_a_scenarios_outage_fails_the_rules_polls_live_and_not_the_workers(tmp_path: Path) -> None:
    # The polls at 8, 10 and 12 s fall in the window (the reconciler polls every 2 s from 0); the workers and the
    # senders reach Azurite directly, so every message is still sent and worked on.
    scenario, rule, out = tmp_path / "outage.yaml", tmp_path / "rule.yaml", tmp_path / "out"
    scenario.write_text(SCENARIO + "outages:\n  - {start: 7s, end: 13s, code: ServerBusy}\n")
    rule.write_text(RULE)
    done = demo(tmp_path, "--scenario", str(scenario), "--policy", str(rule), "--out", str(out), "--no-live")
    assert done.returncode == 0, done.stdout + done.stderr

    summary = json.loads((out / "demo-summary.json").read_text())
    proxy = summary["outage_proxy"]
    assert proxy["address"].startswith("127.0.0.1:") and proxy["errors"] >= 3 and proxy["forwarded"] >= 5
    failed = [line for line in done.stdout.splitlines() if line.startswith("+") and "PollFailed" in line]
    times = [float(line.split("s", 1)[0].lstrip("+")) for line in failed]
    assert times and all(7 <= t < 13 + 5 for t in times), failed  # a failed poll ends within its budget
    assert any("ServerBusy" in line for line in failed), failed
    [live] = summary["outages"]
    assert (live["start"], live["end"], live["failure"]) == (7.0, 13.0, "error ServerBusy")
    assert summary["simulated"]["outages"][0]["failure"] == "error ServerBusy"
    assert summary["messages_processed"] == summary["messages_arrived"] == 25
    assert [pid for pid in started_pids(summary) if alive(pid)] == [], "every process started was stopped"
