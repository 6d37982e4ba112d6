"""The Deployment controller's arithmetic: which ReplicaSet is new, how a scale is split between ReplicaSets during
a rollout, how a rolling update steps, and the status it writes. Pure functions of plain objects; the fake's
workload controller (server.py) applies what they decide.

Upstream (read, not copied): k8s.io/kubernetes `pkg/controller/deployment/sync.go` (`getNewReplicaSet`, `scale`,
`isScalingEvent`, `calculateStatus`), `rolling.go` (`reconcileNewReplicaSet`, `reconcileOldReplicaSets`,
`cleanupUnhealthyReplicas`, `scaleDownOldReplicaSetsForRollingUpdate`), `recreate.go`, `progress.go`
(`syncRolloutStatus`) and `util/deployment_util.go` (`ResolveFenceposts`, `NewRSNewReplicas`, `IsSaturated`,
`FindActiveOrLatest`, `GetProportion`, `getReplicaSetFraction`), as of 1.28 and unchanged through 1.33 with the
feature gates at their defaults (no `terminatingReplicas`). The rows of upstream's own tables (TestScale,
TestResolveFenceposts, TestNewRSNewReplicas, the rolling tests) are in tests/kube/test_fake_deployments.py.

The Deployments read here are as the fake's API server stored them, defaulted on every write
(tests/fakekube/strategies.py, SetDefaults_Deployment): a RollingUpdate has its maxSurge and maxUnavailable, so the
strategy is read as it is, as upstream's controller reads it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

from tests.fakekube.pods import POD_TEMPLATE_HASH
from tests.fakekube.resources import Obj

REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
# Deployment annotations a new ReplicaSet does not inherit (`annotationsToSkip`).
_NOT_COPIED = frozenset({"kubectl.kubernetes.io/last-applied-configuration", REVISION,
                         "deployment.kubernetes.io/revision-history", DESIRED_REPLICAS, MAX_REPLICAS,
                         "deprecated.deployment.rollback.to"})


class StrategyError(ValueError):
    """A maxSurge or maxUnavailable that is neither an integer nor a percentage."""


# ------------------------------------------------------------------------------------------------------------------
# Reading the objects


def replicas(obj: Obj | None) -> int:
    """spec.replicas (1 when absent, as the API server defaults it); 0 for no object."""
    if obj is None:
        return 0
    return int((obj.get("spec") or {}).get("replicas", 1))


def status_count(obj: Obj | None, field: str) -> int:
    return 0 if obj is None else int((obj.get("status") or {}).get(field) or 0)


def annotation_int(obj: Obj, key: str) -> int | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


def is_rolling(deployment: Obj) -> bool:
    strategy = (deployment.get("spec") or {}).get("strategy") or {}
    return bool(strategy.get("type") == "RollingUpdate")


def _rolling_field(deployment: Obj, field: str) -> object:
    """maxSurge or maxUnavailable as stored (None where absent, which ResolveFenceposts reads as 0)."""
    strategy = (deployment.get("spec") or {}).get("strategy") or {}
    return (strategy.get("rollingUpdate") or {}).get(field)


def scaled_value(value: object, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: an int as is; "N%" of `total`, rounded up or down."""
    if isinstance(value, bool):
        raise StrategyError(f"invalid value {value!r}")
    if isinstance(value, int):
        return value
    text = str(value)
    if not text.endswith("%"):
        raise StrategyError(f"invalid type: string is not a percentage: {text!r}")
    try:
        percent = int(text[:-1])
    except ValueError as error:
        raise StrategyError(f"invalid value for IntOrString: invalid value {text!r}") from error
    exact = percent * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def resolve_fenceposts(max_surge: object, max_unavailable: object, desired: int) -> tuple[int, int]:
    """ResolveFenceposts: (surge, unavailable) for `desired` replicas; both zero resolves to one unavailable."""
    surge = scaled_value(0 if max_surge is None else max_surge, desired, True)
    unavailable = scaled_value(0 if max_unavailable is None else max_unavailable, desired, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_surge(deployment: Obj) -> int:
    if not is_rolling(deployment):
        return 0
    try:
        return resolve_fenceposts(_rolling_field(deployment, "maxSurge"),
                                  _rolling_field(deployment, "maxUnavailable"),
                                  replicas(deployment))[0]
    except StrategyError:
        return 0


def max_unavailable(deployment: Obj) -> int:
    wanted = replicas(deployment)
    if not is_rolling(deployment) or wanted == 0:
        return 0
    try:
        unavailable = resolve_fenceposts(_rolling_field(deployment, "maxSurge"),
                                         _rolling_field(deployment, "maxUnavailable"),
                                         wanted)[1]
    except StrategyError:
        return 0
    return min(unavailable, wanted)


# ------------------------------------------------------------------------------------------------------------------
# Which ReplicaSet is new


def _created(rs: Obj) -> tuple[str, str]:
    meta = rs.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


def by_creation(sets: Sequence[Obj]) -> list[Obj]:
    """ReplicaSetsByCreationTimestamp: oldest first, a tie by name."""
    return sorted(sets, key=_created)


def without_hash(template: Obj) -> Obj:
    """The template as EqualIgnoreHash compares it: without the hash label, and with what Semantic.DeepEqual takes
    as equal to absent (null, an empty object or list: `kubectl rollout undo` sends `creationTimestamp: null` and
    `resources: {}`, which a typed decode makes the zero values a template without them has) left out."""
    found = _semantic(copy.deepcopy(template))
    labels = (found.get("metadata") or {}).get("labels") if isinstance(found, dict) else None
    if isinstance(labels, dict):
        labels.pop(POD_TEMPLATE_HASH, None)
    return found if isinstance(found, dict) else {}


def _semantic(value: object) -> object:
    if isinstance(value, dict):
        kept = {k: _semantic(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def find_new(deployment: Obj, sets: Sequence[Obj]) -> Obj | None:
    """FindNewReplicaSet: the oldest ReplicaSet whose template is the Deployment's, the hash label aside."""
    wanted = without_hash((deployment.get("spec") or {}).get("template") or {})
    for rs in by_creation(sets):
        if without_hash((rs.get("spec") or {}).get("template") or {}) == wanted:
            return rs
    return None


def max_revision(sets: Sequence[Obj]) -> int:
    return max((annotation_int(rs, REVISION) or 0 for rs in sets), default=0)


def next_revision(new: Obj, olds: Sequence[Obj]) -> dict[str, str] | None:
    """SetNewReplicaSetAnnotations for a ReplicaSet that is new again (a rollback, `kubectl rollout undo`): the
    revision after the old ones' highest, and the one it had added to its revision-history; None where its
    revision is already the highest."""
    had = annotation_int(new, REVISION) or 0
    highest = max_revision(olds)
    if had > highest:
        return None
    annotations = dict((new.get("metadata") or {}).get("annotations") or {})
    history = annotations.get("deployment.kubernetes.io/revision-history", "")
    marks = {REVISION: str(highest + 1)}
    if had:
        marks["deployment.kubernetes.io/revision-history"] = f"{history},{had}" if history else str(had)
    return marks


def new_replica_set(deployment: Obj, pod_hash: str, olds: Sequence[Obj]) -> Obj:
    """getNewReplicaSet's ReplicaSet for a template none has: `<deployment>-<hash>`, the template's labels and the
    selector with `pod-template-hash`, the Deployment as controller owner, the next revision and the replicas
    annotations, and as many replicas as NewRSNewReplicas allows."""
    spec = deployment.get("spec") or {}
    meta = deployment["metadata"]
    template = copy.deepcopy(spec.get("template") or {})
    template.setdefault("metadata", {})
    template["metadata"]["labels"] = {**(template["metadata"].get("labels") or {}), POD_TEMPLATE_HASH: pod_hash}
    selector = copy.deepcopy(spec.get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), POD_TEMPLATE_HASH: pod_hash}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _NOT_COPIED}
    wanted = replicas(deployment)
    annotations.update({REVISION: str(max_revision(olds) + 1), DESIRED_REPLICAS: str(wanted),
                        MAX_REPLICAS: str(wanted + max_surge(deployment))})
    rs: Obj = {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": f"{meta['name']}-{pod_hash}", "namespace": meta.get("namespace", ""),
                     "labels": dict(template["metadata"]["labels"]), "annotations": annotations,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                          "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"replicas": 0, "selector": selector, "template": template},
    }
    if spec.get("minReadySeconds"):
        rs["spec"]["minReadySeconds"] = spec["minReadySeconds"]
    rs["spec"]["replicas"] = new_rs_new_replicas(deployment, [*olds, rs], rs)
    return rs


# ------------------------------------------------------------------------------------------------------------------
# Scaling (sync.go `scale`)


def active(sets: Sequence[Obj | None]) -> list[Obj]:
    """FilterActiveReplicaSets: those with replicas to keep."""
    return [rs for rs in sets if rs is not None and replicas(rs) > 0]


def is_scaling_event(deployment: Obj, new: Obj | None, olds: Sequence[Obj]) -> bool:
    """isScalingEvent: an active ReplicaSet was sized for another Deployment size than this one."""
    wanted = replicas(deployment)
    return any((desired := annotation_int(rs, DESIRED_REPLICAS)) is not None and desired != wanted
               for rs in active([*olds, new]))


def is_saturated(deployment: Obj, rs: Obj | None) -> bool:
    if rs is None:
        return False
    desired = annotation_int(rs, DESIRED_REPLICAS)
    wanted = replicas(deployment)
    return (desired is not None and replicas(rs) == wanted and desired == wanted
            and status_count(rs, "availableReplicas") == wanted)


def find_active_or_latest(new: Obj | None, olds: Sequence[Obj]) -> Obj | None:
    """FindActiveOrLatest: the one active ReplicaSet; with none, the new or else the newest old one; with several,
    None (they are scaled in proportion)."""
    if new is None and not olds:
        return None
    newest_first = list(reversed(by_creation(olds)))
    found = active([*newest_first, new])
    if not found:
        return new if new is not None else newest_first[0]
    return found[0] if len(found) == 1 else None


def _round_half_away(value: float) -> int:
    """integer.RoundToInt32: halves away from zero (Python's round() takes them to even)."""
    return math.floor(value + 0.5) if value >= 0 else -math.floor(-value + 0.5)


def replica_set_fraction(rs: Obj, deployment: Obj) -> int:
    """getReplicaSetFraction: how many replicas the ReplicaSet gains (or loses) for its share of the new size. Its
    max-replicas annotation says the Deployment's size it was sized for; missing or 0, the Deployment's
    status.replicas stands in, and with that 0 too nothing moves (the newer upstream guard)."""
    wanted = replicas(deployment)
    if wanted == 0:
        return -replicas(rs)
    target = wanted + max_surge(deployment)
    before = annotation_int(rs, MAX_REPLICAS)
    if not before:
        before = status_count(deployment, "replicas")
        if before == 0:
            return 0
    return _round_half_away(replicas(rs) * target / before) - replicas(rs)


def proportion(rs: Obj, deployment: Obj, to_add: int, added: int) -> int:
    """GetProportion: the ReplicaSet's share of `to_add`, never past what is left of it."""
    if replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    fraction = replica_set_fraction(rs, deployment)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def _by_size(sets: Sequence[Obj], newer_first: bool) -> list[Obj]:
    """ReplicaSetsBySizeNewer / BySizeOlder: the larger first; equal sizes by creation, newer or older first."""
    ordered = by_creation(sets)
    if newer_first:
        ordered.reverse()
    return sorted(ordered, key=lambda rs: -replicas(rs))  # stable: the creation order stays among equal sizes


def scale_sizes(deployment: Obj, new: Obj | None, olds: Sequence[Obj]) -> dict[str, int]:
    """`scale`: the size of each ReplicaSet it writes (name -> replicas), for a Deployment whose size changed.

    One active ReplicaSet (or none) takes the whole size; a saturated new one leaves the old ones none; otherwise,
    in a rolling update, the replicas to add or remove (up to the size plus maxSurge) are split in proportion to
    what each was sized for, the largest first (newer first going up, older first going down), the rounding's
    leftover to the first."""
    found = find_active_or_latest(new, olds)
    wanted = replicas(deployment)
    if found is not None:
        return {} if replicas(found) == wanted else {found["metadata"]["name"]: wanted}
    if is_saturated(deployment, new):
        return {rs["metadata"]["name"]: 0 for rs in active(olds)}
    if not is_rolling(deployment):
        return {}
    sets = active([*olds, new])
    allowed = wanted + max_surge(deployment) if wanted > 0 else 0
    to_add = allowed - sum(replicas(rs) for rs in sets)
    if to_add:
        sets = _by_size(sets, newer_first=to_add > 0)
    sizes: dict[str, int] = {}
    added = 0
    for rs in sets:
        share = proportion(rs, deployment, to_add, added) if to_add else 0
        sizes[rs["metadata"]["name"]] = replicas(rs) + share
        added += share
    if to_add and sets:
        first = sets[0]["metadata"]["name"]
        sizes[first] = max(0, sizes[first] + to_add - added)
    return sizes


# ------------------------------------------------------------------------------------------------------------------
# A rolling update (rolling.go)


def new_rs_new_replicas(deployment: Obj, all_sets: Sequence[Obj], new: Obj) -> int:
    """NewRSNewReplicas: the new ReplicaSet grows while every ReplicaSet's replicas stay within size + maxSurge."""
    if not is_rolling(deployment):
        return replicas(deployment)
    surge = max_surge(deployment)  # GetScaledValueFromIntOrPercent(maxSurge, replicas, round up)
    current = sum(replicas(rs) for rs in all_sets)
    most = replicas(deployment) + surge
    if current >= most:
        return replicas(new)
    return replicas(new) + min(most - current, replicas(deployment) - replicas(new))


def reconcile_new(deployment: Obj, all_sets: Sequence[Obj], new: Obj) -> int | None:
    """reconcileNewReplicaSet: the new ReplicaSet's next size, None where it keeps its size."""
    wanted, has = replicas(deployment), replicas(new)
    if has == wanted:
        return None
    size = wanted if has > wanted else new_rs_new_replicas(deployment, all_sets, new)
    return None if size == has else size


def reconcile_old(deployment: Obj, all_sets: Sequence[Obj], olds: Sequence[Obj], new: Obj) -> dict[str, int]:
    """reconcileOldReplicaSets: the old ReplicaSets' next sizes (name -> replicas; empty where none may shrink).
    What may go keeps size - maxUnavailable available, less the new ReplicaSet's unavailable pods; the old ones'
    unavailable pods go first (cleanupUnhealthyReplicas), then available ones while more than the minimum are
    available (scaleDownOldReplicaSetsForRollingUpdate), the oldest ReplicaSet first in both."""
    olds = active(olds)
    if not olds:
        return {}
    minimum = replicas(deployment) - max_unavailable(deployment)
    new_unavailable = replicas(new) - status_count(new, "availableReplicas")
    most = sum(replicas(rs) for rs in all_sets) - minimum - new_unavailable
    if most <= 0:
        return {}
    sizes: dict[str, int] = {}
    cleaned = 0
    for rs in by_creation(olds):
        if cleaned >= most:
            break
        unhealthy = replicas(rs) - status_count(rs, "availableReplicas")
        if unhealthy <= 0:
            continue
        take = min(most - cleaned, unhealthy)
        sizes[rs["metadata"]["name"]] = replicas(rs) - take
        cleaned += take
    available = sum(status_count(rs, "availableReplicas") for rs in [*olds, new])
    budget = available - minimum
    taken = 0
    for rs in by_creation(olds):
        if taken >= budget:
            break
        has = sizes.get(rs["metadata"]["name"], replicas(rs))
        if has == 0:
            continue
        take = min(has, budget - taken)
        sizes[rs["metadata"]["name"]] = has - take
        taken += take
    return sizes


# ------------------------------------------------------------------------------------------------------------------
# Status (calculateStatus, syncRolloutStatus)


def set_condition(conditions: list[Obj], kind: str, status: str, reason: str, message: str, now: str) -> list[Obj]:
    """SetDeploymentCondition: nothing where one of the type has this status and reason; otherwise the old one goes
    and this one is appended (keeping its lastTransitionTime where only the reason changed)."""
    current = next((c for c in conditions if c.get("type") == kind), None)
    if current is not None and current.get("status") == status and current.get("reason") == reason:
        return conditions
    transition = current.get("lastTransitionTime", now) if current is not None and current.get("status") == status else now
    return [c for c in conditions if c.get("type") != kind] + [
        {"type": kind, "status": status, "lastUpdateTime": now, "lastTransitionTime": transition,
         "reason": reason, "message": message}]


def deployment_status(deployment: Obj, all_sets: Sequence[Obj], new: Obj | None, now: str, *,
                      rollout: bool) -> Obj:
    """calculateStatus, and with `rollout` syncRolloutStatus's Progressing condition: counts summed over the
    ReplicaSets (updatedReplicas the new one's), Available while no more than maxUnavailable are unavailable, and
    Progressing NewReplicaSetAvailable once the rollout is complete, ReplicaSetUpdated while it moves."""
    old = deployment.get("status") or {}
    wanted = replicas(deployment)
    available = sum(status_count(rs, "availableReplicas") for rs in all_sets)
    total = sum(replicas(rs) for rs in all_sets)
    status: Obj = {
        "observedGeneration": deployment["metadata"].get("generation", 1),
        "replicas": sum(status_count(rs, "replicas") for rs in all_sets),
        "updatedReplicas": status_count(new, "replicas"),
        "readyReplicas": sum(status_count(rs, "readyReplicas") for rs in all_sets),
        "availableReplicas": available,
        "unavailableReplicas": max(total - available, 0),
    }
    conditions = list(old.get("conditions") or [])
    if available >= wanted - max_unavailable(deployment):
        conditions = set_condition(conditions, "Available", "True", "MinimumReplicasAvailable",
                                    "Deployment has minimum availability.", now)
    else:
        conditions = set_condition(conditions, "Available", "False", "MinimumReplicasUnavailable",
                                    "Deployment does not have minimum availability.", now)
    if rollout:
        current = next((c for c in conditions if c.get("type") == "Progressing"), None)
        done = status["replicas"] == status["updatedReplicas"] and current is not None and (
            current.get("reason") == "NewReplicaSetAvailable")
        name = new["metadata"]["name"] if new is not None else None
        subject = f'ReplicaSet "{name}"' if name else f'Deployment "{deployment["metadata"]["name"]}"'
        if not done and _complete(wanted, status, deployment):
            conditions = set_condition(conditions, "Progressing", "True", "NewReplicaSetAvailable",
                                        f"{subject} has successfully progressed.", now)
        elif not done and _progressing(old, status):
            transition = (current.get("lastTransitionTime", now)
                          if current is not None and current.get("status") == "True" else now)
            conditions = [c for c in conditions if c.get("type") != "Progressing"] + [
                {"type": "Progressing", "status": "True", "lastUpdateTime": now, "lastTransitionTime": transition,
                 "reason": "ReplicaSetUpdated", "message": f"{subject} is progressing."}]
    status["conditions"] = conditions
    for key in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas"):
        if not status[key]:
            del status[key]  # the real status omits zero counts (omitempty)
    return status


def _complete(wanted: int, status: Obj, deployment: Obj) -> bool:
    """DeploymentComplete."""
    return bool(status["updatedReplicas"] == wanted and status["replicas"] == wanted
                and status["availableReplicas"] == wanted
                and status["observedGeneration"] >= deployment["metadata"].get("generation", 1))


def _progressing(old: Obj, new: Obj) -> bool:
    """DeploymentProgressing: more updated, fewer old, more ready or more available than the status before."""
    def count(status: Obj, key: str) -> int:
        return int(status.get(key) or 0)

    return (count(new, "updatedReplicas") > count(old, "updatedReplicas")
            or count(new, "replicas") - count(new, "updatedReplicas")
            < count(old, "replicas") - count(old, "updatedReplicas")
            or count(new, "readyReplicas") > count(old, "readyReplicas")
            or count(new, "availableReplicas") > count(old, "availableReplicas"))
