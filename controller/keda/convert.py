"""`queuescale convert-keda`: a KEDA ScaledObject with queue triggers, as the equivalent QueueScaler.

azure-queue, rabbitmq, redis (a list), postgresql and aws-sqs-queue triggers map to the source of the same kind
(see `_other_trigger` for the last four); other trigger types and ScaledJobs are warned about and left out. One
object that cannot be converted is an error line; the other objects of the file are still converted.

What carries over (see docs/migrating-from-keda.md for the table): the target, min/max, pollingInterval, the
queues (queueName, queueLength -> targetPerReplica, activationQueueLength -> activationThreshold,
queueLengthStrategy -> countStrategy), the connection (connectionFromEnv / connection resolved through the
Deployment in the same file to its Secret, a TriggerAuthentication's secretTargetRef, or pod identity ->
workload identity with accountName and cloud / endpointSuffix), cooldownPeriod -> scaleToZeroDelay, the HPA
behavior -> step policies, stabilization windows and tolerance, and fallback. The ScaledObject is read by
controller/keda/model.py (as the simulator's KEDA baseline reads it); this module only maps it. The YAML's header
names the `kubectl annotate` command each Secret the rule reads needs before the operator uses it for the rule.

What cannot is said in a warning, one line each, naming the field: other trigger types, idleReplicaCount,
initialCooldownPeriod, scalingModifiers, metricType Value, restoreToOriginalReplicaCount, HPA defaults that differ
from ours, and any connection the file does not let us trace to a Secret (then a placeholder reference is written
and the warning says so). The output always passes `queuescale validate`.

Several queue triggers become several sources with `aggregation: max`, each weighted by
targetPerReplica / its queueLength, which is exactly the HPA's "largest recommendation wins".
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import unquote, urlsplit

import yaml

from controller.keda.model import (
    DEFAULT_DOWN,
    DEFAULT_UP,
    HPA_SYNC,
    HPA_TOLERANCE,
    AuthenticationRef,
    Fallback,
    HpaBehavior,
    HpaDirection,
    ScaledObject,
    Trigger,
    TriggerAuthentication,
    read_scaled_object,
    read_trigger_authentication,
)
from controller.model.fields import FieldError, Fields, SpecError, format_duration
from controller.model.loading import read_input
from controller.model.rule import API_GROUP, API_VERSION, DEFAULT_SCALE_DOWN_DELAY, KIND, parse_queuescaler

KEDA_DEFAULT_CONNECTION_ENV = "AzureWebJobsStorage"  # what KEDA reads when a trigger names no connection
KEDA_CLOUDS = {
    "azurepubliccloud": "public",
    "azureusgovernmentcloud": "usgov",
    "azurechinacloud": "china",
}
_BEHAVIOR = "spec.advanced.horizontalPodAutoscalerConfig.behavior"
# The operator's annotation, as controller/kube/secrets.py ALLOWED_RULES_ANNOTATION names it: keda/ keeps off
# kube/ so the converter stays a file-to-file tool with no path to the cluster's client.
ALLOWED_RULES_ANNOTATION = f"{API_GROUP}/allowed-rules"
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


class ConvertError(Exception):
    """Input that cannot be converted: every line names the file, the object and the field."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


@dataclass
class Conversion:
    """The QueueScalers (as YAML documents), a warning per thing that did not carry over, an error per object that
    could not be converted (the others still are)."""

    documents: list[dict[str, Any]] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # "namespace/name" of each ScaledObject, in order
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # per QueueScaler, the `kubectl annotate` commands with which the owners of its Secrets let it read them
    allow_commands: list[list[str]] = field(default_factory=list)

    def to_yaml(self) -> str:
        parts = []
        for origin, doc, commands in zip(self.sources, self.documents, self.allow_commands, strict=True):
            header = f"# converted from KEDA ScaledObject {origin} by queuescale convert-keda\n"
            if commands:
                header += ("# The operator reads a Secret for this rule only once the Secret names it (unless it "
                           "runs with\n# --secret-access namespace); the Secret's owner allows it with:\n"
                           + "".join(f"#   {command}\n" for command in commands))
            parts.append(header + yaml.safe_dump(doc, sort_keys=False))
        return "---\n".join(parts)

    def render(self, output: str) -> str:
        """`yaml` (with a comment naming each source), `json` (one object, or a v1 List of several, as `kubectl
        get -o json` prints) or `name` (`queuescaler.queuescale.io/NAME` a line)."""
        if output == "json":
            if len(self.documents) == 1:
                return json.dumps(self.documents[0], indent=2) + "\n"
            return json.dumps({"apiVersion": "v1", "kind": "List", "items": self.documents}, indent=2) + "\n"
        if output == "name":
            return "".join(f"{KIND.lower()}.{API_GROUP}/{d['metadata']['name']}\n" for d in self.documents)
        return self.to_yaml()


# --------------------------------------------------------------------------------------------------------------
# Reading the file


def load_documents(path: str, errors: list[str] | None = None) -> list[Mapping[str, Any]]:
    """The file's objects; a document that is not an object is an error line (in `errors` when given)."""
    try:
        text = read_input(path)  # `-`: standard input
    except OSError as exc:
        raise ConvertError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise ConvertError([f"{path}: cannot read: not UTF-8 text"]) from None
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConvertError([f"{path}: invalid YAML{where}"]) from None  # no excerpt: it could quote a secret
    found = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            if errors is None:
                raise ConvertError([f"{path}: document {index + 1} is not an object"])
            errors.append(f"{path}: document {index + 1} is not an object")
            continue
        found.append(doc)
    return found


def convert_file(path: str) -> Conversion:
    """Every ScaledObject in the file; TriggerAuthentications and Deployments in it are used to resolve secrets.

    A ScaledObject that cannot be converted is an error in `errors`; the others are still converted. Raises
    ConvertError only when the file gives nothing to convert (unreadable, not YAML, no ScaledObject).
    """
    conversion = Conversion()
    documents = load_documents(path, conversion.errors)
    for doc in documents:
        if doc.get("kind") == "ScaledJob":
            conversion.warnings.append(
                f"{path}: {_name(doc)}: ScaledJob is not supported: KEDA starts a Kubernetes Job for each batch of "
                "messages, while queuescale sets the replicas of a long-running workload through its scale "
                "subresource; left out (run the jobs' work as a Deployment of workers to scale it)")
    scaled_objects = [d for d in documents if d.get("kind") == "ScaledObject"]
    if not scaled_objects:
        raise ConvertError([*conversion.errors, *(f"warning: {w}" for w in conversion.warnings),
                            f"{path}: no ScaledObject in this file"])
    authentications = [a for d in documents if (a := read_trigger_authentication(d)) is not None]
    for doc in scaled_objects:
        try:
            converter = _Converter(doc, documents, authentications)
            queuescaler = converter.convert()
        except SpecError as exc:
            conversion.errors.extend(f"{path}: {_name(doc)}: {error}" for error in exc.errors)
            continue
        conversion.documents.append(queuescaler)
        conversion.sources.append(converter.origin)
        conversion.allow_commands.append(converter.allow_commands)
        conversion.warnings.extend(f"{path}: {_name(doc)}: {w}" for w in converter.warnings)
    return conversion


def _name(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return str(name) if isinstance(name, str) and name else "<unnamed>"


def _dns_name(text: str) -> str:
    name = _NOT_DNS.sub("-", text.lower()).strip("-")[:253]
    return name or "queue-connection"


# --------------------------------------------------------------------------------------------------------------
# One ScaledObject


@dataclass(frozen=True)
class _Trigger:
    path: str
    head: dict[str, Any]  # type and queue, ready for YAML (a weight, if any, follows them)
    queue_length: float  # the trigger's target per replica
    activation: float
    rest: dict[str, Any]  # the source's connection, auth and count fields, ready for YAML


TRIGGER_KINDS = ("azure-queue", "rabbitmq", "redis", "postgresql", "aws-sqs-queue")


class _Converter:
    def __init__(self, doc: Mapping[str, Any], documents: Sequence[Mapping[str, Any]],
                 authentications: Sequence[TriggerAuthentication]) -> None:
        self.doc = doc
        self.documents = documents
        self.authentications = authentications
        self.errors: list[FieldError] = []
        self.warnings: list[str] = []
        self.namespace: str | None = None
        self.origin = _name(doc)
        self.target_name = ""
        self.target_kind = "Deployment"
        self.env_container: str | None = None
        self.allow_commands: list[str] = []

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(f"{path}: {message}")

    def convert(self) -> dict[str, Any]:
        scaled = read_scaled_object(self.doc, self.errors)
        self.namespace = scaled.namespace
        self.origin = f"{scaled.namespace}/{scaled.name}" if scaled.namespace else scaled.name
        spec = self._spec(scaled)
        if self.errors:
            raise SpecError(self.errors)
        metadata: dict[str, Any] = {"name": scaled.name}
        if scaled.namespace:
            metadata["namespace"] = scaled.namespace
        doc = {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "metadata": metadata, "spec": spec}
        try:
            parse_queuescaler(doc)
        except SpecError as exc:  # a bug here, or a value KEDA accepts and we do not: say which field
            raise SpecError([FieldError(f"(converted) {e.path}", e.message) for e in exc.errors]) from None
        self.allow_commands = [allow_command(scaled.namespace, secret, scaled.name) for secret in _secrets(spec)]
        return doc

    # ----------------------------------------------------------------------------------------------------------

    def _spec(self, scaled: ScaledObject) -> dict[str, Any]:
        ref = scaled.scale_target_ref
        self.target_name = ref.name
        self.env_container = ref.env_source_container_name
        target: dict[str, Any] = {"name": ref.name}
        if ref.kind and ref.kind != "Deployment":
            target["kind"] = ref.kind
            self.target_kind = ref.kind
        if ref.api_version and ref.api_version != "apps/v1":
            target["apiVersion"] = ref.api_version

        minimum, maximum = scaled.min_replica_count, scaled.max_replica_count
        polling = scaled.polling_interval
        if scaled.idle_replica_count is not None:
            self.warn("spec.idleReplicaCount", f"{scaled.idle_replica_count} cannot be carried over: queuescale "
                      f"has no idle count (an inactive rule goes to minReplicas, {minimum}, after scaleToZeroDelay)")
        if scaled.initial_cooldown_period:
            self.warn("spec.initialCooldownPeriod", f"{scaled.initial_cooldown_period}s cannot be carried over: "
                      "queuescale may scale to zero as soon as scaleToZeroDelay has passed, also right after it "
                      "starts")

        triggers = self._triggers(scaled)
        if scaled.restore_to_original_replica_count:
            self.warn("spec.advanced.restoreToOriginalReplicaCount", "true cannot be carried over: deleting a "
                      "QueueScaler leaves the replica count where it is")
        if scaled.scaling_modifiers:
            self.warn("spec.advanced.scalingModifiers", "cannot be carried over: queuescale combines its queues "
                      "by aggregation (sum or max) and weights, not formulas")
        behavior = scaled.behavior or HpaBehavior()
        fallback = self._fallback(scaled.fallback, maximum)

        policy: dict[str, Any] = {}
        sources: list[dict[str, Any]] = []
        aggregation = None
        if triggers:
            target_per_replica = triggers[0].queue_length
            policy["targetPerReplica"] = _number(target_per_replica)
            weights = [target_per_replica / t.queue_length for t in triggers]
            activation = min(t.activation * w for t, w in zip(triggers, weights, strict=True))
            if activation:
                policy["activationThreshold"] = _number(activation)
            if len({t.activation * w for t, w in zip(triggers, weights, strict=True)}) > 1:
                self.warn("spec.triggers", "the triggers' activationQueueLength differ: queuescale has one "
                          f"activationThreshold for the rule; used the lowest, {_number(activation)} (weighted)")
            if len(triggers) > 1:
                aggregation = "max"
            for trigger, weight in zip(triggers, weights, strict=True):
                source: dict[str, Any] = dict(trigger.head)
                if not math.isclose(weight, 1.0):
                    source["weight"] = _number(round(weight, 6))
                source.update(trigger.rest)
                sources.append(source)
        if minimum == 0:  # KEDA's cooldownPeriod only ever applies to the step to zero, as ours
            policy["scaleToZeroDelay"] = format_duration(scaled.cooldown_period)
        self._behavior(policy, "scaleUp", behavior.scale_up, scaled.scale_up_set, DEFAULT_UP)
        self._behavior(policy, "scaleDown", behavior.scale_down, scaled.scale_down_set, DEFAULT_DOWN)
        self._tolerance(policy, behavior)
        if polling > HPA_SYNC and not all(t.use_cached_metrics for t in scaled.triggers):
            self.warn("spec.pollingInterval", f"{polling}s: with KEDA the HPA also reads the queue every "
                      f"{HPA_SYNC}s once the workload runs; queuescale reads it only every pollingInterval "
                      f"(kept {polling}s; set {HPA_SYNC}s to react as often)")

        spec: dict[str, Any] = {"scaleTargetRef": target}
        if minimum:
            spec["minReplicas"] = minimum
        spec["maxReplicas"] = maximum
        spec["pollingInterval"] = format_duration(polling)
        if aggregation:
            spec["aggregation"] = aggregation
        spec["sources"] = sources
        spec["policy"] = policy
        if fallback:
            spec["fallback"] = fallback
        return spec

    def _triggers(self, scaled: ScaledObject) -> list[_Trigger]:
        triggers = []
        for trigger in scaled.triggers:
            if trigger.type not in TRIGGER_KINDS:
                if trigger.type:
                    why = _UNSUPPORTED.get(trigger.type, "queuescale scales on queue lengths (azure-queue, "
                                           "rabbitmq, redis, postgresql, aws-sqs-queue)")
                    self.warn(f"{trigger.path}.type", f'"{trigger.type}" cannot be carried over: {why}; this '
                              "trigger is left out")
                continue
            converted = self._azure_queue(trigger) if trigger.type == "azure-queue" else self._other_trigger(trigger)
            if converted is not None:
                triggers.append(converted)
        if scaled.triggers and not triggers and not self.errors:
            self.errors.append(FieldError("spec.triggers", "has no trigger queuescale can carry over "
                                          f"({', '.join(TRIGGER_KINDS)}): nothing to convert"))
        return triggers

    def _metric_type(self, trigger: Trigger, what: str) -> None:
        if trigger.metric_type == "Value":
            self.warn(f"{trigger.path}.metricType", f"Value (replicas x count / {what}) cannot be carried over: "
                      "queuescale divides the count by targetPerReplica, as AverageValue does")
        elif trigger.metric_type == "Utilization":
            self.errors.append(FieldError(f"{trigger.path}.metricType",
                                          f"Utilization is not valid for a{'n' if trigger.type[0] == 'a' else ''} "
                                          f"{trigger.type} trigger"))

    def _azure_queue(self, trigger: Trigger) -> _Trigger | None:
        path = trigger.path
        self._metric_type(trigger, "queueLength")
        m = Fields(trigger.metadata, f"{path}.metadata", self.errors)
        queue_name = m.string("queueName", required=True)
        queue_length = _metadata_number(m, "queueLength", 5.0)
        if queue_length <= 0:
            m.error("queueLength", f"must be > 0, got {_number(queue_length)}")
            queue_length = 5.0
        activation = _metadata_number(m, "activationQueueLength", 0.0)
        strategy = str(m.raw.get("queueLengthStrategy", "all")).lower()
        m.read.add("queueLengthStrategy")
        if strategy not in ("all", "visibleonly"):
            m.error("queueLengthStrategy", f'must be "all" or "visibleonly", got "{m.raw.get("queueLengthStrategy")}"')
        connection = self._connection(trigger, m)
        m.finish()
        if strategy == "visibleonly":
            connection["countStrategy"] = "visible"
        return _Trigger(path, {"type": "azure-queue", "queueName": queue_name}, queue_length, activation,
                        connection)

    # ----------------------------------------------------------------------------------------------------------
    # The other queue kinds: rabbitmq, redis (a list), postgresql (a query), aws-sqs-queue. Their metadata names
    # and defaults are KEDA's (kedacore/keda pkg/scalers/{rabbitmq,redis,postgresql,aws_sqs_queue}_scaler.go).

    def _other_trigger(self, trigger: Trigger) -> _Trigger | None:
        path = trigger.path
        self._metric_type(trigger, "target")
        # Not finished: KEDA's other metadata (TLS files, timeouts...) is warned about where it matters.
        m = Fields(trigger.metadata, f"{path}.metadata", self.errors)
        auth = self._auth_params(trigger)
        convert = {"rabbitmq": self._rabbitmq, "redis": self._redis, "postgresql": self._postgresql,
                   "aws-sqs-queue": self._aws_sqs}[trigger.type]
        return convert(m, f"{path}.metadata", path, auth)

    def _auth_params(self, trigger: Trigger) -> dict[str, dict[str, str]]:
        """What a (Cluster)TriggerAuthentication in the file gives each parameter: a Secret key."""
        ref = trigger.authentication_ref
        if ref is None:
            return {}
        where = f"{trigger.path}.authenticationRef.name"
        auth = self._authentication(ref)
        if auth is None:
            self.warn(where, f"{ref.kind} '{ref.name}' is not in this file: its parameters are written as "
                      "placeholders (add the TriggerAuthentication to the file to trace them)")
            return {}
        params: dict[str, dict[str, str]] = {}
        for secret_ref in auth.secret_target_refs:
            params[secret_ref.parameter] = {"name": secret_ref.name, "key": secret_ref.key}
        for env in auth.env:
            params[env.parameter] = self._env_secret(env.name, f"{where} ({ref.kind} '{ref.name}' env)")
        if auth.pod_identity is not None:
            self.warn(where, f"{ref.kind} '{ref.name}' podIdentity (provider {auth.pod_identity.provider}) cannot "
                      "be carried over for this trigger: queuescale reads its credentials from Secrets; placeholders "
                      "written")
        if ref.kind == "ClusterTriggerAuthentication" and params:
            self.warn(f"{trigger.path}.authenticationRef.kind", "a ClusterTriggerAuthentication reads Secrets in "
                      "KEDA's namespace, a QueueScaler in its own: copy the Secrets into namespace "
                      f"'{self.namespace or 'default'}'")
        return params

    def _authentication(self, ref: AuthenticationRef) -> TriggerAuthentication | None:
        """The (Cluster)TriggerAuthentication `ref` names, if the file has it (a namespaced one in our namespace)."""
        return next((a for a in self.authentications if a.kind == ref.kind and a.name == ref.name
                     and (a.kind == "ClusterTriggerAuthentication" or a.namespace in (None, self.namespace))), None)

    def _secret(self, m: Fields, auth: Mapping[str, dict[str, str]], param: str, path: str,
                env_name: str | None = None) -> dict[str, str] | None:
        """A secret parameter: from the TriggerAuthentication, or `<param>FromEnv` traced to its Secret."""
        if param in auth:
            return dict(auth[param])
        from_env = m.raw.get(env_name or f"{param}FromEnv")
        if isinstance(from_env, str) and from_env:
            return self._env_secret(from_env, f"{path}.{env_name or param + 'FromEnv'}")
        return None

    def _placeholder(self, what: str, path: str, value: str, why: str) -> str:
        self.warn(path, f"{why}: wrote the placeholder {what} {value!r}; set it to yours")
        return value

    def _value(self, m: Fields, auth: Mapping[str, dict[str, str]], param: str, path: str) -> str | None:
        """A plain parameter (a host, a user): queuescale wants it in the rule, KEDA may read it from a Secret."""
        value = m.raw.get(param)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
        if param in auth:
            ref = auth[param]
            self.warn(f"{path}.{param}", f"comes from Secret '{ref['name']}' key '{ref['key']}', which convert-keda "
                      "does not read; queuescale takes it in the rule (it is not a secret)")
            return None
        if isinstance(m.raw.get(f"{param}FromEnv"), str):
            self.warn(f"{path}.{param}FromEnv", f"the environment variable {m.raw[f'{param}FromEnv']} is not "
                      "read by convert-keda; queuescale takes the value in the rule")
        return None

    def _target(self, m: Fields, name: str, default: float | None) -> float:
        if default is None and m.raw.get(name) in (None, "", 0, "0"):
            m.error(name, "is required and must be > 0 (KEDA requires it too)")
            return 1.0
        value = _metadata_number(m, name, default or 0.0)
        if value <= 0:
            m.error(name, f"must be > 0, got {_number(value)}")
            return default or 1.0
        return value

    def _rabbitmq(self, m: Fields, path: str, trigger_path: str,
                  auth: Mapping[str, dict[str, str]]) -> _Trigger | None:
        queue = m.string("queueName", required=True)
        mode = str(m.raw.get("mode") or "")
        if mode and mode != "QueueLength":
            self.warn(f"{path}.mode", f"{mode} scales on a rate or ratio, not on a count: queuescale counts "
                      "messages; this trigger is left out")
            return None
        if _truthy(m.raw.get("useRegex")):
            self.warn(f"{path}.useRegex", "true (every queue matching a pattern) cannot be carried over: a "
                      "rabbitmq source counts one queue; this trigger is left out")
            return None
        legacy = _metadata_number(m, "queueLength", 0.0)
        value = _metadata_number(m, "value", 0.0)
        target = value or legacy or 20.0  # KEDA's default queue length for rabbitmq (defaultRabbitMQQueueLength)
        activation = _metadata_number(m, "activationValue", 0.0)
        protocol = str(m.raw.get("protocol") or "auto").lower()
        rest: dict[str, Any] = {}
        host = m.raw.get("host")
        username = None
        vhost: str | None = None
        if isinstance(host, str) and host:
            url = urlsplit(host)
            scheme = url.scheme.lower()
            if protocol == "auto":
                protocol = "http" if scheme in ("http", "https") else "amqp"
            segments = url.path.split("/")
            if len(segments) > 1 and segments[-1]:
                vhost = unquote(segments[-1])
            port = f":{url.port}" if url.port else ""
            if scheme in ("http", "https"):
                prefix = "/".join(segments[:-1]).rstrip("/")
                management = f"{scheme}://{url.hostname}{port}{prefix}"
            else:
                management = f"{'https' if scheme == 'amqps' else 'http'}://{url.hostname}:15672"
                self.warn(f"{path}.host", f"KEDA read the queue over AMQP; queuescale reads the management API: "
                          f"assumed {management} (the management plugin's default port); check it")
            username = url.username
            if url.password:
                self.warn(f"{path}.host", "holds a password, which does not belong in a rule: put it in a Secret "
                          "and point passwordSecretRef at it (a placeholder is written)")
        else:
            management = self._placeholder(
                "managementURL", f"{path}.host", "http://rabbitmq:15672",
                "the connection URL comes from a Secret or the environment (hostFromEnv), which convert-keda does "
                "not read; queuescale wants the management API's URL without credentials (and the user in username)")
            if protocol == "auto":
                protocol = "http"
        rest["managementURL"] = management
        vhost_name = m.raw.get("vhostName")
        if isinstance(vhost_name, str) and vhost_name:
            vhost = vhost_name
        if vhost and vhost != "/":
            rest["vhost"] = vhost
        if username is None and ("username" in auth or "usernameFromEnv" in m.raw):
            username = self._placeholder("username", f"{path}.username", "queuescale",
                                         "the user name comes from a Secret, which convert-keda does not read")
        if username:
            rest["username"] = username
        password = self._secret(m, auth, "password", path)
        if password is None and isinstance(host, str) and urlsplit(host).password:
            password = {"name": _dns_name(f"{self.target_name}-rabbitmq"), "key": "password"}
        if password is not None:
            rest["passwordSecretRef"] = password
        # Over HTTP KEDA counts `messages` (ready + unacknowledged) unless excludeUnacknowledged; over AMQP the
        # queue declaration's message count, which is the ready messages only.
        if protocol == "http" and not _truthy(m.raw.get("excludeUnacknowledged")):
            rest["count"] = "readyAndUnacked"
        for param in ("ca", "cert", "key", "tls"):
            if param in auth:
                self.warn(f"{trigger_path}.authenticationRef", f"the TLS parameter {param} cannot be carried over: "
                          "the rabbitmq source verifies the server against the system CAs and has no client "
                          "certificate")
        return _Trigger(trigger_path, {"type": "rabbitmq", "queue": queue}, target, activation, rest)

    def _redis(self, m: Fields, path: str, trigger_path: str,
               auth: Mapping[str, dict[str, str]]) -> _Trigger | None:
        list_name = m.string("listName", required=True)
        target = self._target(m, "listLength", 5.0)  # KEDA's default listLength
        activation = _metadata_number(m, "activationListLength", 0.0)
        rest: dict[str, Any] = {}
        address = self._value(m, auth, "address", path)
        host = self._value(m, auth, "host", path)
        port = self._value(m, auth, "port", path)
        if address and not host:
            host, _, address_port = address.rpartition(":") if ":" in address else (address, "", "")
            port = port or address_port or None
        rest["host"] = host or self._placeholder("host", f"{path}.host", "redis",
                                                 "no Redis address that convert-keda can read")
        if port and port != "6379":
            try:
                rest["port"] = int(port)
            except ValueError:
                m.error("port", f"must be a port number, got {port!r}")
        database = _metadata_number(m, "databaseIndex", 0.0)
        if database:
            rest["db"] = int(database)
        if _truthy(m.raw.get("enableTLS")) or auth.get("tls") is not None:
            rest["tls"] = True
            if auth.get("tls") is not None:
                self.warn(f"{trigger_path}.authenticationRef", "tls comes from a Secret: assumed enable; set tls: "
                          "false if it is disable")
        username = m.raw.get("username")
        if isinstance(username, str) and username:
            rest["username"] = username
        elif "username" in auth or "usernameFromEnv" in m.raw:
            rest["username"] = self._placeholder("username", f"{path}.username", "queuescale",
                                                 "the ACL user comes from a Secret, which convert-keda does not read")
        password = self._secret(m, auth, "password", path)
        if password is None and isinstance(m.raw.get("password"), str) and m.raw["password"]:
            self.warn(f"{path}.password", "is written in the ScaledObject: put it in a Secret and point "
                      "passwordSecretRef at it (a placeholder is written)")
            password = {"name": _dns_name(f"{self.target_name}-redis"), "key": "password"}
        if password is not None:
            rest["passwordSecretRef"] = password
        if _truthy(m.raw.get("unsafeSsl")):
            self.warn(f"{path}.unsafeSsl", "true cannot be carried over: the redis-list source always verifies "
                      "the server's certificate")
        return _Trigger(trigger_path, {"type": "redis-list", "listName": list_name}, target, activation, rest)

    def _postgresql(self, m: Fields, path: str, trigger_path: str,
                    auth: Mapping[str, dict[str, str]]) -> _Trigger | None:
        query = m.string("query", required=True)
        target = self._target(m, "targetQueryValue", None)  # KEDA has no default: it is required
        activation = _metadata_number(m, "activationTargetQueryValue", 0.0)
        rest: dict[str, Any] = {}
        dsn = self._secret(m, auth, "connection", path, "connectionFromEnv")
        if dsn is not None:
            rest["dsnSecretRef"] = dsn
        else:
            rest["host"] = self._value(m, auth, "host", path) or self._placeholder(
                "host", f"{path}.host", "postgres", "no host that convert-keda can read")
            port = self._value(m, auth, "port", path)
            if port and port != "5432":
                try:
                    rest["port"] = int(port)
                except ValueError:
                    m.error("port", f"must be a port number, got {port!r}")
            rest["database"] = self._value(m, auth, "dbName", path) or self._placeholder(
                "database", f"{path}.dbName", "postgres", "no dbName that convert-keda can read")
            rest["user"] = self._value(m, auth, "userName", path) or self._placeholder(
                "user", f"{path}.userName", "queuescale", "no userName that convert-keda can read")
            password = self._secret(m, auth, "password", path)
            if password is not None:
                rest["passwordSecretRef"] = password
            ssl_mode = self._value(m, auth, "sslmode", path)
            if ssl_mode and ssl_mode != "prefer":
                rest["sslMode"] = ssl_mode
        rest["query"] = query
        return _Trigger(trigger_path, {"type": "sql-table"}, target, activation, rest)

    def _aws_sqs(self, m: Fields, path: str, trigger_path: str,
                 auth: Mapping[str, dict[str, str]]) -> _Trigger | None:
        target = self._target(m, "queueLength", 5.0)  # KEDA's default queueLength
        activation = _metadata_number(m, "activationQueueLength", 0.0)
        region = self._value(m, auth, "awsRegion", path)
        queue_url = m.raw.get("queueURL")
        if not isinstance(queue_url, str) or not queue_url:
            queue_url = self._placeholder("queueURL", f"{path}.queueURL",
                                          f"https://sqs.{region or 'us-east-1'}.amazonaws.com/000000000000/queue",
                                          "the queue URL comes from the environment (queueURLFromEnv), which "
                                          "convert-keda does not read")
        elif not urlsplit(queue_url).scheme:
            # KEDA takes a value that is not a URL as the queue's name; queuescale needs the URL (account id).
            queue_url = self._placeholder(
                "queueURL", f"{path}.queueURL",
                f"https://sqs.{region or 'us-east-1'}.amazonaws.com/000000000000/{queue_url}",
                "is a queue name; queuescale needs the queue URL with the account id")
        rest: dict[str, Any] = {}
        if region and not re.match(rf"https?://sqs\.{re.escape(region)}\.amazonaws\.com/", queue_url):
            rest["awsRegion"] = region
        endpoint = m.raw.get("awsEndpoint")
        if isinstance(endpoint, str) and endpoint:
            self.warn(f"{path}.awsEndpoint", f"{endpoint}: queuescale calls the host of queueURL; write the "
                      "queue URL on that endpoint")
        # KEDA's default counts in-flight messages too (scaleOnInFlight: true); ours does not.
        if str(m.raw.get("scaleOnInFlight", "true")).lower() != "false":
            rest["includeInFlight"] = True
        if _truthy(m.raw.get("scaleOnDelayed")):
            self.warn(f"{path}.scaleOnDelayed", "true cannot be carried over: the aws-sqs source does not count "
                      "delayed messages")
        if "awsRoleArn" in auth or m.raw.get("identityOwner") == "operator" or m.raw.get("awsRoleArn"):
            self.warn(path, "an IAM role (awsRoleArn, identityOwner or pod identity) cannot be carried over: the "
                      "aws-sqs source signs with an access key from Secrets (placeholders written)")
        placeholder = _dns_name(f"{self.target_name}-aws")
        key_id = self._secret(m, auth, "awsAccessKeyID", path) or self._secret(m, auth, "awsAccessKeyId", path)
        secret = self._secret(m, auth, "awsSecretAccessKey", path)
        if key_id is None or secret is None:
            self.warn(path, f"no access key that convert-keda can trace to a Secret: wrote the placeholder Secret "
                      f"'{placeholder}' (keys access-key-id, secret-access-key)")
        rest["accessKeyIdSecretRef"] = key_id or {"name": placeholder, "key": "access-key-id"}
        rest["secretAccessKeySecretRef"] = secret or {"name": placeholder, "key": "secret-access-key"}
        token = self._secret(m, auth, "awsSessionToken", path)
        if token is not None:
            rest["sessionTokenSecretRef"] = token
        return _Trigger(trigger_path, {"type": "aws-sqs", "queueURL": queue_url}, target, activation, rest)

    # ----------------------------------------------------------------------------------------------------------
    # Connections

    def _connection(self, trigger: Trigger, m: Fields) -> dict[str, Any]:
        """The source's auth fields: a connection Secret, or workload identity with the account and endpoint."""
        path = trigger.path
        meta_path = f"{path}.metadata"
        from_env = m.optional_string("connectionFromEnv")
        legacy = m.optional_string("connection")
        account = m.optional_string("accountName")
        cloud = m.optional_string("cloud")
        suffix = m.optional_string("endpointSuffix")
        m.read.update({"metricName", "queueURL", "queueURLFromEnv"})
        ref = trigger.authentication_ref
        if ref is not None:
            auth = self._auth(ref, f"{path}.authenticationRef")
            if auth is not None and auth.get("identity"):
                return auth | self._identity_fields(account, cloud, suffix, meta_path)
            if auth is not None:
                return auth
        if from_env:
            return {"connectionSecretRef": self._env_secret(from_env, f"{meta_path}.connectionFromEnv")}
        if legacy:
            # KEDA 1.x: `connection` named the environment variable, as connectionFromEnv does now.
            return {"connectionSecretRef": self._env_secret(legacy, f"{meta_path}.connection")}
        if ref is not None:  # an authenticationRef we could not follow: placeholder written by _auth
            return {"connectionSecretRef": {"name": _dns_name(ref.name), "key": "connection"}}
        self.warn(meta_path, f"names no connection, so KEDA reads the environment variable "
                  f"{KEDA_DEFAULT_CONNECTION_ENV}; traced it as connectionFromEnv")
        return {"connectionSecretRef": self._env_secret(KEDA_DEFAULT_CONNECTION_ENV, meta_path)}

    def _identity_fields(self, account: str | None, cloud: str | None, suffix: str | None,
                         path: str) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if not account:
            self.errors.append(FieldError(f"{path}.accountName", "is required with pod identity (KEDA requires "
                                          "it too)"))
            return {"accountName": "placeholder"}
        fields["accountName"] = account
        key = (cloud or "AzurePublicCloud").lower()
        if key == "private":
            if not suffix:
                self.errors.append(FieldError(f"{path}.endpointSuffix", 'is required when cloud is "Private"'))
            else:
                fields["endpoint"] = f"https://{account}.{suffix.strip('.')}"
        elif key in KEDA_CLOUDS:
            if KEDA_CLOUDS[key] != "public":
                fields["cloud"] = KEDA_CLOUDS[key]
        elif key == "azuregermancloud":
            self.warn(f"{path}.cloud", "AzureGermanCloud was retired and has no queuescale cloud; wrote its "
                      "endpoint (core.cloudapi.de)")
            fields["endpoint"] = f"https://{account}.queue.core.cloudapi.de"
        else:
            self.errors.append(FieldError(f"{path}.cloud", "must be AzurePublicCloud, AzureUSGovernmentCloud, "
                                          f'AzureChinaCloud, AzureGermanCloud or Private, got "{cloud}"'))
        return fields

    def _auth(self, ref: AuthenticationRef, path: str) -> dict[str, Any] | None:
        """The connection a (Cluster)TriggerAuthentication in the file gives; None (and a warning) otherwise."""
        name, kind = ref.name, ref.kind
        auth = self._authentication(ref)
        if auth is None:
            self.warn(f"{path}.name", f"{kind} '{name}' is not in this file: wrote a placeholder "
                      f"connectionSecretRef {{name: {_dns_name(name)}, key: connection}}; point it at the Secret "
                      "holding the connection string (or add the TriggerAuthentication to the file)")
            return None
        for secret_ref in auth.secret_target_refs:
            if secret_ref.parameter == "connection":
                if kind == "ClusterTriggerAuthentication":
                    self.warn(f"{path}.kind", f"a {kind} reads Secrets in KEDA's namespace, a QueueScaler in its "
                              f"own: copy the Secret into namespace '{self.namespace or 'default'}'")
                return {"connectionSecretRef": {"name": secret_ref.name, "key": secret_ref.key}}
        for env in auth.env:
            if env.parameter == "connection":
                if env.container_name is not None:
                    self.env_container = env.container_name
                return {"connectionSecretRef": self._env_secret(env.name, f"{path} ({kind} '{name}' env)")}
        identity = auth.pod_identity
        if identity is not None and identity.provider in ("azure-workload", "azure"):
            if identity.provider == "azure":
                self.warn(f"{path}.name", f"{kind} '{name}' uses AAD Pod Identity (provider azure, removed in "
                          "KEDA 2.15); converted to Microsoft Entra workload identity")
            if identity.identity_id:
                self.warn(f"{path}.name", f"{kind} '{name}' podIdentity.identityId cannot be carried over: "
                          "queuescale authenticates as the operator's own workload identity; grant it Storage "
                          "Queue Data Reader on the account")
            return {"identity": "workload"}
        what = f"uses {', '.join(auth.other_sources)}, which queuescale cannot read" if auth.other_sources else \
            "gives no connection (no secretTargetRef with parameter connection, no env, no podIdentity)"
        self.warn(f"{path}.name", f"{kind} '{name}' {what}: wrote a placeholder connectionSecretRef "
                  f"{{name: {_dns_name(name)}, key: connection}}; put the connection string in that Secret")
        return None

    def _env_secret(self, variable: str, path: str) -> dict[str, str]:
        """The Secret key an environment variable of the target's container comes from (KEDA reads the env)."""
        workload = next(
            (d for d in self.documents if d.get("kind") == self.target_kind and _name(d) == self.target_name
             and _namespace(d) in (None, self.namespace)),
            None,
        )
        placeholder = {"name": _dns_name(f"{self.target_name}-queue"), "key": variable}
        where = f"{self.target_kind} '{self.target_name}'"
        if workload is None:
            self.warn(path, f"the connection string is the environment variable {variable} of {where}, which is "
                      f"not in this file: wrote a placeholder connectionSecretRef {{name: {placeholder['name']}, "
                      f"key: {variable}}}; point it at the Secret that variable comes from")
            return placeholder
        containers = _containers(workload)
        if self.env_container:
            containers = [c for c in containers if c.get("name") == self.env_container]
        container = containers[0] if containers else {}
        for env in container.get("env") or []:
            if not isinstance(env, Mapping) or env.get("name") != variable:
                continue
            ref = (env.get("valueFrom") or {}).get("secretKeyRef") if isinstance(env.get("valueFrom"), Mapping) \
                else None
            if isinstance(ref, Mapping) and isinstance(ref.get("name"), str) and isinstance(ref.get("key"), str):
                return {"name": ref["name"], "key": ref["key"]}
            self.warn(path, f"{variable} of {where} is not taken from a Secret (a literal or a ConfigMap): "
                      f"wrote a placeholder connectionSecretRef {{name: {placeholder['name']}, key: {variable}}}; "
                      "put the connection string in that Secret")
            return placeholder
        for source in container.get("envFrom") or []:
            ref = source.get("secretRef") if isinstance(source, Mapping) else None
            prefix = str(source.get("prefix") or "") if isinstance(source, Mapping) else ""
            if isinstance(ref, Mapping) and isinstance(ref.get("name"), str) and variable.startswith(prefix):
                return {"name": ref["name"], "key": variable[len(prefix):]}
        self.warn(path, f"{where} has no environment variable {variable} from a Secret: wrote a placeholder "
                  f"connectionSecretRef {{name: {placeholder['name']}, key: {variable}}}")
        return placeholder

    # ----------------------------------------------------------------------------------------------------------
    # Behavior and fallback

    def _behavior(self, policy: dict[str, Any], name: str, direction: HpaDirection, given: bool,
                  hpa_default: HpaDirection) -> None:
        path = f"{_BEHAVIOR}.{name}"
        if not given:
            if name == "scaleUp":
                self.warn(path, "not set, so KEDA's HPA allows at most +4 pods or +100 % (the larger) per 15s; "
                          "queuescale's default scales up in one step. Kept queuescale's; to keep the ramp, set "
                          "policy.scaleUp.policies [{type: Pods, value: 4, period: 15s}, {type: Percent, value: "
                          "100, period: 15s}]")
            else:
                window = format_duration(hpa_default.stabilization_window)
                self.warn(path, f"not set, so KEDA's HPA scales down on the highest recommendation of the last "
                          f"{window} (stabilizationWindowSeconds {hpa_default.stabilization_window}); queuescale's "
                          f"default releases capacity unneeded for {format_duration(DEFAULT_SCALE_DOWN_DELAY)} "
                          f"(scaleDown.delay), in one step. Kept queuescale's; set policy.scaleDown {{delay: 0s, "
                          f"stabilizationWindow: {window}}} to keep KEDA's")
            return
        out: dict[str, Any] = {"stabilizationWindow": format_duration(direction.stabilization_window)}
        if name == "scaleDown" and DEFAULT_SCALE_DOWN_DELAY:
            out["delay"] = "0s"  # the HPA has no such delay: its window is the whole of its scale-down damping
        if direction.select_policy == "Disabled":
            out["selectPolicy"] = "Disabled"
        else:
            out["policies"] = [{"type": p.type, "value": p.value, "period": format_duration(p.period)}
                               for p in direction.policies]
            if direction.select_policy != "Max":
                out["selectPolicy"] = direction.select_policy
        policy[name] = out

    def _tolerance(self, policy: dict[str, Any], behavior: HpaBehavior) -> None:
        """The HPA's tolerance per direction (autoscaling/v2 `tolerance`) as queuescale's one policy.tolerance."""
        up, down = behavior.scale_up.tolerance, behavior.scale_down.tolerance
        if up is None and down is None:
            return
        effective = {HPA_TOLERANCE if t is None else t for t in (up, down)}
        tolerance = min(min(effective), 1.0)  # queuescale's tolerance is at most 1
        if len(effective) > 1 or tolerance != min(effective):
            where = "scaleUp.tolerance" if up is not None else "scaleDown.tolerance"
            self.warn(f"{_BEHAVIOR}.{where}", f"queuescale has one tolerance for both directions (at most 1): "
                      f"used {_number(tolerance)} as policy.tolerance")
        if tolerance != HPA_TOLERANCE:
            policy["tolerance"] = _number(tolerance)

    def _fallback(self, fallback: Fallback | None, maximum: int) -> dict[str, Any] | None:
        if fallback is None:
            return None
        path = "spec.fallback"
        threshold, replicas, behavior = fallback.failure_threshold, fallback.replicas, fallback.behavior
        if threshold < 1:
            self.errors.append(FieldError(f"{path}.failureThreshold", f"must be >= 1, got {threshold}"))
        if behavior == "scalingModifiers":
            self.errors.append(FieldError(f"{path}.behavior", "scalingModifiers cannot be carried over: queuescale "
                                          "has no scalingModifiers formula to fall back to"))
        if replicas > maximum:
            self.warn(f"{path}.replicas", f"{replicas} is above maxReplicaCount; lowered to {maximum}")
            replicas = maximum
        if behavior == "currentReplicas":
            return {"failureThreshold": threshold, "mode": "hold"}
        if behavior == "currentReplicasIfLower":
            self.warn(f"{path}.behavior", "currentReplicasIfLower (lower to fallback.replicas) cannot be carried "
                      "over: queuescale's fallback never scales down; converted to mode hold")
            return {"failureThreshold": threshold, "mode": "hold"}
        if behavior == "static":
            self.warn(f"{path}.behavior", f"static sets exactly {replicas} replicas, also down; queuescale's "
                      f"fallback (mode fixed) raises to at least {replicas} and never scales down")
        return {"failureThreshold": threshold, "mode": "fixed", "replicas": replicas}


def _secrets(spec: Mapping[str, Any]) -> list[str]:
    """The Secrets a converted rule's sources read, in order of first use."""
    names: list[str] = []
    for source in spec["sources"]:
        for key, value in source.items():
            if key.endswith("SecretRef") and value["name"] not in names:
                names.append(value["name"])
    return names


def allow_command(namespace: str | None, secret: str, rule: str) -> str:
    """The kubectl command with which a Secret's owner lets the rule read it: the wording of the operator's own
    hint (controller/kube/secrets.py allow_command), for a Secret whose annotation names no rule yet."""
    where = f" -n {namespace}" if namespace else ""
    return f"kubectl annotate secret {secret}{where} {ALLOWED_RULES_ANNOTATION}={rule}"


def _metadata_number(f: Fields, name: str, default: float) -> float:
    """KEDA writes metadata values as strings ("5"); a number is accepted too."""
    value = f.raw.get(name)
    f.read.add(name)
    if value is None:
        return default
    try:
        number = float(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        f.error(name, f'must be a number >= 0 (KEDA writes it as a string, e.g. "5"), got {value!r}')
        return default
    return number


def _truthy(value: object) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


# Why the queue-like kinds queuescale has no source for cannot carry over (the rest: not a queue length).
_UNSUPPORTED = {
    "redis-cluster-lists": "the redis-list source connects to one Redis server, not a cluster",
    "redis-sentinel-lists": "the redis-list source connects to one Redis server, not through Sentinel",
    "redis-streams": "KEDA counts a stream's pending entries or lag in ways the redis-list source does not "
                     "match one for one; write a redis-list source with streamName and consumerGroup",
    "azure-servicebus": "queuescale has no Service Bus source",
}


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _namespace(doc: Mapping[str, Any]) -> str | None:
    meta = doc.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    return namespace if isinstance(namespace, str) else None


def _containers(workload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = workload.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    pod = template.get("spec") if isinstance(template, Mapping) else None
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    return [c for c in containers if isinstance(c, Mapping)] if isinstance(containers, list) else []


# --------------------------------------------------------------------------------------------------------------
# The command


def run(path: str, out_file: str | None, out: TextIO, err: TextIO, output: str = "yaml") -> int:
    """Print (or write) the QueueScalers, warnings and errors on stderr; 1 if any object could not be converted."""
    try:
        conversion = convert_file(path)
    except ConvertError as exc:
        for line in exc.lines:
            print(line, file=err)
        return 1
    text = conversion.render(output)
    for warning in conversion.warnings:
        print(f"warning: {warning}", file=err)
    for error in conversion.errors:
        print(error, file=err)
    failed = 1 if conversion.errors else 0
    if not conversion.documents:
        return failed
    if out_file is None:
        out.write(text)
        return failed
    try:
        Path(out_file).write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"{out_file}: cannot write: {exc.strerror or exc}", file=err)
        return 1
    print(f"wrote {len(conversion.documents)} QueueScaler{'s' if len(conversion.documents) != 1 else ''} to "
          f"{out_file}", file=err)
    return failed
