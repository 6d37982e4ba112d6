"""Per-kind rules the real registries apply to a written object before it is validated and stored."""

from __future__ import annotations

import base64

from tests.fakekube.resources import PODS, SECRETS, Obj, ResourceType


def prepare(rt: ResourceType, obj: Obj) -> None:
    """Normalize a written object in place, as decoding it into the internal type does upstream."""
    if rt.key == SECRETS.key:
        _merge_string_data(obj)
    if rt.key == PODS.key:
        _default_pod_spec(obj)


def _default_pod_spec(pod: Obj) -> None:
    """The pod-level defaults the field selectors read (`pkg/apis/core/v1/defaults.go` `SetDefaults_PodSpec`:
    restartPolicy, dnsPolicy, schedulerName, terminationGracePeriodSeconds, securityContext), and the
    ServiceAccount admission plugin's `serviceAccountName: default`. Containers are not defaulted."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("serviceAccountName", "default")


def _merge_string_data(secret: Obj) -> None:
    """A Secret's `stringData` is write-only: each key is base64-encoded into `data`, overwriting it, and the field
    itself is never stored nor returned (k8s.io/kubernetes `pkg/apis/core/v1/conversion.go`,
    `Convert_v1_Secret_To_core_Secret`: "StringData overwrites Data"; the internal Secret has no StringData).
    `type` defaults to Opaque (`pkg/apis/core/v1/defaults.go`, `SetDefaults_Secret`)."""
    string_data = secret.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = secret.get("data")
        if not isinstance(data, dict):
            data = {}
        for key, text in string_data.items():
            data[str(key)] = base64.b64encode(str(text).encode()).decode()
        secret["data"] = data
    secret.setdefault("type", "Opaque")
