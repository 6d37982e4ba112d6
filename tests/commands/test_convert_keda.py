"""`queuescale convert-keda` on ScaledObjects written the way KEDA's docs write them; every output validates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.cli import main
from controller.keda.convert import ConvertError, convert_file
from controller.model.loading import load_files
from controller.model.rule import parse_queuescaler
from tests.azurite import ROOT

DATA = ROOT / "tests" / "data" / "keda"
EXAMPLE = ROOT / "examples" / "keda" / "orders-scaledobject.yaml"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "controller", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)


def converted(path: Path) -> tuple[dict[str, Any], list[str]]:
    conversion = convert_file(str(path))
    assert len(conversion.documents) == 1
    return conversion.documents[0], conversion.warnings


def warnings_about(warnings: list[str], field: str) -> list[str]:
    return [w for w in warnings if f": {field}: " in w]


@pytest.mark.parametrize("path", [EXAMPLE, *sorted(p for p in DATA.glob("*.yaml") if p.name != "bad.yaml")],
                         ids=lambda p: p.name)
def test_the_output_passes_validate(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rule.yaml"
    assert main(["convert-keda", str(path), "--out", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert main(["validate", str(out)]) == 0
    assert "1 of 1 rule valid" in capsys.readouterr().err
    assert load_files([str(out)]).ok


def test_stdout_is_yaml_and_warnings_go_to_stderr_one_line_each() -> None:
    result = run_cli("convert-keda", str(EXAMPLE))
    assert result.returncode == 0
    (doc,) = list(yaml.safe_load_all(result.stdout))
    assert doc["kind"] == "QueueScaler"
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith(f"warning: {EXAMPLE}: orders-worker: spec.") for line in lines)
    assert "UseDevelopmentStorage" not in result.stdout + result.stderr  # the Secret's value in the same file


def test_the_shipped_example_carries_queue_target_and_scale_down_behavior() -> None:
    doc, _ = converted(EXAMPLE)
    spec = doc["spec"]
    assert doc["metadata"] == {"name": "orders-worker", "namespace": "shop"}
    assert spec["maxReplicas"] == 50
    assert spec["pollingInterval"] == "30s"
    assert spec["sources"] == [{
        "type": "azure-queue", "queueName": "orders",
        "connectionSecretRef": {"name": "orders-queue-auth", "key": "connection"},  # via the TriggerAuthentication
    }]
    assert spec["policy"]["targetPerReplica"] == 20
    assert spec["policy"]["scaleToZeroDelay"] == "5m"
    assert spec["policy"]["scaleDown"] == {
        "stabilizationWindow": "2m", "delay": "0s", "policies": [{"type": "Percent", "value": 50, "period": "1m"}],
    }
    assert "scaleUp" not in spec["policy"]


def test_hpa_defaults_that_differ_from_ours_are_named() -> None:
    _, warnings = converted(EXAMPLE)
    (up,) = warnings_about(warnings, "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleUp")
    assert "+4 pods or +100 %" in up and "one step" in up
    (polling,) = warnings_about(warnings, "spec.pollingInterval")
    assert "every 15s" in polling
    assert not warnings_about(warnings, "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown")


def test_connection_from_env_is_traced_through_the_deployment_to_its_secret() -> None:
    doc, warnings = converted(DATA / "connection-from-env.yaml")
    (source,) = doc["spec"]["sources"]
    assert source["connectionSecretRef"] == {"name": "orders-storage", "key": "connection-string"}
    assert source["countStrategy"] == "visible"
    assert not [w for w in warnings if "placeholder" in w]


def test_activation_cooldown_limits_behavior_and_fallback_carry_over() -> None:
    doc, warnings = converted(DATA / "connection-from-env.yaml")
    spec = doc["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"], spec["pollingInterval"]) == (1, 40, "15s")
    policy = spec["policy"]
    assert policy["activationThreshold"] == 50
    assert "scaleToZeroDelay" not in policy  # minReplicaCount 1: KEDA's cooldownPeriod never applies
    assert policy["scaleUp"] == {
        "stabilizationWindow": "0s",
        "policies": [{"type": "Pods", "value": 10, "period": "30s"}, {"type": "Percent", "value": 200, "period": "30s"}],
        "selectPolicy": "Min",
    }
    # A direction that is set keeps the HPA's defaults for what it leaves out (Percent 100 per 15 s).
    assert policy["scaleDown"] == {
        "stabilizationWindow": "10m", "delay": "0s", "policies": [{"type": "Percent", "value": 100, "period": "15s"}],
    }
    assert spec["fallback"] == {"failureThreshold": 4, "mode": "fixed", "replicas": 6}
    (fallback,) = warnings_about(warnings, "spec.fallback.behavior")
    assert "never scales down" in fallback
    assert not warnings_about(warnings, "spec.pollingInterval")  # 15 s: as often as the HPA


def test_pod_identity_becomes_workload_identity_with_the_private_cloud_endpoint() -> None:
    doc, _ = converted(DATA / "workload-identity-private-cloud.yaml")
    (source,) = doc["spec"]["sources"]
    assert source == {
        "type": "azure-queue", "queueName": "functionsqueue", "identity": "workload",
        "accountName": "storageaccountname", "endpoint": "https://storageaccountname.queue.local.azurestack.external",
    }


def test_several_queue_triggers_become_max_of_weighted_sources_and_the_rest_is_warned_about() -> None:
    doc, warnings = converted(DATA / "many-triggers.yaml")
    spec = doc["spec"]
    assert spec["aggregation"] == "max"
    small, large = spec["sources"]
    assert (small["queueName"], small.get("weight", 1)) == ("thumbnails-small", 1)
    assert (large["queueName"], large["weight"]) == ("thumbnails-large", 5)  # 10 / 2: queueLength 2 counts 5x
    assert small["cloud"] == large["cloud"] == "usgov"
    assert spec["policy"]["targetPerReplica"] == 10
    assert spec["fallback"] == {"failureThreshold": 3, "mode": "hold"}
    for field in ("spec.triggers[2].type", "spec.idleReplicaCount", "spec.initialCooldownPeriod",
                  "spec.advanced.scalingModifiers", "spec.advanced.restoreToOriginalReplicaCount",
                  "spec.fallback.behavior", "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown"):
        assert len(warnings_about(warnings, field)) == 1, field
    # Same decisions as the HPA's "largest recommendation": 30 small (3 pods) vs 8 large (4 pods) -> 4.
    rule = parse_queuescaler(doc)
    weighted = max(30 * rule.spec.sources[0].weight, 8 * rule.spec.sources[1].weight)
    assert rule.spec.policy.target_per_replica is not None
    assert weighted / rule.spec.policy.target_per_replica == 4


def test_a_connection_the_file_cannot_trace_gets_a_placeholder_and_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "so.yaml"
    path.write_text("""
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: orders}
spec:
  scaleTargetRef: {name: orders-worker}
  triggers:
  - type: azure-queue
    metadata:
      queueName: orders
      connectionFromEnv: STORAGE_CONNECTIONSTRING_ENV_NAME
""")
    doc, warnings = converted(path)
    assert doc["spec"]["sources"][0]["connectionSecretRef"] == {
        "name": "orders-worker-queue", "key": "STORAGE_CONNECTIONSTRING_ENV_NAME",
    }
    (warning,) = warnings_about(warnings, "spec.triggers[0].metadata.connectionFromEnv")
    assert "placeholder" in warning and "Deployment 'orders-worker'" in warning
    parse_queuescaler(doc)


def test_bad_input_names_every_field_and_never_prints_a_traceback() -> None:
    result = run_cli("convert-keda", str(DATA / "bad.yaml"))
    assert result.returncode == 1
    assert result.stdout == ""
    prefix = f"{DATA / 'bad.yaml'}: broken: "
    assert result.stderr.splitlines() == [
        f"{prefix}spec.maxReplicaCount: must be >= minReplicaCount (5), got 2",
        f"{prefix}spec.triggers[0].metadata.queueName: is required",
        f'{prefix}spec.triggers[0].metadata.queueLength: must be a number >= 0 (KEDA writes it as a string, e.g. "5"), '
        "got 'five'",
        f'{prefix}spec.triggers[0].metadata.queueLengthStrategy: must be "all" or "visibleonly", got "newest"',
    ]


def test_a_file_without_a_scaled_object_or_not_yaml_is_one_clear_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n")
    with pytest.raises(ConvertError) as caught:
        convert_file(str(empty))
    assert caught.value.lines == [f"{empty}: no ScaledObject in this file"]
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: [unclosed\n")
    result = run_cli("convert-keda", str(broken))
    assert result.returncode == 1
    assert result.stderr.startswith(f"{broken}: invalid YAML at line")
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------------------------------------------
# The other queue kinds. Metadata names and defaults are KEDA's: kedacore/keda pkg/scalers/rabbitmq_scaler.go
# (rabbitMQMetadata, defaultRabbitMQQueueLength 20, excludeUnacknowledged), redis_scaler.go (redisMetadata,
# listLength default 5), postgresql_scaler.go (postgreSQLMetadata, targetQueryValue required) and
# aws_sqs_queue_scaler.go (awsSqsQueueMetadata, queueLength default 5, scaleOnInFlight default true).


def test_a_rabbitmq_trigger_becomes_a_rabbitmq_source_counting_what_keda_counted() -> None:
    doc, warnings = converted(DATA / "rabbitmq.yaml")
    (source,) = doc["spec"]["sources"]
    assert source == {
        "type": "rabbitmq", "queue": "orders", "managementURL": "http://rabbitmq:15672", "vhost": "shop",
        "passwordSecretRef": {"name": "rabbitmq-conn", "key": "password"},
        "count": "readyAndUnacked",  # KEDA over HTTP counts `messages`: ready + unacknowledged
    }
    assert doc["spec"]["policy"]["targetPerReplica"] == 50
    assert doc["spec"]["policy"]["activationThreshold"] == 2
    (placeholder,) = warnings_about(warnings, "spec.triggers[0].metadata.host")
    assert "placeholder managementURL 'http://rabbitmq:15672'" in placeholder


def test_a_rabbitmq_amqp_url_gives_the_management_url_and_the_password_goes_to_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "so.yaml"
    path.write_text("""
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: orders}
spec:
  scaleTargetRef: {name: orders-worker}
  triggers:
  - type: rabbitmq
    metadata: {host: "amqp://keda:hunter2@rabbit.shop.svc:5672/orders-vhost", queueName: orders}
""")
    doc, warnings = converted(path)
    (source,) = doc["spec"]["sources"]
    assert source == {
        "type": "rabbitmq", "queue": "orders", "managementURL": "http://rabbit.shop.svc:15672",
        "vhost": "orders-vhost", "username": "keda",
        "passwordSecretRef": {"name": "orders-worker-rabbitmq", "key": "password"},
    }  # over AMQP KEDA counts the ready messages only: count stays "ready"
    assert doc["spec"]["policy"]["targetPerReplica"] == 20  # KEDA's default for rabbitmq
    assert len(warnings_about(warnings, "spec.triggers[0].metadata.host")) == 2  # the port guess, the password
    assert "hunter2" not in yaml.safe_dump(doc) + "\n".join(warnings)


def test_a_rabbitmq_rate_mode_is_left_out_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "so.yaml"
    path.write_text("""
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: orders}
spec:
  scaleTargetRef: {name: orders-worker}
  triggers:
  - type: rabbitmq
    metadata: {protocol: http, queueName: orders, mode: MessageRate, value: "100", hostFromEnv: RABBIT_URL}
  - type: redis
    metadata: {address: "redis:6379", listName: jobs}
""")
    doc, warnings = converted(path)
    assert [s["type"] for s in doc["spec"]["sources"]] == ["redis-list"]
    (left_out,) = warnings_about(warnings, "spec.triggers[0].metadata.mode")
    assert "MessageRate" in left_out and "left out" in left_out


def test_a_redis_trigger_becomes_a_redis_list_source_with_its_password_traced() -> None:
    doc, _ = converted(DATA / "redis.yaml")
    (source,) = doc["spec"]["sources"]
    assert source == {
        "type": "redis-list", "listName": "jobs:thumbnails", "host": "redis.shop.svc", "port": 6380, "db": 2,
        "tls": True, "passwordSecretRef": {"name": "redis", "key": "password"},
    }
    assert doc["spec"]["policy"]["targetPerReplica"] == 10
    assert doc["spec"]["policy"]["activationThreshold"] == 1


def test_a_postgresql_trigger_becomes_a_sql_table_source_with_its_query() -> None:
    doc, _ = converted(DATA / "postgresql.yaml")
    (source,) = doc["spec"]["sources"]
    assert source == {
        "type": "sql-table", "host": "db.shop.svc", "database": "shop", "user": "keda",
        "passwordSecretRef": {"name": "shop-db", "key": "password"}, "sslMode": "require",
        "query": "SELECT count(*) FROM jobs WHERE claimed_by IS NULL",
    }
    assert doc["spec"]["policy"]["targetPerReplica"] == 4


def test_an_aws_sqs_queue_trigger_counts_in_flight_messages_as_keda_does_by_default() -> None:
    doc, _ = converted(DATA / "aws-sqs-queue.yaml")
    (source,) = doc["spec"]["sources"]
    assert source == {
        "type": "aws-sqs", "queueURL": "https://sqs.eu-west-1.amazonaws.com/123456789012/exports",
        "includeInFlight": True,
        "accessKeyIdSecretRef": {"name": "aws-sqs", "key": "access-key-id"},
        "secretAccessKeySecretRef": {"name": "aws-sqs", "key": "secret-access-key"},
    }
    assert doc["spec"]["policy"]["targetPerReplica"] == 5


# --------------------------------------------------------------------------------------------------------------
# One bad object does not cost the others


MIXED = """
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: good}
spec:
  scaleTargetRef: {name: good}
  triggers:
  - type: azure-queue
    metadata: {queueName: orders, connectionFromEnv: STORAGE}
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: broken}
spec:
  scaleTargetRef: {name: broken}
  triggers:
  - type: azure-queue
    metadata: {queueLength: five}
---
- not an object
---
apiVersion: keda.sh/v1alpha1
kind: ScaledJob
metadata: {name: batch}
spec:
  jobTargetRef: {template: {spec: {containers: [{name: job, image: job:1}]}}}
  triggers:
  - type: azure-queue
    metadata: {queueName: batch}
"""


def test_a_bad_object_is_reported_and_the_valid_ones_are_still_converted(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED)
    result = run_cli("convert-keda", str(path))
    assert result.returncode == 1
    (doc,) = list(yaml.safe_load_all(result.stdout))
    assert doc["metadata"]["name"] == "good"
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]
    assert errors == [
        f"{path}: document 3 is not an object",
        f"{path}: broken: spec.triggers[0].metadata.queueName: is required",
        f'{path}: broken: spec.triggers[0].metadata.queueLength: must be a number >= 0 (KEDA writes it as a '
        "string, e.g. \"5\"), got 'five'",
    ]
    assert "Traceback" not in result.stderr
    out = tmp_path / "rules.yaml"
    out.write_text(result.stdout)
    assert load_files([str(out)]).ok


def test_a_scaled_job_is_named_as_not_supported_and_why(tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED)
    conversion = convert_file(str(path))
    (warning,) = [w for w in conversion.warnings if ": batch: " in w]
    assert warning.startswith(f"{path}: batch: ScaledJob is not supported: ")
    assert "Job" in warning and "scale subresource" in warning
    only_jobs = tmp_path / "jobs.yaml"
    only_jobs.write_text(MIXED.split("---")[-1])
    with pytest.raises(ConvertError) as caught:
        convert_file(str(only_jobs))
    assert caught.value.lines[-1] == f"{only_jobs}: no ScaledObject in this file"
    assert "ScaledJob is not supported" in caught.value.lines[0]


# --------------------------------------------------------------------------------------------------------------
# What the converted rule needs next, and the HPA's tolerance


def test_the_yaml_says_how_to_let_the_rule_read_each_secret_it_names() -> None:
    conversion = convert_file(str(DATA / "connection-from-env.yaml"))
    (doc,) = conversion.documents
    namespace = doc["metadata"].get("namespace")
    where = f" -n {namespace}" if namespace else ""
    command = (f"kubectl annotate secret orders-storage{where} queuescale.io/allowed-rules="
               f"{doc['metadata']['name']}")
    assert conversion.allow_commands == [[command]]
    text = conversion.to_yaml()
    assert f"#   {command}\n" in text
    assert yaml.safe_load(text) == doc  # a comment only


def converted_with_behavior(tmp_path: Path, behavior: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    path = tmp_path / "so.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "orders"},
        "spec": {"scaleTargetRef": {"name": "orders-worker"},
                 "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}},
                 "triggers": [{"type": "azure-queue", "metadata": {"queueName": "orders", "connectionFromEnv": "C"}}]},
    }))
    return converted(path)


def test_one_hpa_tolerance_for_both_directions_becomes_the_policy_tolerance(tmp_path: Path) -> None:
    doc, warnings = converted_with_behavior(tmp_path, {"scaleUp": {"tolerance": "50m"},
                                                       "scaleDown": {"tolerance": "0.05"}})
    assert doc["spec"]["policy"]["tolerance"] == 0.05
    assert not [w for w in warnings if ".tolerance: " in w]


def test_tolerances_that_differ_by_direction_keep_the_smaller_with_a_warning(tmp_path: Path) -> None:
    doc, warnings = converted_with_behavior(tmp_path, {"scaleUp": {"tolerance": "50m"}})
    assert doc["spec"]["policy"]["tolerance"] == 0.05  # the HPA's own 0.1 applies to scaling down
    (warning,) = warnings_about(warnings, "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleUp.tolerance")
    assert "one tolerance for both directions" in warning


@pytest.mark.parametrize(("fallback", "path"), [
    ({"failureThreshold": 0, "replicas": 2}, "spec.fallback.failureThreshold"),  # KEDA's minimum is 0, ours 1
    ({"failureThreshold": 3, "replicas": 2, "behavior": "scalingModifiers"}, "spec.fallback.behavior"),
])
def test_a_fallback_keda_accepts_and_a_queuescaler_cannot_hold_is_an_error_naming_the_field(
        tmp_path: Path, fallback: dict[str, Any], path: str) -> None:
    file = tmp_path / "so.yaml"
    file.write_text(yaml.safe_dump({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "orders"},
        "spec": {"scaleTargetRef": {"name": "orders-worker"}, "fallback": fallback,
                 "triggers": [{"type": "azure-queue", "metadata": {"queueName": "orders", "connectionFromEnv": "C"}}]},
    }))
    conversion = convert_file(str(file))
    assert conversion.documents == []
    assert [e.split(": ")[2] for e in conversion.errors] == [path]
