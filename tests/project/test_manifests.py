"""The CRD and the Python model agree on fields, defaults and bounds; the manifests install into the fake server."""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.aio import client as aio_client
from kubernetes.aio import config as aio_config

from controller.kube.api import KubeApi, load_configuration
from controller.model.fields import Fields, SpecError
from controller.model.generate import crd_text
from controller.model.rule import ScaleTargetRef, parse_queuescaler
from controller.net.http import polling_client
from controller.operator.options import OperatorOptions
from controller.operator.runner import Operator
from controller.targets.kubernetes_scale import KubernetesScaleTarget
from tests.fakekube import FakeKube
from tests.fakekube.schema import apply_defaults, cel_errors, validation_errors
from tests.kube_helpers import deployment

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CRD: dict[str, Any] = yaml.safe_load((MANIFESTS / "crd.yaml").read_text())
SCHEMA: dict[str, Any] = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
SPEC_SCHEMA: dict[str, Any] = SCHEMA["properties"]["spec"]


def example_queuescalers() -> list[dict[str, Any]]:
    docs = [doc for path in sorted((ROOT / "examples").glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())]
    return [doc for doc in docs if isinstance(doc, dict) and doc.get("kind") == "QueueScaler"]


def secret_ref(name: str = "queue") -> dict[str, str]:
    return {"name": name, "key": "value"}


# Every field the CRD knows, set once (not a valid rule: every way to authenticate at once, and both serviceTime
# and throughputPerReplica).
EVERY_FIELD: dict[str, Any] = {
    "apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler", "metadata": {"name": "every-field"},
    "spec": {
        "scaleTargetRef": {"name": "worker", "apiVersion": "apps/v1", "kind": "Deployment"},
        "minReplicas": 1, "maxReplicas": 10, "pollingInterval": "10s",
        "sources": [{"type": "azure-queue", "weight": 1, "queueName": "orders", "connectionSecretRef": secret_ref(),
                     "accountName": "store", "accountKeySecretRef": secret_ref(), "sasSecretRef": secret_ref(),
                     "identity": "workload", "cloud": "public", "endpoint": "https://example.test",
                     "countStrategy": "visible", "oldestAge": "off"},
                    {"type": "redis-list", "listName": "jobs", "streamName": "events", "consumerGroup": "workers",
                     "streamCount": "pendingAndLag", "host": "redis", "port": 6379, "db": 0, "username": "scaler",
                     "passwordSecretRef": secret_ref(), "urlSecretRef": secret_ref(), "tls": True},
                    {"type": "sql-table", "engine": "postgresql", "table": "jobs", "dueColumn": "run_at",
                     "claimColumn": "status", "unclaimedValue": "pending", "where": "queue = 'a'",
                     "query": "SELECT count(*) FROM jobs", "host": "db", "port": 5432, "database": "shop",
                     "user": "scaler", "passwordSecretRef": secret_ref(), "dsnSecretRef": secret_ref(),
                     "sslMode": "require", "statementTimeout": "5s"},
                    {"type": "rabbitmq", "queue": "orders", "managementURL": "http://rabbitmq:15672", "vhost": "/",
                     "username": "scaler", "passwordSecretRef": secret_ref(), "count": "readyAndUnacked"},
                    {"type": "aws-sqs", "queueURL": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
                     "awsRegion": "eu-west-1", "accessKeyIdSecretRef": secret_ref(),
                     "secretAccessKeySecretRef": secret_ref(), "sessionTokenSecretRef": secret_ref(),
                     "includeInFlight": True}],
        "aggregation": "max",
        "policy": {
            "targetPerReplica": 5, "activationThreshold": 0, "tolerance": 0.1, "lookahead": "30s",
            "trendWindow": "1m", "throughputPerReplica": 2, "drainTime": "1m", "scaleToZeroDelay": "5m", "startupTime": "45s",
            "serviceTime": "2s", "messagesPerReplica": 2, "targetWaitSeconds": "1m",
            "scaleUp": {"cooldown": 0, "stabilizationWindow": 0, "selectPolicy": "Max",
                        "policies": [{"type": "Pods", "value": 4, "period": "30s"}]},
            "scaleDown": {"cooldown": "1m", "stabilizationWindow": "2m", "selectPolicy": "Min", "delay": "1m",
                          "policies": [{"type": "Percent", "value": 50, "period": "1m"}]},
            "onScaleIn": "drain", "recurringBursts": "ignore",
        },
        "fallback": {"failureThreshold": 3, "mode": "fixed", "replicas": 1},
        "schedules": [{"name": "office", "days": ["Mon"], "start": "08:00", "end": "18:00",
                       "timeZone": "Europe/Paris", "minReplicas": 1, "maxReplicas": 5}],
        "paused": False,
        "inFlight": {"port": "in-flight", "path": "/in-flight"},
    },
}

# A valid rule that reaches every nested object the bounds below probe.
VALID: dict[str, Any] = copy.deepcopy(EVERY_FIELD)
VALID["spec"]["sources"] = [
    {"type": "azure-queue", "weight": 1, "queueName": "orders", "connectionSecretRef": secret_ref(),
     "countStrategy": "visible", "oldestAge": "peek"},
    {"type": "redis-list", "listName": "jobs", "host": "redis", "port": 6379, "db": 0},
    {"type": "sql-table", "table": "jobs", "dueColumn": "run_at", "host": "db", "port": 5432, "database": "shop",
     "user": "scaler", "statementTimeout": "5s"},
    {"type": "rabbitmq", "queue": "orders", "managementURL": "http://rabbitmq:15672"},
    {"type": "aws-sqs", "queueURL": "http://127.0.0.1:4566/123456789012/orders", "awsRegion": "eu-west-1",
     "accessKeyIdSecretRef": secret_ref(), "secretAccessKeySecretRef": secret_ref()},
]
del VALID["spec"]["policy"]["serviceTime"]
# Which of VALID's sources a probe of a kind's own field goes to (the others are azure-queue's, source 0).
REDIS_FIELDS = {"listName", "streamName", "consumerGroup", "streamCount", "host", "port", "db", "username",
                "passwordSecretRef", "urlSecretRef", "tls"}
SQL_FIELDS = {"engine", "table", "dueColumn", "claimColumn", "unclaimedValue", "where", "query", "database", "user",
              "dsnSecretRef", "sslMode", "statementTimeout"}
RABBITMQ_FIELDS = {"queue", "managementURL", "vhost", "count"}
SQS_FIELDS = {"queueURL", "awsRegion", "accessKeyIdSecretRef", "secretAccessKeySecretRef", "sessionTokenSecretRef",
              "includeInFlight"}


def source_index(path: str) -> str:
    """`spec.sources[].port` -> `spec.sources[1].port`: the source of VALID whose kind has the field."""
    if not path.startswith("spec.sources[]."):
        return path
    field = path.split(".")[2]
    index = next((i for i, fields in ((1, REDIS_FIELDS), (2, SQL_FIELDS), (3, RABBITMQ_FIELDS), (4, SQS_FIELDS))
                  if field in fields), 0)
    return path.replace("spec.sources[]", f"spec.sources[{index}]", 1)


def schema_paths(schema: dict[str, Any], prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property of a schema as `spec.sources[].queueName`, with its schema."""
    for name, child in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}"
        yield path, child
        yield from schema_paths(child, path)
        if isinstance(child.get("items"), dict):
            yield from schema_paths(child["items"], path + "[]")


def python_paths(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Every field the Python parser reads while parsing `doc` (valid or not), as `spec.sources[].queueName`."""
    seen: set[str] = set()
    finish = Fields.finish

    def recording_finish(self: Fields) -> None:
        seen.update(re.sub(r"\[\d+\]", "[]", self.at(name)) for name in self.read)
        finish(self)

    monkeypatch.setattr(Fields, "finish", recording_finish)
    with contextlib.suppress(SpecError):
        parse_queuescaler(doc)
    return {path for path in seen if path.startswith("spec.")}


def given_paths(value: Any, prefix: str) -> Iterator[str]:
    if isinstance(value, dict):
        for name, child in value.items():
            yield f"{prefix}.{name}"
            yield from given_paths(child, f"{prefix}.{name}")
    elif isinstance(value, list):
        for item in value:
            yield from given_paths(item, prefix + "[]")


def python_errors(doc: dict[str, Any]) -> list[str]:
    try:
        parse_queuescaler(doc)
    except SpecError as error:
        return [e.path for e in error.errors]
    return []


def schema_error_paths(doc: dict[str, Any]) -> list[str]:
    return [path for path, _ in validation_errors(doc, SCHEMA)]


# ----------------------------------------------------------------------------------------------------------------
# Fields


def test_the_every_field_document_sets_every_crd_field() -> None:
    crd = {path for path, _ in schema_paths(SPEC_SCHEMA, "spec")}
    assert crd == set(given_paths(EVERY_FIELD["spec"], "spec"))


def test_crd_and_parser_know_the_same_spec_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    crd = {path for path, _ in schema_paths(SPEC_SCHEMA, "spec")}
    python = python_paths(EVERY_FIELD, monkeypatch)
    assert sorted(python - crd) == [], "fields the parser reads but the CRD would prune"
    assert sorted(crd - python) == [], "fields the CRD accepts but the parser rejects as unknown"


def test_crd_required_fields_are_required_by_the_parser() -> None:
    for field in SPEC_SCHEMA["required"]:
        doc = copy.deepcopy(VALID)
        del doc["spec"][field]
        assert f"spec.{field}" in python_errors(doc)
        assert ("spec", f"'{field}' is a required property") in validation_errors(doc, SCHEMA)


# ----------------------------------------------------------------------------------------------------------------
# Defaults


def minimal() -> dict[str, Any]:
    return {"apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler", "metadata": {"name": "minimal"},
            "spec": {"scaleTargetRef": {"name": "worker"}, "maxReplicas": 5,
                     "sources": [{"type": "azure-queue", "queueName": "orders", "connectionSecretRef": secret_ref()}],
                     "policy": {"scaleUp": {"policies": [{"type": "Pods", "value": 1, "period": 60}]}},
                     "schedules": [{"name": "night", "start": "22:00", "end": "06:00", "maxReplicas": 1}]}}


def test_crd_defaults_parse_to_the_models_defaults() -> None:
    doc = minimal()
    defaulted = apply_defaults(doc, SCHEMA)
    assert defaulted != doc
    assert parse_queuescaler(defaulted) == parse_queuescaler(doc)


def test_the_crd_is_the_generated_one() -> None:
    # Its schema of spec and the parser read one declaration of each field (controller/model), so a default the
    # model applies is the CRD's by construction (tests/model/test_generate.py); what is left is that it is current.
    text = (MANIFESTS / "crd.yaml").read_text()
    assert crd_text(text) == text, "manifests/crd.yaml is not current: run python tools/generate_schema.py"


def test_crd_defaults_are_valid_values() -> None:
    assert validation_errors(apply_defaults(minimal(), SCHEMA), SCHEMA) == []


# ----------------------------------------------------------------------------------------------------------------
# Bounds


def set_path(doc: dict[str, Any], path: str, value: Any) -> None:
    node: Any = doc
    parts = re.sub(r"\[(\d*)\]", lambda m: "." + (m.group(1) or "0"), path).split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    node[parts[-1]] = value


def bound_probes() -> Iterator[tuple[str, Any, bool]]:
    """(path, value, valid?) just inside and just outside every numeric bound of the CRD."""
    for path, schema in schema_paths(SPEC_SCHEMA, "spec"):
        integer = schema.get("type") == "integer" or schema.get("x-kubernetes-int-or-string")
        step = 1 if integer else 0.5
        if "minimum" in schema:
            low = schema["minimum"]
            if schema.get("exclusiveMinimum"):
                yield path, low, False
                yield path, low + step, True
            else:
                yield path, low - step, False
                yield path, low, True
        if "maximum" in schema:
            yield path, schema["maximum"], True
            yield path, schema["maximum"] + step, False


def python_path(path: str) -> str:
    return path.replace("[]", "[0]")


# Fields that exclude each other: probing one removes the other, so only the bound decides.
EXCLUSIVE = {"spec.policy.serviceTime": "throughputPerReplica"}


def probe_base(path: str) -> dict[str, Any]:
    doc = copy.deepcopy(VALID)
    partner = EXCLUSIVE.get(path.replace("[0]", "[]"))
    if partner is not None:
        doc["spec"]["policy"].pop(partner, None)
    return doc


@pytest.mark.parametrize(("path", "value", "valid"), list(bound_probes()))
def test_numeric_bounds_agree(path: str, value: Any, valid: bool) -> None:
    path = source_index(path)
    doc = probe_base(path)
    set_path(doc, path, value)
    at = python_path(path)
    assert (at not in schema_error_paths(doc)) is valid, f"CRD on {at}={value}"
    assert (at not in python_errors(doc)) is valid, f"parser on {at}={value}"


STRING_PROBES = [
    ("spec.scaleTargetRef.name", "Worker", False),
    ("spec.scaleTargetRef.name", "orders.worker-1", True),
    ("spec.scaleTargetRef.apiVersion", "apps/v1beta2", True),
    ("spec.scaleTargetRef.apiVersion", "apps", False),
    ("spec.scaleTargetRef.kind", "deployment", False),
    ("spec.pollingInterval", "1h30m", True),
    ("spec.pollingInterval", "1s500ms", True),
    ("spec.pollingInterval", "ten seconds", False),
    ("spec.pollingInterval", "5d", False),
    ("spec.sources[0].queueName", "or", False),
    ("spec.sources[0].queueName", "orders--eu", False),
    ("spec.sources[0].queueName", "orders-eu", True),
    ("spec.sources[0].queueName", "-orders", False),
    ("spec.sources[0].queueName", "Orders", False),
    ("spec.sources[0].connectionSecretRef.key", "conn string", False),
    ("spec.sources[0].connectionSecretRef.key", "connection-string", True),
    ("spec.sources[0].countStrategy", "exact", False),
    ("spec.sources[0].oldestAge", "off", True),
    ("spec.sources[0].oldestAge", "bogus", False),
    ("spec.sources[0].type", "sqs", False),
    ("spec.sources[1].host", "redis.shop.svc", True),
    ("spec.sources[1].host", "bad host", False),
    ("spec.sources[1].username", "two words", False),
    ("spec.sources[2].table", "shop.jobs", True),
    ("spec.sources[2].table", "jobs; drop table jobs", False),
    ("spec.sources[2].dueColumn", "run at", False),
    ("spec.sources[2].sslMode", "on", False),
    ("spec.sources[2].statementTimeout", "2.5s", True),
    ("spec.sources[2].statementTimeout", "soon", False),
    ("spec.sources[3].managementURL", "https://rabbitmq.shop.svc:15671/mgmt", True),
    ("spec.sources[3].managementURL", "http://guest:guest@rabbitmq:15672", False),
    ("spec.sources[3].count", "unacked", False),
    ("spec.sources[4].queueURL", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo", True),
    ("spec.sources[4].queueURL", "https://sqs.eu-west-1.amazonaws.com/orders", False),
    ("spec.sources[4].awsRegion", "Europe", False),
    ("spec.aggregation", "avg", False),
    ("spec.fallback.mode", "scale", False),
    ("spec.policy.scaleUp.policies[0].type", "Replicas", False),
    ("spec.policy.scaleDown.selectPolicy", "Disabled", True),
    ("spec.schedules[0].name", "Office", False),
    ("spec.schedules[0].start", "24:00", True),  # the pattern allows it; a CEL rule (and the parser) refuses it
    ("spec.schedules[0].start", "7:00", False),
    ("spec.schedules[0].end", "23:60", False),
    ("spec.schedules[0].days", ["Mon", "Funday"], False),
]


@pytest.mark.parametrize(("path", "value", "valid"), STRING_PROBES)
def test_string_patterns_and_enums_agree(path: str, value: Any, valid: bool) -> None:
    doc = probe_base(path)
    set_path(doc, path.replace("[0]", "[]"), value)
    crd_valid = not any(p == path or p.startswith(path + "[") for p in schema_error_paths(doc))
    assert crd_valid is valid, f"CRD on {path}={value!r}"
    if path == "spec.schedules[0].start" and value == "24:00":
        assert path in python_errors(doc)
        return
    python_valid = not any(p == path or p.startswith(path + "[") for p in python_errors(doc))
    assert python_valid is valid, f"parser on {path}={value!r}"


def mutated(changes: dict[str, Any], removals: tuple[str, ...] = ()) -> dict[str, Any]:
    doc = copy.deepcopy(VALID)
    for path, value in changes.items():
        set_path(doc, path, value)
    for path in removals:
        node: Any = doc
        parts = re.sub(r"\[(\d*)\]", lambda m: "." + (m.group(1) or "0"), path).split(".")
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node[part]
        del node[parts[-1]]
    return doc


AZURE = "spec.sources[]"
CROSS_FIELD_PROBES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("valid", {}, ()),
    ("min above max", {"spec.minReplicas": 11}, ()),
    ("min equal to max", {"spec.minReplicas": 10}, ()),
    ("fallback above max", {"spec.fallback.replicas": 11}, ()),
    ("fixed fallback without replicas", {}, ("spec.fallback.replicas",)),
    ("hold fallback with replicas", {"spec.fallback.mode": "hold"}, ()),
    ("hold fallback", {"spec.fallback.mode": "hold"}, ("spec.fallback.replicas",)),
    ("schedule min above spec max", {"spec.schedules[].minReplicas": 11, "spec.schedules[].maxReplicas": 12}, ()),
    ("schedule min above its max", {"spec.schedules[].minReplicas": 4, "spec.schedules[].maxReplicas": 3}, ()),
    ("schedule without bounds", {}, ("spec.schedules[].minReplicas", "spec.schedules[].maxReplicas")),
    ("schedule of no length", {"spec.schedules[].end": "08:00"}, ()),
    ("schedule starting at 24:00", {"spec.schedules[].start": "24:00"}, ()),
    ("schedule over midnight", {"spec.schedules[].start": "22:00", "spec.schedules[].end": "06:00"}, ()),
    ("two ways to authenticate", {f"{AZURE}.identity": "workload"}, ()),
    ("no way to authenticate", {}, (f"{AZURE}.connectionSecretRef",)),
    ("connection string with an account", {f"{AZURE}.accountName": "store"}, ()),
    ("connection string with a cloud", {f"{AZURE}.cloud": "china"}, ()),
    ("account key without an account", {f"{AZURE}.accountKeySecretRef": secret_ref()},
     (f"{AZURE}.connectionSecretRef",)),
    ("account key with an account", {f"{AZURE}.accountKeySecretRef": secret_ref(), f"{AZURE}.accountName": "store"},
     (f"{AZURE}.connectionSecretRef",)),
    ("workload identity in China", {f"{AZURE}.identity": "workload", f"{AZURE}.accountName": "store",
                                    f"{AZURE}.cloud": "china"}, (f"{AZURE}.connectionSecretRef",)),
    ("cloud and endpoint", {f"{AZURE}.identity": "workload", f"{AZURE}.accountName": "store",
                            f"{AZURE}.cloud": "china", f"{AZURE}.endpoint": "http://127.0.0.1:10001/store"},
     (f"{AZURE}.connectionSecretRef",)),
    ("no queue name", {}, (f"{AZURE}.queueName",)),
    ("redis list and stream", {"spec.sources[1].streamName": "events", "spec.sources[1].consumerGroup": "g"}, ()),
    ("redis neither list nor stream", {}, ("spec.sources[1].listName",)),
    ("redis host and url", {"spec.sources[1].urlSecretRef": secret_ref()}, ()),
    ("redis url alone", {"spec.sources[1].urlSecretRef": secret_ref()},
     ("spec.sources[1].host", "spec.sources[1].port", "spec.sources[1].db")),
    ("sql table and query", {"spec.sources[2].query": "SELECT count(*) FROM jobs"}, ()),
    ("sql query alone", {"spec.sources[2].query": "SELECT count(*) FROM jobs"},
     ("spec.sources[2].table", "spec.sources[2].dueColumn")),
    ("sql without a host", {}, ("spec.sources[2].host",)),
    ("rabbitmq without a management URL", {}, ("spec.sources[3].managementURL",)),
    ("sqs without a secret key", {}, ("spec.sources[4].secretAccessKeySecretRef",)),
    ("polling of a second in ms", {"spec.pollingInterval": "1000ms"}, ()),
    ("polling of 1.5 seconds as text", {"spec.pollingInterval": "1.5"}, ()),
    ("drain time of an hour", {"spec.policy.drainTime": "1h"}, ()),
    ("service time and throughput", {"spec.policy.serviceTime": "2s"}, ()),
    ("wait objective without a service time", {}, ("spec.policy.throughputPerReplica",)),
    ("wait objective with a service time", {"spec.policy.serviceTime": "2s"}, ("spec.policy.throughputPerReplica",)),
]


VALID_PROBES = {
    "valid", "min equal to max", "hold fallback", "schedule over midnight", "account key with an account",
    "workload identity in China", "polling of a second in ms", "polling of 1.5 seconds as text",
    "drain time of an hour", "wait objective with a service time", "redis url alone", "sql query alone",
}


@pytest.mark.parametrize(("name", "changes", "removals"), CROSS_FIELD_PROBES, ids=[n for n, _, _ in CROSS_FIELD_PROBES])
def test_cel_rules_and_the_parser_agree_on_cross_field_rules(name: str, changes: dict[str, Any],
                                                             removals: tuple[str, ...]) -> None:
    doc = apply_defaults(mutated(changes, removals), SCHEMA)
    assert validation_errors(doc, SCHEMA) == []  # only the CEL rules decide these
    valid = name in VALID_PROBES
    assert (cel_errors(doc, SCHEMA) == []) is valid, f"CEL: {cel_errors(doc, SCHEMA)}"
    assert (python_errors(doc) == []) is valid, f"parser: {python_errors(doc)}"


# A string duration's lower bound is the operator's to check: a CEL rule reading an int-or-string costs too much for
# the API server before Kubernetes 1.34 (tests/project/test_crd_cel_cost.py), and a pattern cannot add durations up.
SUB_SECOND_DURATIONS = [
    ("spec.pollingInterval", "500ms", ">= 1s"),
    ("spec.policy.trendWindow", "0.5", ">= 1s"),
    ("spec.policy.targetWaitSeconds", "0s", ">= 1s"),
    ("spec.policy.drainTime", "999ms", ">= 1s"),
    ("spec.policy.serviceTime", "0s", ">= 1ms"),
    ("spec.policy.scaleUp.policies[0].period", "900ms", ">= 1s"),
    ("spec.policy.scaleDown.policies[0].period", "0.1", ">= 1s"),
]


@pytest.mark.parametrize(("path", "value", "bound"), SUB_SECOND_DURATIONS, ids=[p for p, _, _ in SUB_SECOND_DURATIONS])
async def test_a_too_short_duration_is_stored_then_refused_by_the_operator_naming_the_field(
    api: client.ApiClient, kubeconfig: Path, path: str, value: str, bound: str
) -> None:
    client.ApiextensionsV1Api(api).create_custom_resource_definition(CRD)
    custom = client.CustomObjectsApi(api)
    doc = probe_base(path)
    set_path(doc, path, value)
    created = custom.create_namespaced_custom_object("queuescale.io", "v1alpha1", "default", "queuescalers", doc)
    kube = KubeApi(await load_configuration(str(kubeconfig)))
    http = polling_client(timeout=5.0)
    operator = Operator(kube, http, OperatorOptions())
    try:
        await operator.upsert(created)
    finally:
        await operator.shutdown()
        await http.aclose()
        await kube.close()
    stored = custom.get_namespaced_custom_object_status("queuescale.io", "v1alpha1", "default", "queuescalers",
                                                        "every-field")
    ready = next(c for c in stored["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert f'{path}: must be a duration {bound}, got "{value}"' in ready["message"]


def test_cross_field_rules_are_cel_validations() -> None:
    def nodes(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield schema
        for child in (schema.get("properties") or {}).values():
            yield from nodes(child)
        if isinstance(schema.get("items"), dict):
            yield from nodes(schema["items"])

    rules = [r["rule"] for node in nodes(SPEC_SCHEMA) for r in node.get("x-kubernetes-validations", [])]
    assert "self.minReplicas <= self.maxReplicas" in rules
    assert any("fallback.replicas <= self.maxReplicas" in rule for rule in rules)
    assert any("has(self.connectionSecretRef), has(self.accountKeySecretRef)" in rule for rule in rules)


def test_the_schema_is_structural() -> None:
    def check(schema: dict[str, Any], path: str) -> None:
        typed = "type" in schema or schema.get("x-kubernetes-int-or-string") \
            or schema.get("x-kubernetes-preserve-unknown-fields")
        assert typed, f"{path} has no type"
        if schema.get("x-kubernetes-int-or-string"):
            assert schema["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        for name, child in (schema.get("properties") or {}).items():
            check(child, f"{path}.{name}")
        if isinstance(schema.get("items"), dict):
            check(schema["items"], path + "[]")
        if schema.get("type") == "string" and ("pattern" in schema or "x-kubernetes-validations" in schema):
            # CEL cost and regex limits need bounded strings, except enums and fixed patterns
            assert "maxLength" in schema or "enum" in schema or schema["pattern"].endswith("}$") \
                or schema["pattern"].endswith(")$") or schema["pattern"].endswith("+$"), path

    check(SCHEMA, "")


# ----------------------------------------------------------------------------------------------------------------
# Examples


@pytest.mark.parametrize("doc", example_queuescalers(), ids=lambda d: d["metadata"]["name"])
def test_examples_are_valid_for_the_crd_and_the_parser(doc: dict[str, Any]) -> None:
    assert validation_errors(doc, SCHEMA) == []
    assert cel_errors(apply_defaults(doc, SCHEMA), SCHEMA) == []
    assert validation_errors(apply_defaults(doc, SCHEMA), SCHEMA) == []
    assert parse_queuescaler(doc) == parse_queuescaler(apply_defaults(doc, SCHEMA))


def test_there_are_examples() -> None:
    assert len(example_queuescalers()) >= 2


def test_crd_installs_and_the_examples_can_be_created(fake_kube: FakeKube, api: client.ApiClient) -> None:
    client.ApiextensionsV1Api(api).create_custom_resource_definition(CRD)
    custom = client.CustomObjectsApi(api)
    for doc in example_queuescalers():
        fake_kube.ensure_namespace(doc["metadata"]["namespace"])
        created = custom.create_namespaced_custom_object("queuescale.io", "v1alpha1", doc["metadata"]["namespace"],
                                                         "queuescalers", doc)
        assert created["spec"]["policy"]["tolerance"] == 0.1  # defaulted by the server from the CRD
        assert parse_queuescaler(created).spec == parse_queuescaler(doc).spec


def test_the_server_refuses_a_rule_the_schema_refuses(api: client.ApiClient) -> None:
    client.ApiextensionsV1Api(api).create_custom_resource_definition(CRD)
    doc = copy.deepcopy(VALID)
    doc["spec"]["minReplicas"] = -1
    with pytest.raises(client.ApiException) as caught:
        client.CustomObjectsApi(api).create_namespaced_custom_object("queuescale.io", "v1alpha1", "default",
                                                                     "queuescalers", doc)
    assert caught.value.status == 422
    assert "spec.minReplicas" in caught.value.body


def test_the_server_prunes_unknown_fields_or_refuses_them_when_strict(api: client.ApiClient) -> None:
    client.ApiextensionsV1Api(api).create_custom_resource_definition(CRD)
    custom = client.CustomObjectsApi(api)
    doc = copy.deepcopy(VALID)
    doc["spec"]["maxReplica"] = 3  # a typo
    doc["spec"]["policy"]["targetPerReplicas"] = 2
    with pytest.raises(client.ApiException) as caught:
        custom.create_namespaced_custom_object("queuescale.io", "v1alpha1", "default", "queuescalers", doc,
                                               field_validation="Strict")
    assert caught.value.status == 400
    assert 'unknown field "spec.maxReplica"' in json.loads(caught.value.body)["message"]
    created = custom.create_namespaced_custom_object("queuescale.io", "v1alpha1", "default", "queuescalers", doc)
    assert "maxReplica" not in created["spec"]
    assert "targetPerReplicas" not in created["spec"]["policy"]


def test_status_keeps_the_operators_own_fields(api: client.ApiClient) -> None:
    client.ApiextensionsV1Api(api).create_custom_resource_definition(CRD)
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object("queuescale.io", "v1alpha1", "default", "queuescalers", VALID)
    memory = {"recommendations": [[1800000000.0, 3]], "lastScaleUp": 1800000000.0}
    written = custom.patch_namespaced_custom_object_status(
        "queuescale.io", "v1alpha1", "default", "queuescalers", "every-field",
        {"status": {"observedGeneration": 1, "memory": memory, "somethingNew": True}})
    assert written["status"]["memory"] == memory
    assert written["status"]["somethingNew"] is True


def test_the_condition_columns_are_the_filters_keda_users_read_in_kubectl_get_so() -> None:
    # KEDA's ScaledObject CRD prints READY and ACTIVE (and FALLBACK, PAUSED in later releases) as
    # `.status.conditions[?(@.type=="X")].status` (kedacore/keda config/crd/bases/keda.sh_scaledobjects.yaml);
    # apiextensions-apiserver accepts it (validation.go, validateSimpleJSONPath, asks only for a leading ".") and its
    # tableconvertor (tableconvertor.go, New) evaluates it with k8s.io/client-go/util/jsonpath, which filters.
    columns = {c["name"]: c for c in CRD["spec"]["versions"][0]["additionalPrinterColumns"]}
    for condition in ("Active", "Fallback", "Paused"):
        assert columns[condition]["jsonPath"] == f'.status.conditions[?(@.type=="{condition}")].status'
        assert columns[condition]["type"] == "string" and columns[condition].get("priority", 0) == 0


def test_printer_columns_show_like_kubectl_get_qs(fake_kube: FakeKube, api: client.ApiClient) -> None:
    client.ApiextensionsV1Api(api).create_custom_resource_definition(CRD)
    custom = client.CustomObjectsApi(api)
    doc = example_queuescalers()[0]
    namespace = doc["metadata"]["namespace"]
    fake_kube.ensure_namespace(namespace)
    custom.create_namespaced_custom_object("queuescale.io", "v1alpha1", namespace, "queuescalers", doc)
    conditions = [{"type": kind, "status": status, "reason": "R", "message": "m",
                   "lastTransitionTime": "2026-01-01T00:00:00Z"}
                  for kind, status in (("Ready", "True"), ("Active", "True"), ("Fallback", "False"),
                                       ("Paused", "False"))]
    custom.patch_namespaced_custom_object_status(
        "queuescale.io", "v1alpha1", namespace, "queuescalers", doc["metadata"]["name"],
        {"status": {"queueLength": 57, "desiredReplicas": 3, "currentReplicas": 2, "readyReplicas": 1,
                    "conditions": conditions}})
    lines = fake_kube.table("qs", namespace).splitlines()
    assert lines[0].split() == ["NAME", "TARGET", "MIN", "MAX", "QUEUE", "DESIRED", "CURRENT", "READY", "ACTIVE",
                                "FALLBACK", "PAUSED", "AGE"]
    spec = doc["spec"]
    expected = [doc["metadata"]["name"], spec["scaleTargetRef"]["name"], str(spec.get("minReplicas", 0)),
                str(spec["maxReplicas"]), "57", "3", "2", "1", "True", "False", "False"]
    assert lines[1].split()[:-1] == expected
    assert re.fullmatch(r"\d+s", lines[1].split()[-1])


# ----------------------------------------------------------------------------------------------------------------
# RBAC and the operator Deployment, enforced by the fake server for the operator's ServiceAccount

OPERATOR_NAMESPACE = "queuescale-system"
OPERATOR_ACCOUNT = (OPERATOR_NAMESPACE, "queuescale-operator")


def manifest(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]


def one(name: str, kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in manifest(name) if doc["kind"] == kind]
    return found


@pytest.fixture
def installed(fake_kube: FakeKube) -> FakeKube:
    for name in ("crd.yaml", "operator.yaml", "rbac.yaml"):
        for doc in manifest(name):
            fake_kube.create(doc)
    fake_kube.ensure_namespace("shop")
    fake_kube.create({**deployment("orders-worker"), "metadata": {"name": "orders-worker", "namespace": "shop"}})
    fake_kube.create(yaml.safe_load((ROOT / "examples" / "orders-worker-secret.yaml").read_text()))
    for doc in example_queuescalers():
        if doc["metadata"]["namespace"] == "shop":
            fake_kube.create(doc)
    return fake_kube


@pytest.fixture
def operator_api(installed: FakeKube, tmp_path: Path) -> Iterator[client.ApiClient]:
    """The official client with the operator's ServiceAccount token: only its RBAC applies."""
    path = installed.write_kubeconfig(tmp_path / "operator-kubeconfig", OPERATOR_NAMESPACE,
                                      service_account=OPERATOR_ACCOUNT)
    api_client = config.new_client_from_config(config_file=str(path))
    try:
        yield api_client
    finally:
        api_client.close()


def forbidden(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(client.ApiException) as caught:
        call(*args, **kwargs)
    assert caught.value.status == 403
    message = json.loads(caught.value.body)["message"]
    assert isinstance(message, str)
    return message


def test_operator_watches_rules_everywhere_and_patches_only_their_status(operator_api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(operator_api)
    rules = custom.list_cluster_custom_object("queuescale.io", "v1alpha1", "queuescalers")
    assert [r["metadata"]["name"] for r in rules["items"]] == ["orders-worker"]
    events = list(watch.Watch().stream(custom.list_cluster_custom_object, "queuescale.io", "v1alpha1",
                                       "queuescalers", timeout_seconds=1))
    assert [e["type"] for e in events] == ["ADDED"]
    custom.patch_namespaced_custom_object_status("queuescale.io", "v1alpha1", "shop", "queuescalers", "orders-worker",
                                                 {"status": {"desiredReplicas": 1}})
    message = forbidden(custom.patch_namespaced_custom_object, "queuescale.io", "v1alpha1", "shop", "queuescalers",
                        "orders-worker", {"spec": {"maxReplicas": 1}})
    assert message == ('queuescalers.queuescale.io "orders-worker" is forbidden: User '
                       '"system:serviceaccount:queuescale-system:queuescale-operator" cannot patch resource '
                       '"queuescalers" in API group "queuescale.io" in the namespace "shop"')


async def test_operator_scales_targets_through_the_scale_subresource_only(installed: FakeKube, tmp_path: Path,
                                                                          operator_api: client.ApiClient) -> None:
    path = installed.write_kubeconfig(tmp_path / "aio-kubeconfig", service_account=OPERATOR_ACCOUNT)
    configuration = aio_client.Configuration()
    await aio_config.load_kube_config(config_file=str(path), client_configuration=configuration)
    api = KubeApi(configuration)
    try:
        target = KubernetesScaleTarget(api, ScaleTargetRef(name="orders-worker"), "shop")
        await target.scale(4, await target.read())
    finally:
        await api.close()
    assert installed.get("apps/v1", "Deployment", "orders-worker", "shop")["spec"]["replicas"] == 4
    apps = client.AppsV1Api(operator_api)
    forbidden(apps.read_namespaced_deployment, "orders-worker", "shop")
    forbidden(apps.patch_namespaced_deployment, "orders-worker", "shop", {"spec": {"replicas": 1}})
    forbidden(apps.delete_namespaced_deployment, "orders-worker", "shop")


def test_operator_watches_deployments_and_statefulsets_but_cannot_change_them(
        operator_api: client.ApiClient) -> None:
    """The targets' watch (controller/kube/workloads.py) lists and watches every namespace; nothing more."""
    apps = client.AppsV1Api(operator_api)
    listed = apps.list_deployment_for_all_namespaces()
    assert "orders-worker" in [d.metadata.name for d in listed.items]
    events = list(watch.Watch().stream(apps.list_stateful_set_for_all_namespaces, timeout_seconds=1))
    assert events == []
    forbidden(apps.create_namespaced_stateful_set, "shop", {"metadata": {"name": "x"}})
    forbidden(client.AppsV1Api(operator_api).list_replica_set_for_all_namespaces)


def test_operator_reads_a_named_secret_but_cannot_list_secrets(operator_api: client.ApiClient) -> None:
    core = client.CoreV1Api(operator_api)
    secret = core.read_namespaced_secret("orders-queue", "shop")
    assert (secret.string_data, list(secret.data)) == (None, ["connection-string"])  # stringData is merged
    forbidden(core.list_namespaced_secret, "shop")
    forbidden(core.list_secret_for_all_namespaces)
    forbidden(core.patch_namespaced_secret, "orders-queue", "shop", {"metadata": {"labels": {"a": "b"}}})


def test_operator_holds_its_lease_only_in_its_namespace(operator_api: client.ApiClient) -> None:
    leases = client.CoordinationV1Api(operator_api)
    body = {"metadata": {"name": "queuescale-operator"}, "spec": {"holderIdentity": "pod-a",
                                                                   "leaseDurationSeconds": 15}}
    leases.create_namespaced_lease(OPERATOR_NAMESPACE, body)
    lease = leases.read_namespaced_lease("queuescale-operator", OPERATOR_NAMESPACE)
    lease.spec.holder_identity = "pod-b"
    leases.replace_namespaced_lease("queuescale-operator", OPERATOR_NAMESPACE, lease)
    forbidden(leases.read_namespaced_lease, "someone-elses", OPERATOR_NAMESPACE)
    forbidden(leases.create_namespaced_lease, "default", body)


def test_operator_records_events_on_rules(operator_api: client.ApiClient) -> None:
    core = client.CoreV1Api(operator_api)
    event = core.create_namespaced_event("shop", {
        "metadata": {"generateName": "orders-worker."}, "reason": "Scaled", "message": "0 -> 1", "type": "Normal",
        "involvedObject": {"apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler", "name": "orders-worker",
                           "namespace": "shop"}, "count": 1})
    core.patch_namespaced_event(event.metadata.name, "shop", {"count": 2},
                                _content_type="application/merge-patch+json")
    forbidden(core.list_namespaced_event, "shop")


ALL_MANIFESTS = [(name, doc) for name in ("crd.yaml", "rbac.yaml", "operator.yaml") for doc in manifest(name)]


@pytest.mark.parametrize(("name", "doc"), ALL_MANIFESTS,
                         ids=[f"{n}:{d['kind']}/{d['metadata']['name']}" for n, d in ALL_MANIFESTS])
def test_manifests_are_valid_kubernetes_objects(name: str, doc: dict[str, Any]) -> None:
    del name
    kubernetes_validate.validate(doc, "1.33", strict=True)


def test_rbac_grants_no_wildcards_and_no_secret_enumeration() -> None:
    role = one("rbac.yaml", "ClusterRole")
    for rule in role["rules"] + one("rbac.yaml", "Role")["rules"]:
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[key], rule
        assert not {"delete", "deletecollection", "escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
    secret_rules = [r for r in role["rules"] if "secrets" in r["resources"]]
    assert [r["verbs"] for r in secret_rules] == [["get"]]
    assert not any("leases" in r["resources"] for r in role["rules"]), "leases belong in the namespaced Role"


def test_bindings_name_the_service_account_the_deployment_runs_as() -> None:
    deployment_doc = one("operator.yaml", "Deployment")
    namespace = deployment_doc["metadata"]["namespace"]
    account = deployment_doc["spec"]["template"]["spec"]["serviceAccountName"]
    assert one("rbac.yaml", "ServiceAccount")["metadata"] == {**one("rbac.yaml", "ServiceAccount")["metadata"],
                                                              "name": account, "namespace": namespace}
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert one("rbac.yaml", kind)["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                                       "namespace": namespace}]
    assert one("rbac.yaml", "Role")["metadata"]["namespace"] == namespace


def test_operator_runs_unprivileged_with_probes_and_metrics() -> None:
    pod = one("operator.yaml", "Deployment")["spec"]["template"]["spec"]
    pod_security = pod["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert isinstance(pod_security["runAsUser"], int)
    assert pod_security["runAsUser"] > 0
    assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["args"] == ["run", "--leader-elect"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]


def test_metrics_service_selects_the_operator_pods() -> None:
    service = one("operator.yaml", "Service")
    labels = one("operator.yaml", "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]
