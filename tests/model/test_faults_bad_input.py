"""Bad input, fuzzed: random QueueScaler specs (hypothesis, a bounded number) go through the API server to one
running operator. Every spec the API server accepts either works or gets Ready=False with a reason; the operator
never crashes, and a good rule next to them keeps scaling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as kube_client

from tests.fakekube.server import FakeKube
from tests.fakekube.store import ApiError
from tests.faults import FakeQueueService, start_rule
from tests.operator_harness import NS, Operator, condition, deployment, replicas, wait_for


def _base() -> dict[str, Any]:
    return {
        "scaleTargetRef": {"name": "fuzz-target"}, "minReplicas": 0, "maxReplicas": 10, "pollingInterval": "1s",
        "sources": [{"type": "azure-queue", "queueName": "good",
                     "connectionSecretRef": {"name": "good-conn", "key": "connection"}}],
        "policy": {"targetPerReplica": 10},
    }


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(spec: dict[str, Any]) -> None:
        node: Any = spec
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        node[last] = value
    apply.__name__ = f"{path}={value!r}"
    return apply


# Mutations of a good spec: some the API server rejects (schema, CEL), most it accepts and only the operator can
# judge (time zones, how to authenticate, secrets, queue names, targets that do not exist).
MUTATIONS = [
    _set("sources.0.queueName", "Orders"), _set("sources.0.queueName", "bad--name"),
    _set("sources.0.queueName", "x" * 70), _set("sources.0.queueName", "missing-queue"),
    _set("sources.0.accountName", "acct"), _set("sources.0.endpoint", "http://127.0.0.1:1/acct"),
    _set("sources.0.sasSecretRef", {"name": "good-conn", "key": "sas"}),
    _set("sources.0.connectionSecretRef", {"name": "missing", "key": "connection"}),
    _set("sources.0.connectionSecretRef", {"name": "good-conn", "key": "nokey"}),
    _set("sources.0.identity", "workload"), _set("sources.0.cloud", "china"),
    _set("sources.0.countStrategy", "visible"), _set("sources.0.weight", 0),
    _set("minReplicas", 5), _set("maxReplicas", 2), _set("pollingInterval", "0s"), _set("pollingInterval", "1h"),
    _set("policy.targetPerReplica", 0), _set("policy.targetPerReplica", 0.5), _set("policy.tolerance", 5),
    _set("policy.scaleToZeroDelay", "-1s"), _set("scaleTargetRef.kind", "Pod"), _set("scaleTargetRef.name", "nope"),
    _set("scaleTargetRef.apiVersion", "example.com/v1"), _set("paused", True),
    _set("schedules", [{"name": "office", "start": "08:00", "end": "18:00", "minReplicas": 1,
                        "timeZone": "Mars/Olympus"}]),
    _set("schedules", [{"name": "night", "start": "22:00", "end": "06:00", "maxReplicas": 1}]),
]
# Most mutations the API server accepts, so that most examples reach the operator.
API_REJECTS = ("Orders", "bad--name", "xxx", "acct", "http://", "sasSecretRef", "identity", "cloud", "weight=0",
               "targetPerReplica=0,", "tolerance", "'-1s'")
ACCEPTED = [m for m in MUTATIONS if not any(word in m.__name__ for word in API_REJECTS)]
SPECS = st.one_of(st.lists(st.sampled_from(ACCEPTED), min_size=1, max_size=3, unique=True),
                  st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=2, unique=True))


def test_fuzzed_rules_never_crash_the_operator_and_each_gets_a_clear_condition(
    kube: FakeKube, api: kube_client.ApiClient, operators: Callable[..., Operator], queues: FakeQueueService,
) -> None:
    start_rule(api, queues, "good", count=30, replicas_now=0)
    deployment(api, "fuzz-target", 1)
    accepted: list[str] = []
    rejected: list[int] = []

    @settings(max_examples=40, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(mutations=SPECS)
    def create(mutations: list[Callable[[dict[str, Any]], None]]) -> None:
        spec = _base()
        for mutate in mutations:
            mutate(spec)
        name = f"fuzz-{len(accepted)}-{abs(hash(repr(spec))) % 100000}"
        body = {"apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler",
                "metadata": {"name": name, "namespace": NS}, "spec": spec}
        try:
            kube.create(body)
        except ApiError as error:
            rejected.append(error.code)  # the API server's own validation said no
            return
        accepted.append(name)

    create()
    assert set(rejected) <= {400, 422}, rejected
    assert len(accepted) >= 5, f"too few specs got past the API server to test the operator: {len(accepted)}"
    print(f"{len(accepted)} fuzzed rules accepted by the API server, {len(rejected)} rejected")
    operator = operators()
    queues.set(counts={"good": 40})
    wait_for("the good rule to keep scaling", lambda: replicas(kube, "good") == 4, timeout=20)

    def every_rule_has_ready() -> list[str]:
        return [n for n in accepted if condition(kube, n, "Ready").get("status") not in ("True", "False")]

    wait_for("a Ready condition on every accepted rule", lambda: not every_rule_has_ready(), timeout=30,
             describe=lambda: f"still without Ready: {every_rule_has_ready()}")
    not_ready = 0
    for name in accepted:
        ready = condition(kube, name, "Ready")
        assert ready["reason"] and ready["message"], ready
        if ready["status"] == "False":
            assert ready["reason"][0].isupper() and " " not in ready["reason"], ready
            not_ready += 1
    assert not_ready >= 1, "no fuzzed rule was bad in a way only the operator can tell"
    assert operator.process is not None and operator.process.poll() is None, "the operator died"
    log = operator.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "the loop failed" not in log
