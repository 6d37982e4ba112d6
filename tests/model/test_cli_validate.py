"""`queuescale validate`: one line per error, exit 1 on any; the shipped examples pass."""

from __future__ import annotations

import glob
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_shipped_examples_are_valid() -> None:
    examples = sorted(glob.glob(str(ROOT / "examples" / "*.yaml")))
    result = run_cli("validate", *examples)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""
    assert f"{len(examples) - 1} of {len(examples) - 1} rules valid" in result.stderr  # one file is a Secret


def test_broken_rules_give_one_line_per_error() -> None:
    result = run_cli("validate", "tests/data/broken-rules.yaml")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        'tests/data/broken-rules.yaml: negative-cooldown: spec.policy.scaleDown.cooldown: must be a duration >= 0, '
        'got "-5s" (write 30, "30s", "5m" or "1h30m")',
        "tests/data/broken-rules.yaml: min-above-max: spec.maxReplicas: must be >= minReplicas (10), got 3",
        "tests/data/broken-rules.yaml: min-above-max: spec.sources[0].queueName: must be 3-63 lowercase letters, "
        'digits and single dashes, got "Bad_Name"',
        "tests/data/broken-rules.yaml: min-above-max: spec.sources[0]: must set one of connectionSecretRef, "
        "accountKeySecretRef, sasSecretRef or identity",
        'tests/data/broken-rules.yaml: unknown-kind: spec.sources[0].type: unknown queue kind "kafka" '
        "(known: aws-sqs, azure-queue, rabbitmq, redis-list, sql-table)",
        "tests/data/broken-rules.yaml: unknown-kind: spec.polcy: unknown field",
    ]
    assert "Traceback" not in result.stderr


def test_valid_and_broken_files_together_still_fail(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", str(ROOT / "examples" / "orders-worker.yaml"), str(ROOT / "tests/data/broken-rules.yaml")])
    assert code == 1
    assert "1 of 4 rules valid" in capsys.readouterr().err


def test_unreadable_and_malformed_files_are_errors_not_tracebacks(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("apiVersion: queuescale.io/v1alpha1\nkind: QueueScaler\n  spec: [\n")
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("- just\n- a list\n")
    result = run_cli("validate", str(tmp_path / "missing.yaml"), str(bad_yaml), str(scalar))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory"
    assert lines[1].startswith(f"{bad_yaml}: invalid YAML at line 3, column")
    assert lines[2] == f"{scalar}: document 1 is not an object"
    assert "Traceback" not in result.stderr


def test_other_objects_in_a_file_are_skipped(tmp_path: Path) -> None:
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text((ROOT / "examples" / "orders-worker-secret.yaml").read_text() + "\n---\n"
                     + (ROOT / "examples" / "orders-worker.yaml").read_text())
    result = run_cli("validate", str(mixed))
    assert result.returncode == 0, result.stdout
    assert "1 of 1 rule valid" in result.stderr


def test_usage_error_exits_2() -> None:
    result = run_cli("validate")
    assert result.returncode == 2
    assert "usage:" in result.stderr
