"""Pods as the workload controllers make them and the ReplicaSet controller removes them, and the pod rules of the
registry that the operator can observe.

Upstream, Kubernetes 1.33 (read, not copied):
- which pods a scale-down removes: k8s.io/kubernetes `pkg/controller/replicaset/replica_set.go` (`manageReplicas`,
  `getPodsToDelete`, `getPodsRankedByRelatedPodsOnSameNode`) sorting with `pkg/controller/controller_utils.go`
  (`ActivePodsWithRanks.Less`, `afterOrZero`, `logarithmicRankDiff`, `podReadyTime`, `compareMaxContainerRestarts`,
  `IsPodActive`). LogarithmicScaleDown is GA and locked on since 1.31, PodDeletionCost beta and on by default since
  1.22 (`pkg/features/kube_features.go`), so only their enabled paths exist here;
- the deletion cost: `pkg/apis/core/helper/helpers.go` (`GetDeletionCostFromPodAnnotations`, `validFirstDigit`),
  validated by `pkg/apis/core/validation/validation.go` (`ValidatePodSpecificAnnotations`: "must be a 32bit
  integer"; reached twice on an update, through `validatePodMetadataAndSpec` and
  `ValidatePodSpecificAnnotationUpdates`) unless the stored pod's value was already invalid
  (`pkg/api/pod/util.go` `GetValidationOptionsFromPodSpecAndMeta`, `AllowInvalidPodDeletionCost`);
- pod names: a Deployment's ReplicaSet is `<deployment>-<pod-template-hash>` (`pkg/controller/controller_utils.go`
  `ComputeHash`: an FNV-32a hash written with `rand.SafeEncodeString`), its pods `<replicaset>-<5 characters>`
  (`generateName`, k8s.io/apiserver `pkg/storage/names`).
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import json
import math
import re
import secrets
from collections.abc import Callable, Sequence

from tests.fakekube.resources import Obj
from tests.fakekube.validation import INVALID, FieldError

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
DELETION_COST_FIELD = f"metadata.annotations[{DELETION_COST}]"
POD_TEMPLATE_HASH = "pod-template-hash"
# Every pod of the fake runs on this one node and answers on loopback (see the README).
NODE_NAME = "fakekube-node"
POD_IP = "127.0.0.1"
# k8s.io/apimachinery pkg/util/rand: the characters of generated names (no vowels, no 0, 1, 3).
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}  # a phase missing here counts as Pending (Go's zero)

PodHook = Callable[[Obj], None]


# ------------------------------------------------------------------------------------------------------------------
# Reading a pod


def deletion_cost(annotations: dict[str, str] | None) -> int | None:
    """The pod-deletion-cost annotation as GetDeletionCostFromPodAnnotations reads it: 0 when absent, None when it is
    not an int32 written without a plus sign or leading zeros."""
    value = (annotations or {}).get(DELETION_COST)
    if value is None:
        return 0
    if not re.fullmatch(r"0|-[0-9]+|[1-9][0-9]*", value):
        return None
    number = int(value)
    return number if -(2**31) <= number < 2**31 else None


def is_ready(pod: Obj) -> bool:
    """pkg/api/v1/pod IsPodReady: the Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def is_active(pod: Obj) -> bool:
    """controller_utils.go IsPodActive: neither finished nor being deleted."""
    return ((pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not pod["metadata"].get("deletionTimestamp"))


def _time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _ready_since(pod: Obj) -> dt.datetime | None:
    """podReadyTime: when the Ready condition turned True (None: not ready, or no time recorded)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return _time(condition.get("lastTransitionTime"))
    return None


def _restarts(pod: Obj) -> tuple[int, int]:
    """maxContainerRestarts: the most restarts of a container, then of a sidecar (an init container that restarts
    Always)."""
    status = pod.get("status") or {}
    regular = max([int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or []], default=0)
    sidecars = {c.get("name") for c in (pod.get("spec") or {}).get("initContainers") or []
                if c.get("restartPolicy") == "Always"}
    sidecar = max([int(c.get("restartCount") or 0) for c in status.get("initContainerStatuses") or []
                   if c.get("name") in sidecars], default=0)
    return regular, sidecar


# ------------------------------------------------------------------------------------------------------------------
# Which pods a scale-down removes


def _log2_bucket(when: dt.datetime, now: dt.datetime) -> int:
    """logarithmicRankDiff's rank of one time: log2 of its age in nanoseconds, truncated; -1 if not in the past."""
    age = (now - when) // dt.timedelta(microseconds=1) * 1000
    return int(math.log2(age)) if age > 0 else -1


def _newer_first(first: dt.datetime | None, second: dt.datetime | None, now: dt.datetime | None, first_uid: str,
                 second_uid: str) -> bool:
    """Steps 6 and 8 of Less for two different times: the more recent one first, a missing time before any other;
    with LogarithmicScaleDown, times in the same power-of-two age bucket are ordered by uid instead."""
    if first is None or second is None:  # afterOrZero: a missing time is later than any other
        return first is None
    if now is None:
        return first > second
    bucket_difference = _log2_bucket(first, now) - _log2_bucket(second, now)
    return first_uid < second_uid if bucket_difference == 0 else bucket_difference < 0


def delete_before(first: Obj, first_rank: int, second: Obj, second_rank: int, now: dt.datetime | None) -> bool:
    """Whether the ReplicaSet controller removes `first` before `second` on a scale-down: ActivePodsWithRanks.Less of
    k8s.io/kubernetes pkg/controller/controller_utils.go (Kubernetes 1.33), as getPodsToDelete in
    pkg/controller/replicaset/replica_set.go sorts with it. A rank is the number of active related pods on the pod's
    node (getPodsRankedByRelatedPodsOnSameNode); `now` is the sort's reference time (None: no logarithmic scaling).

    In turn: unscheduled first; Pending < Unknown < Running; not ready first; lower pod-deletion-cost first (an
    unparsable cost counts as 0); higher rank first; among ready pods, ready more recently first; more container
    restarts, then more sidecar restarts, first; created more recently first. Steps 6 and 8 compare ages in
    power-of-two buckets (LogarithmicScaleDown) and order pods of one bucket by uid."""
    a_spec, b_spec = first.get("spec") or {}, second.get("spec") or {}
    a_node, b_node = str(a_spec.get("nodeName") or ""), str(b_spec.get("nodeName") or "")
    if a_node != b_node and (not a_node or not b_node):
        return not a_node
    a_phase = _PHASE_ORDINAL.get(str((first.get("status") or {}).get("phase") or ""), 0)
    b_phase = _PHASE_ORDINAL.get(str((second.get("status") or {}).get("phase") or ""), 0)
    if a_phase != b_phase:
        return a_phase < b_phase
    if is_ready(first) != is_ready(second):
        return not is_ready(first)
    a_cost = deletion_cost(first["metadata"].get("annotations")) or 0
    b_cost = deletion_cost(second["metadata"].get("annotations")) or 0
    if a_cost != b_cost:
        return a_cost < b_cost
    if first_rank != second_rank:
        return first_rank > second_rank
    a_uid, b_uid = str(first["metadata"].get("uid") or ""), str(second["metadata"].get("uid") or "")
    if is_ready(first) and is_ready(second):
        a_ready, b_ready = _ready_since(first), _ready_since(second)
        if a_ready != b_ready:
            return _newer_first(a_ready, b_ready, now, a_uid, b_uid)
    a_restarts, b_restarts = _restarts(first), _restarts(second)
    if a_restarts != b_restarts:
        return a_restarts > b_restarts  # regular restarts first, then sidecar restarts
    a_created, b_created = _time(first["metadata"].get("creationTimestamp")), _time(second["metadata"].get(
        "creationTimestamp"))
    if a_created != b_created:
        return _newer_first(a_created, b_created, now, a_uid, b_uid)
    return False


def pods_to_delete(pods: Sequence[Obj], related: Sequence[Obj], count: int, now: dt.datetime) -> list[Obj]:
    """getPodsToDelete: the `count` pods of `pods` (the workload's active pods) to remove, ranked by delete_before with
    each pod's rank the number of active `related` pods on its node; no sorting when all of them go."""
    if count >= len(pods):
        return list(pods[:count])
    on_node: dict[str, int] = {}
    for pod in related:
        if is_active(pod):
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            on_node[node] = on_node.get(node, 0) + 1
    ranked = [(pod, on_node.get(str((pod.get("spec") or {}).get("nodeName") or ""), 0)) for pod in pods]

    def compare(a: tuple[Obj, int], b: tuple[Obj, int]) -> int:
        return -1 if delete_before(a[0], a[1], b[0], b[1], now) else 1 if delete_before(b[0], b[1], a[0], a[1], now) else 0

    return [pod for pod, _ in sorted(ranked, key=functools.cmp_to_key(compare))[:count]]


# ------------------------------------------------------------------------------------------------------------------
# Validation


def annotation_errors(pod: Obj, old: Obj | None) -> list[FieldError]:
    """The 422 field errors for a pod-deletion-cost that is not an int32: once on a create, twice on an update (the
    upstream validation reaches the check on two paths; the message shows it once), none if the stored value was
    already invalid."""
    annotations = pod["metadata"].get("annotations") or {}
    if deletion_cost(annotations) is not None:
        return []
    if old is not None and deletion_cost(old["metadata"].get("annotations")) is None:
        return []
    error = FieldError(INVALID, DELETION_COST_FIELD, str(annotations[DELETION_COST]), "must be a 32bit integer")
    return [error] if old is None else [error, error]


# ------------------------------------------------------------------------------------------------------------------
# Pods of a workload


def _fnv32a(text: str) -> int:
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def template_hash(template: Obj) -> str:
    """A pod-template-hash as ComputeHash writes one (up to 10 characters): FNV-32a of the template, its decimal
    digits spelled with the safe alphabet. The value differs from upstream's (which hashes the Go struct)."""
    return "".join(_ALPHANUMS[ord(digit) % len(_ALPHANUMS)] for digit in str(_fnv32a(json.dumps(template,
                                                                                             sort_keys=True))))


def random_suffix() -> str:
    """The five characters generateName appends."""
    return "".join(secrets.choice(_ALPHANUMS) for _ in range(5))


def pod_for(workload: Obj, kind: str, api_version: str) -> tuple[str, Obj]:
    """(name prefix, pod manifest) for one more pod of a ReplicaSet: labels, annotations and finalizers of its
    template (a Deployment's ReplicaSet carries `pod-template-hash` there), the template's spec on the fake's node,
    and the ReplicaSet as controller owner."""
    template = (workload.get("spec") or {}).get("template") or {}
    template_meta = template.get("metadata") or {}
    labels = dict(template_meta.get("labels") or {})
    name = str(workload["metadata"]["name"])
    meta: Obj = {"labels": labels, "ownerReferences": [{
        "apiVersion": api_version, "kind": kind, "name": workload["metadata"]["name"],
        "uid": workload["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]}
    if template_meta.get("annotations"):
        meta["annotations"] = dict(template_meta["annotations"])
    if template_meta.get("finalizers"):
        meta["finalizers"] = list(template_meta["finalizers"])
    spec = copy.deepcopy(template.get("spec") or {})
    spec["nodeName"] = NODE_NAME
    return f"{name}-", {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def running_status(pod: Obj, *, ready: bool, now: str) -> Obj:
    """What the kubelet reports for a started pod: Running on loopback, its containers running, ready or not."""
    containers = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or []]
    readiness = "True" if ready else "False"
    not_ready = {} if ready else {"reason": "ContainersNotReady",
                                  "message": f"containers with unready status: [{' '.join(containers)}]"}
    return {
        "phase": "Running", "hostIP": POD_IP, "hostIPs": [{"ip": POD_IP}], "podIP": POD_IP, "podIPs": [{"ip": POD_IP}],
        "startTime": now,
        "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": readiness, "lastTransitionTime": now, **not_ready},
            {"type": "ContainersReady", "status": readiness, "lastTransitionTime": now, **not_ready},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        ],
        "containerStatuses": [
            {"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "", "ready": ready, "started": True,
             "restartCount": 0, "state": {"running": {"startedAt": now}}}
            for c in (pod.get("spec") or {}).get("containers") or []],
    }


def owner_uid(pod: Obj) -> str | None:
    """The uid of the pod's controller (ownerReference with controller: true)."""
    for reference in pod["metadata"].get("ownerReferences") or []:
        if reference.get("controller"):
            return str(reference.get("uid"))
    return None
