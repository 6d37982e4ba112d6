"""A KEDA ScaledObject and the HPA behavior it carries, read once.

Two readers use it: `queuescale convert-keda` (controller/keda/convert.py) maps it onto a QueueScaler, and the
simulator's KEDA baseline (controller/simulator/keda.py) runs it. The model holds what KEDA and the API server
accept (kedacore/keda apis/keda/v1alpha1 scaledobject_types.go and its webhook; kubernetes/kubernetes
pkg/apis/autoscaling validation), with their defaults filled in. A trigger's `metadata` stays a mapping: each
scaler reads its own keys, and the two readers want different things of them (the converter maps five kinds
onto sources; the emulation reads azure-queue exactly as KEDA's typed config does).

Every error names its field path (`spec.triggers[0].metadata`, `spec.advanced.horizontalPodAutoscalerConfig
.behavior.scaleDown.policies[0].value`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from controller.model.fields import FieldError, Fields
from controller.model.rule import StepPolicy, StepType

KEDA_API_VERSION = "keda.sh/v1alpha1"

# KEDA's defaults (scaledobject_types.go and the controller: defaultPollingInterval, defaultCooldownPeriod,
# defaultHPAMaxReplicas); minReplicaCount 0 is the Go zero value.
DEFAULT_POLLING_INTERVAL = 30
DEFAULT_COOLDOWN_PERIOD = 300
DEFAULT_MIN_REPLICA_COUNT = 0
DEFAULT_MAX_REPLICA_COUNT = 100

# kube-controller-manager flags the HPA runs with, at their defaults.
HPA_SYNC = 15  # --horizontal-pod-autoscaler-sync-period
HPA_TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
DOWNSCALE_STABILIZATION = 300  # --horizontal-pod-autoscaler-downscale-stabilization

INT32_MAX = 2**31 - 1

SelectPolicy = Literal["Max", "Min", "Disabled"]
MetricType = Literal["AverageValue", "Value", "Utilization"]
FallbackBehavior = Literal["static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower",
                           "scalingModifiers"]
AuthenticationKind = Literal["TriggerAuthentication", "ClusterTriggerAuthentication"]

POLICY_TYPES: tuple[StepType, ...] = ("Pods", "Percent")
SELECT_POLICIES: tuple[SelectPolicy, ...] = ("Max", "Min", "Disabled")
METRIC_TYPES: tuple[MetricType, ...] = ("AverageValue", "Value", "Utilization")
# The CRD's enum lists the first four; later releases add scalingModifiers (the formula's own fallback).
FALLBACK_BEHAVIORS: tuple[FallbackBehavior, ...] = (
    "static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower", "scalingModifiers",
)
AUTHENTICATION_KINDS: tuple[AuthenticationKind, ...] = ("TriggerAuthentication", "ClusterTriggerAuthentication")


# --------------------------------------------------------------------------------------------------------------
# The HPA's behavior (autoscaling/v2 HorizontalPodAutoscalerBehavior)


@dataclass(frozen=True)
class HpaDirection:
    """HPAScalingRules for one direction, defaults filled in."""

    stabilization_window: int
    policies: tuple[StepPolicy, ...]
    select_policy: SelectPolicy = "Max"
    tolerance: float | None = None  # None: the controller's flag (HPA_TOLERANCE)


# pkg/apis/autoscaling/v2/defaults.go defaultHPAScaleUpRules and defaultHPAScaleDownRules. The scale-down window
# is nil there: the controller then uses its --horizontal-pod-autoscaler-downscale-stabilization flag.
DEFAULT_UP = HpaDirection(0, (StepPolicy("Pods", 4, 15), StepPolicy("Percent", 100, 15)))
DEFAULT_DOWN = HpaDirection(DOWNSCALE_STABILIZATION, (StepPolicy("Percent", 100, 15),))


@dataclass(frozen=True)
class HpaBehavior:
    """`advanced.horizontalPodAutoscalerConfig.behavior`, with autoscaling/v2 defaults for what it leaves out."""

    scale_up: HpaDirection = DEFAULT_UP
    scale_down: HpaDirection = DEFAULT_DOWN


# --------------------------------------------------------------------------------------------------------------
# The ScaledObject


@dataclass(frozen=True)
class ScaleTargetRef:
    """`spec.scaleTargetRef`: None where the ScaledObject leaves KEDA's default (apps/v1 Deployment)."""

    name: str
    kind: str | None = None
    api_version: str | None = None
    env_source_container_name: str | None = None


@dataclass(frozen=True)
class AuthenticationRef:
    """A trigger's `authenticationRef`: the (Cluster)TriggerAuthentication that gives its secret parameters."""

    name: str
    kind: AuthenticationKind = "TriggerAuthentication"


@dataclass(frozen=True)
class Trigger:
    """One entry of `spec.triggers`. `metadata` is the scaler's own map (KEDA types its values as strings)."""

    path: str  # "spec.triggers[0]": where the reader's errors about its metadata go
    type: str
    metadata: Mapping[str, object]
    name: str | None = None
    metric_type: MetricType = "AverageValue"
    use_cached_metrics: bool = False
    authentication_ref: AuthenticationRef | None = None


@dataclass(frozen=True)
class Fallback:
    """`spec.fallback`: after more than `failure_threshold` failed reads of a trigger, KEDA answers `replicas` x
    the trigger's target instead of an error (pkg/fallback/fallback.go)."""

    failure_threshold: int
    replicas: int
    behavior: FallbackBehavior = "static"


@dataclass(frozen=True)
class ScaledObject:
    """A keda.sh/v1alpha1 ScaledObject, defaults filled in."""

    name: str
    scale_target_ref: ScaleTargetRef
    triggers: tuple[Trigger, ...]
    namespace: str | None = None
    annotations: Mapping[str, object] = field(default_factory=dict)
    polling_interval: int = DEFAULT_POLLING_INTERVAL
    cooldown_period: int = DEFAULT_COOLDOWN_PERIOD
    initial_cooldown_period: int = 0
    min_replica_count: int = DEFAULT_MIN_REPLICA_COUNT
    max_replica_count: int = DEFAULT_MAX_REPLICA_COUNT
    idle_replica_count: int | None = None
    fallback: Fallback | None = None
    restore_to_original_replica_count: bool = False
    scaling_modifiers: bool = False  # `advanced.scalingModifiers` is set
    hpa_name: str | None = None
    # None when the ScaledObject sets no behavior: KEDA's hpa.go then leaves the HPA's behavior nil, and the
    # controller takes its legacy path. Set, both directions are filled (defaults.go), so which were written:
    behavior: HpaBehavior | None = None
    scale_up_set: bool = False
    scale_down_set: bool = False


Choice = TypeVar("Choice", bound=str)


def _choice(f: Fields, name: str, choices: tuple[Choice, ...], default: Choice) -> Choice:
    """`Fields.choice`, as the Literal type of `choices`."""
    value = f.choice(name, choices, default)
    return next((c for c in choices if c == value), default)


_QUANTITY = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(m?)")


def _tolerance(f: Fields) -> float | None:
    """`tolerance`: a resource.Quantity (int-or-string in the CRD), >= 0."""
    value = f.raw.get("tolerance")
    f.read.add("tolerance")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return float(value)
    match = _QUANTITY.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        f.error("tolerance", f'must be a quantity >= 0 written as a string, e.g. "0.05" or "50m", got {value!r}')
        return None
    number = float(match.group(1))
    return number / 1000 if match.group(2) else number


def _direction(f: Fields, default: HpaDirection) -> HpaDirection:
    """One HPAScalingRules, with `default`'s value for each field it leaves out (defaults.go copyHPAScalingRules).

    Bounds are the API server's (pkg/apis/autoscaling/validation: at least one policy when the list is given,
    periodSeconds 1..1800, stabilizationWindowSeconds 0..3600)."""
    policies: list[StepPolicy] = []
    for item, path in f.items("policies", min_items=1 if f.has("policies") else 0):
        p = Fields(item, path, f.errors)
        kind = _choice(p, "type", POLICY_TYPES, "Pods")
        if not p.has("type"):
            p.missing("type")
        value = p.integer("value", minimum=1)
        period = p.integer("periodSeconds", minimum=1, maximum=1800)
        p.finish()
        policies.append(StepPolicy(kind, value, period))
    direction = HpaDirection(
        stabilization_window=f.integer("stabilizationWindowSeconds", default.stabilization_window, minimum=0,
                                       maximum=3600),
        policies=tuple(policies) if f.has("policies") else default.policies,
        select_policy=_choice(f, "selectPolicy", SELECT_POLICIES, default.select_policy),
        tolerance=_tolerance(f),
    )
    f.finish()
    return direction


def _trigger(item: object, path: str, errors: list[FieldError]) -> Trigger:
    t = Fields(item, path, errors)
    kind = t.string("type", required=True)
    name = t.optional_string("name")
    metric_type = _choice(t, "metricType", METRIC_TYPES, "AverageValue")
    use_cached = t.boolean("useCachedMetrics", False)
    ref = t.child("authenticationRef")
    ref_name = ref.optional_string("name")
    ref_kind = _choice(ref, "kind", AUTHENTICATION_KINDS, "TriggerAuthentication")
    ref.finish()
    if not t.has("metadata"):
        t.missing("metadata")  # map[string]string without omitempty: the CRD requires it
    metadata = t.child("metadata").raw
    t.finish()
    return Trigger(
        path=path, type=kind, metadata=metadata, name=name,
        metric_type=metric_type, use_cached_metrics=use_cached,
        authentication_ref=AuthenticationRef(ref_name, ref_kind) if ref_name else None,
    )


def _fallback(s: Fields) -> Fallback | None:
    if not s.has("fallback"):
        s.read.add("fallback")
        return None
    f = s.child("fallback")
    behavior = _choice(f, "behavior", FALLBACK_BEHAVIORS, "static")
    # Both are int32 without omitempty in the Go type, so the CRD requires them; its schema says minimum 0.
    fallback = Fallback(
        failure_threshold=f.integer("failureThreshold", minimum=0, maximum=INT32_MAX),
        replicas=f.integer("replicas", minimum=0, maximum=INT32_MAX),
        behavior=behavior,
    )
    f.finish()
    return fallback


def read_scaled_object(doc: object, errors: list[FieldError]) -> ScaledObject:
    """The ScaledObject of a YAML document. Every bad field is appended to `errors` (the reader may add its own
    about trigger metadata, then raise once); the value returned is usable even then, with defaults in place."""
    f = Fields(doc, "", errors)
    api_version = f.string("apiVersion", required=True)
    if api_version and api_version != KEDA_API_VERSION:
        f.error("apiVersion", f'must be "{KEDA_API_VERSION}", got "{api_version}"')
    kind = f.string("kind", required=True)
    if kind and kind != "ScaledObject":
        f.error("kind", f'must be "ScaledObject", got "{kind}"')
    meta = f.child("metadata")
    name = meta.string("name", required=True)
    namespace = meta.optional_string("namespace")
    annotations = meta.raw.get("annotations")
    meta.read.update(meta.raw)
    f.read.add("status")
    s = f.child("spec")
    if not f.has("spec"):
        f.missing("spec")

    ref = s.child("scaleTargetRef")
    if not s.has("scaleTargetRef"):
        s.missing("scaleTargetRef")
    target = ScaleTargetRef(
        name=ref.string("name", required=True),
        api_version=ref.optional_string("apiVersion"),
        kind=ref.optional_string("kind"),
        env_source_container_name=ref.optional_string("envSourceContainerName"),
    )
    ref.finish()

    minimum = s.integer("minReplicaCount", DEFAULT_MIN_REPLICA_COUNT, minimum=0)
    maximum = s.integer("maxReplicaCount", DEFAULT_MAX_REPLICA_COUNT, minimum=1)
    if maximum < minimum:
        s.error("maxReplicaCount", f"must be >= minReplicaCount ({minimum}), got {maximum}")
    idle = s.optional_integer("idleReplicaCount", minimum=0)
    # keda apis/keda/v1alpha1 CheckReplicaCountBoundsAreValid compares with the HPA's minimum (at least 1) when
    # minReplicaCount is set, with 0 when it is not: `minReplicaCount: 0, idleReplicaCount: 0` is accepted.
    idle_bound = max(1, minimum) if s.has("minReplicaCount") else 0
    if idle is not None and idle >= idle_bound:
        s.error("idleReplicaCount", f"must be less than minReplicaCount ({idle_bound}), got {idle}")
    polling = s.integer("pollingInterval", DEFAULT_POLLING_INTERVAL, minimum=1)
    cooldown = s.integer("cooldownPeriod", DEFAULT_COOLDOWN_PERIOD, minimum=0)
    initial_cooldown = s.integer("initialCooldownPeriod", 0, minimum=0)
    fallback = _fallback(s)

    advanced = s.child("advanced")
    restore = advanced.boolean("restoreToOriginalReplicaCount", False)
    scaling_modifiers = advanced.has("scalingModifiers")
    advanced.read.add("scalingModifiers")  # its formula is left to the readers, which cannot run it
    hpa = advanced.child("horizontalPodAutoscalerConfig")
    hpa_name = hpa.optional_string("name")
    behavior_given = hpa.has("behavior")
    behavior_fields = hpa.child("behavior")
    scale_up_set, scale_down_set = behavior_fields.has("scaleUp"), behavior_fields.has("scaleDown")
    behavior = HpaBehavior(_direction(behavior_fields.child("scaleUp"), DEFAULT_UP),
                           _direction(behavior_fields.child("scaleDown"), DEFAULT_DOWN))
    behavior_fields.finish()
    hpa.finish()
    advanced.finish()

    triggers = tuple(_trigger(item, path, errors) for item, path in s.items("triggers", min_items=1))
    if not s.has("triggers"):
        s.missing("triggers")
    s.finish()
    f.finish()
    return ScaledObject(
        name=name, namespace=namespace,
        annotations=annotations if isinstance(annotations, Mapping) else {},
        scale_target_ref=target, triggers=triggers,
        polling_interval=polling, cooldown_period=cooldown, initial_cooldown_period=initial_cooldown,
        min_replica_count=minimum, max_replica_count=maximum, idle_replica_count=idle, fallback=fallback,
        restore_to_original_replica_count=restore, scaling_modifiers=scaling_modifiers, hpa_name=hpa_name,
        # keda controllers/keda/hpa.go copies the behavior as is, and nil when the ScaledObject has none.
        behavior=behavior if behavior_given else None,
        scale_up_set=scale_up_set, scale_down_set=scale_down_set,
    )


# --------------------------------------------------------------------------------------------------------------
# The TriggerAuthentication a trigger names (keda.sh/v1alpha1 TriggerAuthentication / ClusterTriggerAuthentication)


@dataclass(frozen=True)
class SecretTargetRef:
    """`secretTargetRef[]`: the trigger parameter `parameter` is the Secret `name`'s key `key`."""

    parameter: str
    name: str
    key: str


@dataclass(frozen=True)
class EnvTargetRef:
    """`env[]`: the trigger parameter `parameter` is the environment variable `name` of the target's container."""

    parameter: str
    name: str
    container_name: str | None = None


@dataclass(frozen=True)
class PodIdentity:
    provider: str
    identity_id: str | None = None


# The other places a TriggerAuthentication can take parameters from; queuescale reads Secrets only.
OTHER_AUTHENTICATION_SOURCES = ("azureKeyVault", "hashiCorpVault", "configMapTargetRef", "awsSecretManager",
                                "gcpSecretManager", "boundServiceAccountToken")


@dataclass(frozen=True)
class TriggerAuthentication:
    """What a (Cluster)TriggerAuthentication gives its triggers. Read leniently: an entry that names no usable
    parameter is skipped, since a reader falls back to a placeholder and says so."""

    kind: AuthenticationKind
    name: str
    namespace: str | None
    secret_target_refs: tuple[SecretTargetRef, ...] = ()
    env: tuple[EnvTargetRef, ...] = ()
    pod_identity: PodIdentity | None = None
    other_sources: tuple[str, ...] = ()  # of OTHER_AUTHENTICATION_SOURCES, those it uses


def _strings(item: object, *names: str) -> tuple[str, ...] | None:
    """The named fields of `item`, when each is a non-empty string."""
    if not isinstance(item, Mapping):
        return None
    values = [item.get(name) for name in names]
    if not all(isinstance(v, str) and v for v in values):
        return None
    return tuple(str(v) for v in values)


def read_trigger_authentication(doc: Mapping[str, object]) -> TriggerAuthentication | None:
    """The (Cluster)TriggerAuthentication of a YAML document; None for a document of another kind."""
    kind = doc.get("kind")
    if kind not in AUTHENTICATION_KINDS:
        return None
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    spec = doc.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    secret_refs = spec.get("secretTargetRef")
    env = spec.get("env")
    identity = spec.get("podIdentity")
    provider = identity.get("provider") if isinstance(identity, Mapping) else None
    identity_id = identity.get("identityId") if isinstance(identity, Mapping) else None
    name, namespace = meta.get("name"), meta.get("namespace")
    return TriggerAuthentication(
        kind="ClusterTriggerAuthentication" if kind == "ClusterTriggerAuthentication" else "TriggerAuthentication",
        name=name if isinstance(name, str) else "",
        namespace=namespace if isinstance(namespace, str) else None,
        secret_target_refs=tuple(
            SecretTargetRef(*found) for item in (secret_refs if isinstance(secret_refs, list) else [])
            if (found := _strings(item, "parameter", "name", "key")) is not None
        ),
        env=tuple(
            EnvTargetRef(parameter=found[0], name=found[1], container_name=_container(item))
            for item in (env if isinstance(env, list) else [])
            if (found := _strings(item, "parameter", "name")) is not None
        ),
        pod_identity=PodIdentity(provider, identity_id if isinstance(identity_id, str) and identity_id else None)
        if isinstance(provider, str) and provider != "none" else None,
        other_sources=tuple(k for k in OTHER_AUTHENTICATION_SOURCES if spec.get(k)),
    )


def _container(item: object) -> str | None:
    container = item.get("containerName") if isinstance(item, Mapping) else None
    return container if isinstance(container, str) else None
