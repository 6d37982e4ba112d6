"""The QueueScaler model: defaults, every bound, and errors that name their field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.model.fields import FieldError, Fields, SpecError, format_duration, parse_duration
from controller.model.rule import QueueScaler, StepPolicy, parse_queuescaler
from controller.model.sources.azure_queue import AzureQueueSource

AZURE = {"type": "azure-queue", "queueName": "orders", "connectionSecretRef": {"name": "q", "key": "conn"}}


def rule(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"scaleTargetRef": {"name": "worker"}, "maxReplicas": 10, "sources": [dict(AZURE)]}
    base.update(spec)
    return {"apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler", "metadata": {"name": "r"}, "spec": base}


def errors_of(doc: object) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_queuescaler(doc)
    return [str(e) for e in caught.value.errors]


def one_error(doc: object) -> str:
    errors = errors_of(doc)
    assert len(errors) == 1, errors
    return errors[0]


def with_path(doc: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    node = doc
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return doc


# ---------------------------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(30, 30.0), (2.5, 2.5), ("30", 30.0), ("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0), ("250ms", 0.25),
     ("1h2m3s", 3723.0), ("0", 0.0), ("1.5m", 90.0)],
)
def test_durations_accept_numbers_and_go_style_strings(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["-5s", -1, "5 minutes", "", "s", "5x", True, None, [], "1h-5m", float("inf")])
def test_durations_reject_negative_and_malformed(text: object) -> None:
    assert parse_duration(text) is None


def test_format_duration_reads_like_a_person_wrote_it() -> None:
    assert [format_duration(s) for s in (0, 0.5, 45, 90, 3600, 5400)] == ["0s", "500ms", "45s", "1m30s", "1h", "1h30m"]


# ---------------------------------------------------------------------------------------------- defaults


def test_minimal_rule_gets_every_default() -> None:
    parsed = parse_queuescaler(rule())
    spec = parsed.spec
    assert (parsed.name, parsed.namespace, parsed.paused) == ("r", "default", False)
    assert spec.scale_target_ref.api_version == "apps/v1"
    assert spec.scale_target_ref.kind == "Deployment"
    assert (spec.min_replicas, spec.max_replicas, spec.polling_interval) == (0, 10, 10.0)
    assert spec.aggregation == "sum"
    assert spec.policy.target_per_replica is None  # 5 in count mode, derived in rate mode
    assert spec.policy.activation_threshold == 0.0
    assert spec.policy.tolerance == 0.1
    assert spec.policy.scale_down.stabilization_window == 0.0
    assert spec.policy.scale_down.delay is None  # 2m, or a serviceTime for long jobs in rate mode (policy.py)
    assert spec.policy.target_wait is None and spec.policy.messages_per_replica is None
    assert spec.policy.scale_up.policies == ()
    assert spec.policy.scale_to_zero_delay is None  # 5m in count mode, derivable in rate mode (policy.py)
    assert (spec.fallback.failure_threshold, spec.fallback.mode, spec.fallback.replicas) == (3, "hold", None)
    source = spec.sources[0]
    assert isinstance(source, AzureQueueSource)
    # A count-mode rule learns nothing from waits: `auto` peeks for no age (docs/azure-queue.md).
    assert (source.weight, source.count_strategy, source.cloud, source.oldest_age) == (
        1.0, "approximate", "public", "off")


def test_full_rule_parses_into_typed_objects() -> None:
    doc = rule(
        minReplicas=2,
        pollingInterval="15s",
        aggregation="max",
        paused=True,
        policy={
            "targetPerReplica": 20, "lookahead": "30s", "throughputPerReplica": 2.5, "drainTime": "2m",
            "scaleUp": {"cooldown": "10s", "policies": [{"type": "Percent", "value": 200, "period": "1m"}]},
            "scaleDown": {"selectPolicy": "Min", "policies": [{"type": "Pods", "value": 2, "period": 30}]},
        },
        fallback={"failureThreshold": 5, "mode": "fixed", "replicas": 4},
        schedules=[{"name": "office", "days": ["Mon", "Fri"], "start": "08:00", "end": "18:30",
                    "timeZone": "Europe/Paris", "minReplicas": 3}],
    )
    spec = parse_queuescaler(doc).spec
    assert spec.min_replicas == 2 and spec.polling_interval == 15.0 and spec.aggregation == "max" and spec.paused
    assert spec.policy.lookahead == 30.0 and spec.policy.throughput_per_replica == 2.5
    assert spec.policy.drain_time == 120.0
    assert spec.policy.scale_up.policies == (StepPolicy("Percent", 200, 60.0),)
    assert spec.policy.scale_down.select_policy == "Min"
    assert spec.fallback.replicas == 4
    (office,) = spec.schedules
    assert office.days == frozenset({0, 4}) and (office.start_minute, office.end_minute) == (480, 1110)


def test_paused_annotation_pauses_the_rule() -> None:
    doc = rule()
    doc["metadata"]["annotations"] = {"queuescale.io/paused": "true"}
    assert parse_queuescaler(doc).paused


def test_examples_parse() -> None:
    import glob

    import yaml

    found = 0
    for path in glob.glob("examples/*.yaml"):
        with open(path) as fh:
            for doc in yaml.safe_load_all(fh):
                if doc and doc.get("kind") == "QueueScaler":
                    assert isinstance(parse_queuescaler(doc), QueueScaler)
                    found += 1
    assert found >= 2


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("spec.minReplicas", -1, "spec.minReplicas: must be >= 0, got -1"),
        ("spec.minReplicas", "2", 'spec.minReplicas: must be an integer, got "2"'),
        ("spec.maxReplicas", 0, "spec.maxReplicas: must be >= 1, got 0"),
        ("spec.maxReplicas", 2.5, "spec.maxReplicas: must be an integer, got 2.5"),
        ("spec.pollingInterval", "0s", 'spec.pollingInterval: must be a duration >= 1s, got "0s"'),
        ("spec.aggregation", "avg", 'spec.aggregation: must be one of sum, max, got "avg"'),
        ("spec.paused", "yes", 'spec.paused: must be true or false, got "yes"'),
        ("spec.scaleTargetRef.name", "Worker_1", 'spec.scaleTargetRef.name: must be a DNS subdomain name, got "Worker_1"'),
        ("spec.scaleTargetRef.kind", "deployment", 'spec.scaleTargetRef.kind: must be a Kind name, got "deployment"'),
        ("spec.policy.targetPerReplica", 0, "spec.policy.targetPerReplica: must be > 0, got 0"),
        ("spec.policy.activationThreshold", -1, "spec.policy.activationThreshold: must be >= 0, got -1"),
        ("spec.policy.tolerance", 1.5, "spec.policy.tolerance: must be <= 1, got 1.5"),
        ("spec.policy.lookahead", "soon", 'spec.policy.lookahead: must be a duration >= 0, got "soon"'),
        ("spec.policy.trendWindow", 0, "spec.policy.trendWindow: must be a duration >= 1s, got 0"),
        ("spec.policy.throughputPerReplica", 0, "spec.policy.throughputPerReplica: must be > 0, got 0"),
        ("spec.policy.drainTime", "0s", 'spec.policy.drainTime: must be a duration >= 1s, got "0s"'),
        ("spec.policy.scaleToZeroDelay", "-1m", 'spec.policy.scaleToZeroDelay: must be a duration >= 0, got "-1m"'),
        ("spec.policy.scaleDown.cooldown", "-5s", 'spec.policy.scaleDown.cooldown: must be a duration >= 0, got "-5s"'),
        ("spec.policy.scaleUp.stabilizationWindow", -3,
         "spec.policy.scaleUp.stabilizationWindow: must be a duration >= 0, got -3"),
        ("spec.policy.scaleUp.selectPolicy", "Avg",
         'spec.policy.scaleUp.selectPolicy: must be one of Max, Min, Disabled, got "Avg"'),
        ("spec.fallback.failureThreshold", 0, "spec.fallback.failureThreshold: must be >= 1, got 0"),
        ("spec.fallback.mode", "drop", 'spec.fallback.mode: must be one of hold, fixed, got "drop"'),
        ("spec.fallback.replicas", 3, 'spec.fallback.replicas: applies only when mode is "fixed"'),
        ("spec.policy.scalUp", {}, "spec.policy.scalUp: unknown field"),
        ("spec.policy.messagesPerReplica", 0, "spec.policy.messagesPerReplica: must be >= 1, got 0"),
        ("spec.policy.serviceTime", 0, "spec.policy.serviceTime: must be a duration >= 1ms, got 0"),
        ("spec.policy", {"targetWaitSeconds": "0.5s", "serviceTime": 1},
         'spec.policy.targetWaitSeconds: must be a duration >= 1s, got "0.5s"'),
        ("spec.policy.scaleDown.delay", "-1s", 'spec.policy.scaleDown.delay: must be a duration >= 0, got "-1s"'),
        ("spec.policy.scaleUp.delay", "1m", "spec.policy.scaleUp.delay: unknown field"),
        ("spec.inFlight", {}, "spec.inFlight.port: is required"),
        ("spec.inFlight", {"port": "In_Flight"},
         'spec.inFlight.port: must be a container port name (lower-case letters, digits and \'-\'), got "In_Flight"'),
        ("spec.inFlight", {"port": "a-very-long-port-name"}, "spec.inFlight.port: must be at most 15 characters"),
        ("spec.inFlight", {"port": "work", "path": "in-flight"},
         'spec.inFlight.path: must be a URL path starting with /, got "in-flight"'),
    ],
)
def test_every_bad_field_names_its_path(path: str, value: object, expected: str) -> None:
    message = one_error(with_path(rule(), path, value))
    assert message.startswith(expected), message


def test_in_flight_names_a_port_defaults_its_path_and_refuses_a_statefulset() -> None:
    spec = parse_queuescaler(rule(inFlight={"port": "in-flight"})).spec
    assert spec.in_flight is not None
    assert (spec.in_flight.port, spec.in_flight.path) == ("in-flight", "/in-flight")
    assert parse_queuescaler(rule()).spec.in_flight is None
    assert one_error(rule(scaleTargetRef={"name": "w", "kind": "StatefulSet"}, inFlight={"port": "work"})) == (
        "spec.inFlight: does not apply to a StatefulSet: it removes its highest ordinals whatever their cost")


def test_wait_objective_needs_a_service_time_and_takes_one_kind_of_it() -> None:
    assert one_error(rule(policy={"targetWaitSeconds": 60})) == (
        "spec.policy.targetWaitSeconds: needs serviceTime or throughputPerReplica: how long a message takes")
    assert one_error(rule(policy={"serviceTime": "2s", "throughputPerReplica": 3})) == (
        "spec.policy.serviceTime: cannot be combined with throughputPerReplica: give one of them")
    policy = parse_queuescaler(rule(policy={"targetWaitSeconds": "2m", "serviceTime": "1.5s",
                                             "messagesPerReplica": 4})).spec.policy
    assert (policy.target_wait, policy.service_time, policy.messages_per_replica) == (120.0, 1.5, 4)


def test_min_above_max_is_reported_on_max() -> None:
    assert one_error(rule(minReplicas=5, maxReplicas=3)) == "spec.maxReplicas: must be >= minReplicas (5), got 3"


def test_step_policy_bounds() -> None:
    errors = errors_of(rule(policy={"scaleUp": {"policies": [{"type": "Nodes", "value": 0, "period": "0s"}]}}))
    assert errors == [
        'spec.policy.scaleUp.policies[0].type: must be one of Pods, Percent, got "Nodes"',
        "spec.policy.scaleUp.policies[0].value: must be >= 1, got 0",
        'spec.policy.scaleUp.policies[0].period: must be a duration >= 1s, got "0s" (write 30, "30s", "5m" or "1h30m")',
    ]


def test_fixed_fallback_needs_replicas_within_max() -> None:
    assert one_error(rule(fallback={"mode": "fixed"})) == 'spec.fallback.replicas: is required when mode is "fixed"'
    assert one_error(rule(fallback={"mode": "fixed", "replicas": 11})) == (
        "spec.fallback.replicas: must be <= maxReplicas (10), got 11"
    )


def test_all_errors_are_reported_at_once() -> None:
    errors = errors_of(rule(minReplicas=-1, maxReplicas=0, policy={"tolerance": 2, "lookahead": "-1s"}))
    assert [e.split(":")[0] for e in errors] == [
        "spec.minReplicas", "spec.maxReplicas", "spec.policy.tolerance", "spec.policy.lookahead",
    ]


def test_missing_required_fields() -> None:
    doc = {"apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler", "metadata": {}, "spec": {}}
    assert errors_of(doc) == [
        "metadata.name: is required",
        "spec.scaleTargetRef.name: is required",
        "spec.scaleTargetRef: is required",
        "spec.maxReplicas: is required",
        "spec.sources: must have at least 1 item",
        "spec.sources: is required",
    ]


def test_wrong_api_version_and_kind() -> None:
    doc = rule()
    doc["apiVersion"], doc["kind"] = "queuescale.io/v1", "QueueScalar"
    assert errors_of(doc) == [
        'apiVersion: must be "queuescale.io/v1alpha1", got "queuescale.io/v1"',
        'kind: must be "QueueScaler", got "QueueScalar"',
    ]


def test_non_object_documents_are_errors_not_tracebacks() -> None:
    assert errors_of("just a string") == ['document: must be a QueueScaler object, got "just a string"']
    assert "spec.sources: must be a list, got an object" in errors_of(rule(sources={"type": "azure-queue"}))
    assert "spec.policy: must be an object, got a list" in errors_of(rule(policy=[]))


def test_unknown_source_kind_lists_the_known_ones() -> None:
    message = one_error(rule(sources=[{"type": "kafka"}]))
    assert message == 'spec.sources[0].type: unknown queue kind "kafka" (known: aws-sqs, azure-queue, rabbitmq, redis-list, sql-table)'


def test_source_weight_must_be_positive() -> None:
    message = one_error(rule(sources=[{**AZURE, "weight": 0}]))
    assert message == "spec.sources[0].weight: must be > 0, got 0"


# ---------------------------------------------------------------------------------------------- schedules


def schedule(**fields: Any) -> dict[str, Any]:
    return {"name": "s", "start": "08:00", "end": "18:00", "minReplicas": 1, **fields}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"days": ["Monday"]}, 'spec.schedules[0].days[0]: must be one of Mon, Tue, Wed, Thu, Fri, Sat, Sun, got "Monday"'),
        ({"start": "8am"}, 'spec.schedules[0].start: must be a time of day "HH:MM" (00:00 to 24:00), got "8am"'),
        ({"end": "25:00"}, 'spec.schedules[0].end: must be a time of day "HH:MM" (00:00 to 24:00), got "25:00"'),
        ({"end": "08:00"}, "spec.schedules[0].end: must differ from start (use 00:00 to 24:00 for a whole day)"),
        ({"timeZone": "Mars/Olympus"}, 'spec.schedules[0].timeZone: must be an IANA time zone such as "Europe/Paris", got "Mars/Olympus"'),
        ({"minReplicas": None}, "spec.schedules[0]: must set minReplicas, maxReplicas or both"),
        ({"minReplicas": 5, "maxReplicas": 2}, "spec.schedules[0].minReplicas: must be <= maxReplicas (2), got 5"),
        ({"minReplicas": 11}, "spec.schedules[0].minReplicas: must be <= spec maxReplicas (10), got 11"),
        ({"name": "Office Hours"}, 'spec.schedules[0].name: must be a lowercase DNS label, got "Office Hours"'),
    ],
)
def test_schedule_errors(fields: dict[str, Any], expected: str) -> None:
    assert one_error(rule(schedules=[schedule(**fields)])) == expected


def test_duplicate_schedule_names() -> None:
    assert one_error(rule(schedules=[schedule(), schedule()])) == 'spec.schedules: has two schedules named "s"'


# ---------------------------------------------------------------------------------------------- azure-queue fields


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"type": "azure-queue", "connectionSecretRef": {"name": "q", "key": "k"}}, "spec.sources[0].queueName: is required"),
        ({**AZURE, "queueName": "ab"}, 'spec.sources[0].queueName: must be 3-63 lowercase letters, digits and single dashes, got "ab"'),
        ({**AZURE, "queueName": "a--b"}, 'spec.sources[0].queueName: must be 3-63 lowercase letters, digits and single dashes, got "a--b"'),
        ({"type": "azure-queue", "queueName": "orders"},
         "spec.sources[0]: must set one of connectionSecretRef, accountKeySecretRef, sasSecretRef or identity"),
        ({**AZURE, "sasSecretRef": {"name": "s", "key": "sas"}},
         "spec.sources[0].sasSecretRef: cannot be combined with connectionSecretRef: set exactly one way to authenticate"),
        ({"type": "azure-queue", "queueName": "orders", "identity": "workload"},
         "spec.sources[0].accountName: is required with identity"),
        ({"type": "azure-queue", "queueName": "orders", "identity": "pod", "accountName": "acme"},
         'spec.sources[0].identity: must be "workload", got "pod"'),
        ({**AZURE, "accountName": "acme"},
         "spec.sources[0].accountName: comes from the connection string when connectionSecretRef is set"),
        ({"type": "azure-queue", "queueName": "orders", "accountName": "Acme!", "identity": "workload"},
         'spec.sources[0].accountName: must be 3-24 lowercase letters and digits, got "Acme!"'),
        ({"type": "azure-queue", "queueName": "orders", "accountName": "acme", "identity": "workload", "cloud": "mars"},
         'spec.sources[0].cloud: must be one of public, china, usgov, got "mars"'),
        ({"type": "azure-queue", "queueName": "orders", "accountName": "acme", "identity": "workload",
          "endpoint": "ftp://x"}, 'spec.sources[0].endpoint: must be an http(s) URL with no query, got "ftp://x"'),
        ({**AZURE, "countStrategy": "exact"},
         'spec.sources[0].countStrategy: must be one of approximate, visible, got "exact"'),
        ({**AZURE, "oldestAge": "bogus"}, 'spec.sources[0].oldestAge: must be one of auto, peek, off, got "bogus"'),
        ({**AZURE, "connectionSecretRef": {"name": "q"}}, "spec.sources[0].connectionSecretRef.key: is required"),
        ({**AZURE, "queue": "x"}, "spec.sources[0].queue: unknown field"),
    ],
)
def test_azure_queue_errors(source: dict[str, Any], expected: str) -> None:
    assert one_error(rule(sources=[source])) == expected


def test_azure_queue_account_key_form() -> None:
    source = {"type": "azure-queue", "queueName": "orders", "accountName": "acme", "cloud": "china",
              "accountKeySecretRef": {"name": "acme", "key": "key"}}
    parsed = parse_queuescaler(rule(sources=[source])).spec.sources[0]
    assert isinstance(parsed, AzureQueueSource)
    assert (parsed.account_name, parsed.cloud, parsed.queue_label) == ("acme", "china", "orders")
    assert parsed.account_key_secret_ref is not None and parsed.account_key_secret_ref.key == "key"


def test_azure_queue_oldest_age_off_counts_only() -> None:
    parsed = parse_queuescaler(rule(sources=[{**AZURE, "oldestAge": "off"}])).spec.sources[0]
    assert isinstance(parsed, AzureQueueSource)
    assert parsed.oldest_age == "off"


def test_azure_queue_peeks_for_an_age_by_default_only_where_the_policy_learns_from_it() -> None:
    def oldest_age(policy: dict[str, object], **source: object) -> str:
        parsed = parse_queuescaler(rule(sources=[{**AZURE, **source}], policy=policy)).spec.sources[0]
        assert isinstance(parsed, AzureQueueSource)
        return parsed.oldest_age

    rate = {"serviceTime": "2s", "targetWaitSeconds": 60}
    assert oldest_age(rate) == "peek"
    assert oldest_age({"throughputPerReplica": 3}) == "peek"
    assert oldest_age({"targetPerReplica": 10}) == "off"
    assert oldest_age({**rate, "targetPerReplica": 10}) == "off"  # an explicit target: KEDA's meaning, no learning
    assert oldest_age({"targetPerReplica": 10}, oldestAge="peek") == "peek"  # for the gauge alone
    assert oldest_age(rate, oldestAge="off") == "off"


def test_field_error_str() -> None:
    assert str(FieldError("spec.x", "is required")) == "spec.x: is required"


def test_one_of_two_fields_names_both_when_neither_is_set_and_refuses_the_second_when_both_are() -> None:
    errors: list[FieldError] = []
    Fields({}, "spec.sources[0]", errors).one_of(("table", None), ("query", None), "one or the other")
    Fields({}, "spec.sources[1]", errors).one_of(("table", "t"), ("query", "q"), "one or the other")
    Fields({}, "spec.sources[2]", errors).one_of(("table", "t"), ("query", None), "one or the other")
    assert [str(e) for e in errors] == [
        "spec.sources[0]: must set table or query",
        "spec.sources[1].query: cannot be combined with table: one or the other",
    ]


def test_a_field_that_applies_only_with_another_is_refused_without_it() -> None:
    errors: list[FieldError] = []
    f = Fields({"consumerGroup": "g", "streamCount": None}, "spec.sources[0]", errors)
    f.only_with(("consumerGroup", "streamCount"), False, "streamName")
    f.only_with(("consumerGroup",), True, "streamName")
    assert [str(e) for e in errors] == ["spec.sources[0].consumerGroup: applies only with streamName"]
