"""Per-kind rules the real registries apply to a written object before it is validated and stored.

Defaulting is read (not copied) from k8s.io/kubernetes 1.33: `pkg/apis/apps/v1/defaults.go` (`SetDefaults_Deployment`,
`SetDefaults_StatefulSet`, `SetDefaults_ReplicaSet`), `pkg/apis/core/v1/defaults.go` (`SetDefaults_PodSpec`,
`SetDefaults_Pod`, `SetDefaults_Container`, `SetDefaults_Secret`), the declarative `+default` of
`ContainerPort.protocol` (k8s.io/api `core/v1/types.go`), and `pkg/util/parsers` `ParseImageName` for the pull
policy. As in Go, an absent or null pointer field is unset, and so is an empty string.
"""

from __future__ import annotations

import base64
import re

from tests.fakekube.resources import DEPLOYMENTS, PODS, REPLICASETS, SECRETS, STATEFULSETS, Obj, ResourceType


def prepare(rt: ResourceType, obj: Obj) -> None:
    """Normalize a written object in place, as decoding it into the internal type does upstream."""
    if rt.key == SECRETS.key:
        _merge_string_data(obj)
    elif rt.key == PODS.key:
        _default_pod(obj)
    elif rt.key == DEPLOYMENTS.key:
        _default_deployment(obj)
    elif rt.key == STATEFULSETS.key:
        _default_stateful_set(obj)
    elif rt.key == REPLICASETS.key:
        _default_replica_set(obj)


# What a write through a workload's /status may change besides the status (the registries' status strategies,
# `PrepareForUpdate`): a Deployment's keeps its spec and labels, a ReplicaSet's and a StatefulSet's only their spec
# (pkg/registry/apps/*/strategy.go; upstream `TestStatusUpdates` in pkg/registry/apps/deployment/strategy_test.go:
# a label sent is dropped, an annotation kept). Other metadata (finalizers, ownerReferences) is not modelled: it
# stays as stored, as it does for every other kind, whose status writes change the status only.
STATUS_METADATA = {DEPLOYMENTS.key: ("annotations",), REPLICASETS.key: ("annotations", "labels"),
                   STATEFULSETS.key: ("annotations", "labels")}


def prepare_status(rt: ResourceType, new: Obj, body: Obj) -> None:
    """`new`, the stored object with the written status, takes the metadata the kind's status strategy lets a
    status write change from `body`: as sent, and absent where the body leaves it out (the object written
    replaces the stored one but for what the strategy keeps)."""
    given = body.get("metadata")
    sent: Obj = given if isinstance(given, dict) else {}
    for key in STATUS_METADATA.get(rt.key, ()):
        if sent.get(key):
            new["metadata"][key] = sent[key]
        else:
            new["metadata"].pop(key, None)


def _unset(value: object) -> bool:
    """What a Go field decodes to when the JSON leaves it out: nil for a pointer, "" for a string."""
    return value is None or value == ""


def _default(fields: Obj, key: str, value: object) -> None:
    if _unset(fields.get(key)):
        fields[key] = value


def _struct(fields: Obj, key: str) -> Obj | None:
    """A nested struct (not a pointer) upstream: always there after decoding, so its defaults always apply; None
    for a value of the wrong type, which is left as sent."""
    if fields.get(key) is None:
        fields[key] = {}
    found = fields[key]
    return found if isinstance(found, dict) else None


# ------------------------------------------------------------------------------------------------------------------
# apps/v1


def _default_deployment(deployment: Obj) -> None:
    """SetDefaults_Deployment: one replica, a RollingUpdate of 25 % surge and 25 % unavailable (filled in field by
    field, only for RollingUpdate), 10 old ReplicaSets kept, a 600 s progress deadline; then the pod template."""
    spec = _struct(deployment, "spec")
    if spec is None:
        return
    _default(spec, "replicas", 1)
    strategy = _struct(spec, "strategy")
    if strategy is not None:
        _default(strategy, "type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = _struct(strategy, "rollingUpdate")
            if rolling is not None:
                _default(rolling, "maxUnavailable", "25%")
                _default(rolling, "maxSurge", "25%")
    _default(spec, "revisionHistoryLimit", 10)
    _default(spec, "progressDeadlineSeconds", 600)
    _default_template(spec)


def _default_stateful_set(stateful_set: Obj) -> None:
    """SetDefaults_StatefulSet: OrderedReady pods; an unset update strategy becomes RollingUpdate with an empty
    rollingUpdate (a RollingUpdate sent without one keeps none), whose partition is then 0; the PVC retention
    policy Retain on delete and on scale (StatefulSetAutoDeletePVC, GA and locked on since 1.32); one replica; 10
    revisions kept; then the pod template. No maxUnavailable: MaxUnavailableStatefulSet is alpha (off) in 1.33."""
    spec = _struct(stateful_set, "spec")
    if spec is None:
        return
    _default(spec, "podManagementPolicy", "OrderedReady")
    update = _struct(spec, "updateStrategy")
    if update is not None:
        if _unset(update.get("type")):
            update["type"] = "RollingUpdate"
            if update.get("rollingUpdate") is None:
                update["rollingUpdate"] = {}
        rolling = update.get("rollingUpdate")
        if update["type"] == "RollingUpdate" and isinstance(rolling, dict):
            _default(rolling, "partition", 0)
    retention = _struct(spec, "persistentVolumeClaimRetentionPolicy")
    if retention is not None:
        _default(retention, "whenDeleted", "Retain")
        _default(retention, "whenScaled", "Retain")
    _default(spec, "replicas", 1)
    _default(spec, "revisionHistoryLimit", 10)
    _default_template(spec)


def _default_replica_set(replica_set: Obj) -> None:
    """SetDefaults_ReplicaSet: one replica; then the pod template."""
    spec = _struct(replica_set, "spec")
    if spec is None:
        return
    _default(spec, "replicas", 1)
    _default_template(spec)


def _default_template(workload_spec: Obj) -> None:
    """A workload's pod template (a struct, so there even when not sent) gets the PodSpec and container defaults,
    but none of a Pod's own (SetDefaults_Pod, admission): a template's defaults are what its pods are compared by,
    and new ones there would roll every workload on an API server upgrade (TestWorkloadDefaults)."""
    template = _struct(workload_spec, "template")
    if template is None:
        return
    pod_spec = _struct(template, "spec")
    if pod_spec is not None:
        _default_pod_spec(pod_spec)


# ------------------------------------------------------------------------------------------------------------------
# core/v1 pods


def _default_pod(pod: Obj) -> None:
    """A Pod's spec defaults (the PodSpec's and its containers', as for a template) and the Pod's own
    (SetDefaults_Pod): requests copied from limits where missing, `enableServiceLinks: true`, and with hostNetwork
    each container port's hostPort; and the ServiceAccount admission plugin's `serviceAccountName: default`, which
    is admission rather than defaulting and so is not given to templates."""
    spec = _struct(pod, "spec")
    if spec is None:
        return
    _default_pod_spec(spec)
    for container in _containers(spec, "containers", "initContainers"):
        _requests_from_limits(container)
    _default(spec, "enableServiceLinks", True)
    if spec.get("hostNetwork") is True:
        for container in _containers(spec, "containers", "initContainers"):
            for port in _items(container, "ports"):
                if not port.get("hostPort") and port.get("containerPort") is not None:
                    port["hostPort"] = port["containerPort"]
    _default(spec, "serviceAccountName", "default")


def _default_pod_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec, and SetDefaults_Container for every container, init and ephemeral ones too."""
    _default(spec, "dnsPolicy", "ClusterFirst")
    _default(spec, "restartPolicy", "Always")
    _default(spec, "securityContext", {})
    _default(spec, "terminationGracePeriodSeconds", 30)
    _default(spec, "schedulerName", "default-scheduler")
    for container in _containers(spec, "containers", "initContainers", "ephemeralContainers"):
        _default_container(container)


def _default_container(container: Obj) -> None:
    """SetDefaults_Container (the pull policy, the termination message's path and policy) and each port's
    protocol (`+default="TCP"`)."""
    if _unset(container.get("imagePullPolicy")):
        container["imagePullPolicy"] = pull_policy(container.get("image"))
    _default(container, "terminationMessagePath", "/dev/termination-log")
    _default(container, "terminationMessagePolicy", "File")
    for port in _items(container, "ports"):
        _default(port, "protocol", "TCP")


def _requests_from_limits(container: Obj) -> None:
    """A limit without a request is also the request (quantities are copied as sent: the fake does not
    canonicalize them)."""
    resources = container.get("resources")
    if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
        return
    requests = resources.get("requests")
    if not isinstance(requests, dict):
        requests = {}
    missing = {name: value for name, value in resources["limits"].items() if name not in requests}
    if missing:
        resources["requests"] = {**requests, **missing}


def _containers(spec: Obj, *lists: str) -> list[Obj]:
    return [container for key in lists for container in _items(spec, key)]


def _items(fields: Obj, key: str) -> list[Obj]:
    found = fields.get(key)
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []


# ------------------------------------------------------------------------------------------------------------------
# Image references (the docker/distribution grammar ParseNormalizedNamed accepts)

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_REFERENCE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<algorithm>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*):(?P<encoded>[0-9a-zA-Z=_-]+))?")
_IDENTIFIER = re.compile(r"[a-f0-9]{64}")
_DIGEST_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}


def image_tag(image: object) -> str:
    """The tag `ParseImageName` gives: "latest" for a reference with neither tag nor digest, "" for a digest only
    or for what does not parse (uppercase, a scheme, a bare 64-hex identifier, a malformed digest, no image)."""
    text = image if isinstance(image, str) else ""
    found = _REFERENCE.fullmatch(text)
    if found is None or _IDENTIFIER.fullmatch(text) or len(found["name"]) > 255:
        return ""
    if found["algorithm"] is not None:
        if (_DIGEST_LENGTHS.get(found["algorithm"]) != len(found["encoded"])
                or not re.fullmatch(r"[a-f0-9]+", found["encoded"])):
            return ""
        return found["tag"] or ""
    return found["tag"] or "latest"


def pull_policy(image: object) -> str:
    """SetDefaults_Container: Always for the `latest` tag (said or implied), IfNotPresent otherwise."""
    return "Always" if image_tag(image) == "latest" else "IfNotPresent"


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
