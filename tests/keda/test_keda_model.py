"""The ScaledObject + HPA model both `convert-keda` and the simulator's KEDA baseline read (controller/keda/model.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.keda import convert
from controller.keda.model import (
    DEFAULT_DOWN,
    DEFAULT_UP,
    EnvTargetRef,
    HpaBehavior,
    HpaDirection,
    PodIdentity,
    ScaledObject,
    SecretTargetRef,
    TriggerAuthentication,
    read_scaled_object,
    read_trigger_authentication,
)
from controller.model.fields import FieldError
from controller.model.rule import StepPolicy
from controller.simulator import keda as emulation

BEHAVIOR = "spec.advanced.horizontalPodAutoscalerConfig.behavior"


def document(spec: dict[str, Any] | None = None, trigger: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "orders", "namespace": "shop"},
        "spec": {
            "scaleTargetRef": {"name": "orders-worker"},
            "triggers": [trigger or {"type": "azure-queue", "metadata": {"queueName": "orders"}}],
            **(spec or {}),
        },
    }


def read(doc: dict[str, Any]) -> tuple[ScaledObject, list[FieldError]]:
    errors: list[FieldError] = []
    return read_scaled_object(doc, errors), errors


def test_the_hpa_behavior_defaults_are_kubernetes_defaults() -> None:
    """kubernetes/kubernetes pkg/apis/autoscaling/v2/defaults.go: defaultHPAScaleUpRules is 0 s of stabilization,
    selectPolicy Max, Pods 4 and Percent 100 per 15 s; defaultHPAScaleDownRules is selectPolicy Max, Percent 100
    per 15 s, and a nil window, which the controller fills from --horizontal-pod-autoscaler-downscale-stabilization
    (5m by default)."""
    assert HpaDirection(
        stabilization_window=0, select_policy="Max",
        policies=(StepPolicy("Pods", 4, 15), StepPolicy("Percent", 100, 15)),
    ) == DEFAULT_UP
    assert HpaDirection(
        stabilization_window=300, select_policy="Max", policies=(StepPolicy("Percent", 100, 15),),
    ) == DEFAULT_DOWN
    assert DEFAULT_UP.tolerance is None and DEFAULT_DOWN.tolerance is None  # the controller's flag, 0.1


def test_a_behavior_that_is_set_keeps_the_defaults_for_each_field_it_leaves_out() -> None:
    """defaults.go copyHPAScalingRules: selectPolicy, stabilizationWindowSeconds, policies and tolerance are each
    copied over the defaults only when set."""
    scaled, errors = read(document({"advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
        "scaleUp": {"stabilizationWindowSeconds": 30},
        "scaleDown": {"selectPolicy": "Min", "tolerance": "50m",
                      "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]},
    }}}}))
    assert errors == []
    assert scaled.behavior == HpaBehavior(
        HpaDirection(30, DEFAULT_UP.policies),
        HpaDirection(300, (StepPolicy("Pods", 2, 60),), "Min", tolerance=0.05),
    )
    assert (scaled.scale_up_set, scaled.scale_down_set) == (True, True)


def test_a_scaled_object_without_behavior_leaves_the_hpa_behavior_nil_and_has_kedas_defaults() -> None:
    scaled, errors = read(document())
    assert errors == []
    assert scaled.behavior is None and not scaled.scale_up_set and not scaled.scale_down_set
    assert (scaled.polling_interval, scaled.cooldown_period, scaled.initial_cooldown_period) == (30, 300, 0)
    assert (scaled.min_replica_count, scaled.max_replica_count, scaled.idle_replica_count) == (0, 100, None)
    assert scaled.fallback is None and scaled.namespace == "shop"
    (trigger,) = scaled.triggers
    assert (trigger.path, trigger.type, trigger.metric_type, trigger.authentication_ref) == (
        "spec.triggers[0]", "azure-queue", "AverageValue", None)


@pytest.mark.parametrize(("spec", "trigger", "path"), [
    ({"advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {"policies": [
        {"type": "Percent", "value": 0, "periodSeconds": 60}]}}}}}, None, f"{BEHAVIOR}.scaleDown.policies[0].value"),
    ({"advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleUp": {"policies": [
        {"type": "Pods", "value": 1, "periodSeconds": 1801}]}}}}}, None,
     f"{BEHAVIOR}.scaleUp.policies[0].periodSeconds"),
    ({"advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleUp": {"policies": []}}}}}, None,
     f"{BEHAVIOR}.scaleUp.policies"),
    ({"advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleUp": {"selectPolicy": "Sum"}}}}}, None,
     f"{BEHAVIOR}.scaleUp.selectPolicy"),
    ({"advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {"tolerance": "ten %"}}}}}, None,
     f"{BEHAVIOR}.scaleDown.tolerance"),
    ({"minReplicaCount": 2, "idleReplicaCount": 2}, None, "spec.idleReplicaCount"),
    ({"fallback": {"replicas": 3}}, None, "spec.fallback.failureThreshold"),
    ({"scaleTargetRef": {"name": "w", "kinds": "Deployment"}}, None, "spec.scaleTargetRef.kinds"),
    ({}, {"type": "azure-queue", "metadata": ["queueName", "orders"]}, "spec.triggers[0].metadata"),
    ({}, {"type": "azure-queue", "metadata": {}, "authenticationRef": {"name": "a", "kind": "Secret"}},
     "spec.triggers[0].authenticationRef.kind"),
    ({}, {"type": "azure-queue"}, "spec.triggers[0].metadata"),
])
def test_a_bad_field_is_an_error_that_names_its_path(spec: dict[str, Any], trigger: dict[str, Any] | None,
                                                     path: str) -> None:
    scaled, errors = read(document(spec, trigger))
    assert [e.path for e in errors] == [path]
    assert isinstance(scaled, ScaledObject)  # still usable: a reader adds its own errors before raising once


def test_the_converter_and_the_emulation_read_one_and_the_same_behavior(tmp_path: Path) -> None:
    behavior = {"scaleUp": {"selectPolicy": "Min", "policies": [{"type": "Pods", "value": 3, "periodSeconds": 30}]},
                "scaleDown": {"stabilizationWindowSeconds": 60}}
    doc = document({"advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior}}})
    scaled, _ = read(doc)
    assert emulation.parse_scaled_object(doc).behavior == scaled.behavior
    path = tmp_path / "so.yaml"
    path.write_text(yaml.safe_dump(doc))
    (rule,) = convert.convert_file(str(path)).documents
    assert rule["spec"]["policy"]["scaleUp"] == {
        "stabilizationWindow": "0s", "policies": [{"type": "Pods", "value": 3, "period": "30s"}], "selectPolicy": "Min",
    }
    assert rule["spec"]["policy"]["scaleDown"]["stabilizationWindow"] == "1m"
    assert rule["spec"]["policy"]["scaleDown"]["policies"] == [{"type": "Percent", "value": 100, "period": "15s"}]


def test_a_trigger_authentication_gives_its_secret_and_env_parameters_and_skips_unusable_entries() -> None:
    auth = read_trigger_authentication({
        "apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
        "metadata": {"name": "queue-auth", "namespace": "shop"},
        "spec": {
            "secretTargetRef": [{"parameter": "connection", "name": "storage", "key": "conn"},
                                {"parameter": "password", "name": "", "key": "pw"}, "not an entry"],
            "env": [{"parameter": "host", "name": "REDIS_HOST", "containerName": "worker"}, {"parameter": "port"}],
            "podIdentity": {"provider": "azure-workload", "identityId": "0000-1111"},
            "hashiCorpVault": {"address": "https://vault"},
        },
    })
    assert auth == TriggerAuthentication(
        kind="TriggerAuthentication", name="queue-auth", namespace="shop",
        secret_target_refs=(SecretTargetRef("connection", "storage", "conn"),),
        env=(EnvTargetRef("host", "REDIS_HOST", "worker"),),
        pod_identity=PodIdentity("azure-workload", "0000-1111"),
        other_sources=("hashiCorpVault",),
    )


def test_pod_identity_none_is_no_pod_identity_and_other_kinds_are_not_trigger_authentications() -> None:
    cluster = read_trigger_authentication({"kind": "ClusterTriggerAuthentication", "metadata": {"name": "a"},
                                           "spec": {"podIdentity": {"provider": "none"}}})
    assert cluster is not None and cluster.kind == "ClusterTriggerAuthentication" and cluster.pod_identity is None
    assert read_trigger_authentication({"kind": "Secret", "metadata": {"name": "a"}}) is None
