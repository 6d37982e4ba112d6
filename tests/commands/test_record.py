"""`queuescale record` against a real Azurite: the trace it writes, the scenario that replays it, its errors."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest

from controller.commands.record import estimate_arrivals
from controller.simulator.scenario import load_scenario, plan_arrivals
from tests.azurite import ROOT, Azurite
from tests.commandline import environ, queuescale, queuescale_command
from tests.helpers import new_queue, rule_yaml, unique_queue


def record_command(*args: str) -> list[str]:
    return queuescale_command("record", *args)


# --------------------------------------------------------------------------------------------------------------
# The estimate


def test_without_a_completion_rate_arrivals_are_the_count_growth() -> None:
    assert estimate_arrivals(10, 25, 10.0, None) == 15
    assert estimate_arrivals(25, 10, 10.0, None) == 0  # a falling count shows no arrivals


def test_completions_while_busy_are_added_back() -> None:
    assert estimate_arrivals(50, 45, 10.0, 2.0) == 15  # -5 + 2/s x 10 s


def test_completions_stop_when_the_queue_drains() -> None:
    assert estimate_arrivals(8, 0, 10.0, 2.0) == 0  # only the 8 that were there could complete


def test_an_empty_queue_at_the_start_of_the_interval_completes_nothing() -> None:
    assert estimate_arrivals(0, 4, 10.0, 2.0) == 4


# --------------------------------------------------------------------------------------------------------------
# Against Azurite


def test_record_writes_a_trace_the_simulator_replays_and_the_backlog_is_a_baseline(
    azurite: Azurite, tmp_path: Path
) -> None:
    # As reported (issue 19): 37 messages waiting, 35 sent during the recording (7, then 28). The first poll is a
    # baseline; counting the backlog as arrivals made the next poll say ~44 and the summary ~72.
    queue = new_queue(azurite)
    for index in range(37):
        queue.send_message(f"backlog {index}")
    rule = tmp_path / "rule.yaml"
    rule.write_text(rule_yaml(azurite, queue.queue_name))
    trace, counts, scenario = tmp_path / "trace.csv", tmp_path / "counts.csv", tmp_path / "replay" / "scenario.yaml"
    process = subprocess.Popen(
        record_command(str(rule), "--duration", "5s", "--out", str(trace), "--counts", str(counts),
                       "--scenario", str(scenario)),
        cwd=ROOT, env=environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        sent = []
        progress = []
        for line in process.stderr:  # send traffic between polls, once the recording has started
            progress.append(line)
            if "count 37 (the baseline" in line:
                for index in range(7):
                    queue.send_message(f"wave one {index}")
                sent.append(7)
            elif "count 44 " in line and len(sent) == 1:
                for index in range(28):
                    queue.send_message(f"wave two {index}")
                sent.append(28)
            if line.startswith("+") and float(line[1:].split("s", 1)[0]) >= 4.5:
                break
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert sent == [7, 28]
    assert "count 44  arrivals since the last poll ~7\n" in "".join(progress)
    assert "~35 messages arrived (37 already waiting at the start)" in stdout

    rows = list(csv.reader(trace.read_text().splitlines()))
    assert rows[0] == ["t", "arrivals"]
    times = [float(t) for t, _ in rows[1:]]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert sum(float(n) for _, n in rows[1:]) == 35
    assert float(rows[-1][1]) == 0  # the closing row
    assert counts.read_text().splitlines()[0] == f"t,total,{queue.queue_name},error"

    replay = load_scenario(str(scenario))
    assert [a.type for a in replay.arrivals] == ["trace", "burst"]
    assert replay.arrivals[1].at == (0.0,) and replay.arrivals[1].messages == 37  # the replay starts with them
    assert plan_arrivals(replay).total == 37 + 35
    simulated = queuescale("simulate", "--scenario", str(scenario), timeout=60)
    assert simulated.returncode == 0, simulated.stdout + simulated.stderr
    assert "messages arrived" in simulated.stdout

    for text in (stdout, stderr, trace.read_text(), counts.read_text(), scenario.read_text()):
        assert azurite.key not in text


def test_a_queue_that_does_not_answer_fails_at_the_first_poll(azurite: Azurite, tmp_path: Path) -> None:
    rule = tmp_path / "rule.yaml"
    missing = unique_queue()
    rule.write_text(rule_yaml(azurite, missing))
    done = subprocess.run(record_command(str(rule), "--duration", "5s", "--out", str(tmp_path / "t.csv")),
                          cwd=ROOT, env=environ(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert f"shop/orders-worker: the first poll failed ({missing}: QueueNotFound" in done.stderr
    assert "Traceback" not in done.stderr
    assert azurite.key not in done.stderr + done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--duration", "0s"], "record: --duration: must be > 0, got 0"),
    (["--duration", "1m", "--interval", "0.5"], "record: --interval: must be >= 1s, got 0.5"),
])
def test_bad_options_name_the_option(tmp_path: Path, args: list[str], message: str) -> None:
    rule = tmp_path / "rule.yaml"
    rule.write_text("")
    done = subprocess.run(record_command(str(rule), "--out", str(tmp_path / "t.csv"), *args), cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert message in done.stderr


def test_an_invalid_rule_file_names_the_field(tmp_path: Path) -> None:
    rule = tmp_path / "rule.yaml"
    rule.write_text("apiVersion: queuescale.io/v1alpha1\nkind: QueueScaler\nmetadata: {name: x}\n"
                    "spec: {scaleTargetRef: {name: x}, maxReplicas: many, sources: []}\n")
    done = subprocess.run(record_command(str(rule), "--duration", "1m", "--out", str(tmp_path / "t.csv")),
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert f"{rule}: x: spec.maxReplicas: must be an integer" in done.stderr
    assert not (tmp_path / "t.csv").exists()
