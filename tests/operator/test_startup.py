"""Start-up and failover at scale: every rule ticks within its first interval (at most MAX_SPREAD), reading its
target from the watch's first list, not /scale; the first statuses go out at the client's --kube-qps, not all at
once; a new operator whose rules carry true statuses does not write them again.

`queuescale run` in a subprocess against the fake API server, with the capacity benchmark's fast queue server (a
process answering Get Queue Metadata with a fixed count, as Azure does): 300 rules, whose polls Azurite would be
the bottleneck of.
"""

from __future__ import annotations

import base64
import copy
import logging
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from benchmarks.capacity import DEV_KEY, _deployment, _rule, queue_server
from controller.kube.api import KubeApi, load_configuration
from controller.kube.timestamps import parse_rfc3339
from controller.net.http import polling_client
from controller.operator.options import MAX_SPREAD, OperatorOptions
from controller.operator.runner import Operator
from tests.fakekube.server import FakeKube
from tests.operator_harness import ROOT, RULES_API, wait_for
from tests.operator_harness import Operator as OperatorProcess

RULES = 300
NS = "bench"  # the benchmark's rules and deployments live there
QPS, BURST = 30, 30
INTERVAL = 2.0  # seconds: the rules' polling interval, so the start spread (min(interval, MAX_SPREAD)) is 2 s


@pytest.fixture
def queues(tmp_path: Path) -> Iterator[str]:
    """The capacity benchmark's queue server: every queue holds 5 messages (one replica at 10 a replica)."""
    with queue_server(tmp_path) as url:
        yield url


@pytest.fixture
def many_rules(fake_kube: FakeKube, queues: str) -> FakeKube:
    """RULES rules, each on a Deployment of its own at 1 replica, polling every INTERVAL s a queue of 5."""
    fake_kube.create(yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text()))
    fake_kube.ensure_namespace(NS)
    connection = (f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={DEV_KEY};"
                  f"QueueEndpoint={queues}/devstoreaccount1")
    fake_kube.create({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "queue", "namespace": NS,
                                   "annotations": {"queuescale.io/allowed-rules": "*"}},
                      "data": {"connection": base64.b64encode(connection.encode()).decode()}})
    for i in range(RULES):
        fake_kube.create(_deployment(i))
        rule = _rule(i, queues)
        rule["spec"]["pollingInterval"] = f"{INTERVAL:g}s"
        fake_kube.create(rule)
    return fake_kube


@pytest.fixture
def operators(kubeconfig: Path, tmp_path: Path) -> Iterator[Callable[..., OperatorProcess]]:
    started: list[OperatorProcess] = []

    def start() -> OperatorProcess:
        operator = OperatorProcess(kubeconfig, tmp_path / f"operator-{len(started)}.log", "--kube-qps", str(QPS),
                            "--kube-burst", str(BURST), "--status-interval", "30s").start()
        started.append(operator)
        return operator

    try:
        yield start
    finally:
        for operator in started:
            operator.stop(signal.SIGKILL)


def gauge(operator: OperatorProcess, name: str) -> float | None:
    match = re.search(rf"^{name} (\S+)$", operator.metrics(), re.MULTILINE)
    return float(match.group(1)) if match else None


def operator_requests(fake: FakeKube, since: float = 0.0) -> list[Any]:
    with fake.store.lock:
        return [r for r in fake.requests if r.user_agent.startswith("queuescale/") and r.at >= since]


def status_writes(fake: FakeKube, since: float = 0.0) -> list[Any]:
    return [r for r in operator_requests(fake, since)
            if r.method == "PATCH" and r.path.endswith("/status") and "/queuescalers/" in r.path]


def written(fake: FakeKube) -> int:
    return sum(1 for obj in fake.list_objects(RULES_API, "QueueScaler", NS) if obj.get("status"))


def test_every_first_tick_within_the_spread_from_the_watch_with_statuses_at_the_client_limit(
    many_rules: FakeKube, operators: Callable[..., OperatorProcess],
) -> None:
    """300 rules with no status yet: every rule ticks within its first interval (the spread: min(interval,
    MAX_SPREAD)), none reads its Deployment's /scale (the first ticks wait for the Deployments' first list, as
    a controller-runtime cache does before its controllers start), and the 300 first statuses go out no faster
    than --kube-qps/--kube-burst allow: a token bucket as client-go's flowcontrol.NewTokenBucketRateLimiter
    (k8s.io/client-go/util/flowcontrol/throttle.go), so that the ~150 writes a second the rules would make
    otherwise do not reach the API server at once."""
    fake = many_rules
    started = time.monotonic()
    operator = operators()
    wait_for("every rule's first tick", lambda: gauge(operator, "queuescale_rules_ticked") == RULES, timeout=60,
             describe=lambda: str(gauge(operator, "queuescale_rules_ticked")))
    first_ticks = wait_for("the first-ticks figure", lambda: gauge(operator, "queuescale_first_ticks_seconds"))
    # The spread plus start-up (the rule list) and a margin for a shared machine; before, N / 100 s and more.
    assert first_ticks <= min(INTERVAL, MAX_SPREAD) + 5.0, first_ticks
    wait_for("every first status", lambda: written(fake) == RULES, timeout=60, describe=lambda: str(written(fake)))
    finished = time.monotonic()

    requests = operator_requests(fake, started)
    assert not [r for r in requests if r.path.endswith("/scale") and r.method == "GET"], \
        "a first tick read /scale instead of the watch"
    writes = sorted(r.at for r in status_writes(fake, started))
    assert len(writes) >= RULES
    # In any second, at most the burst plus a second's refill: a request counted when answered, so allow a
    # request's latency at each end.
    busiest = max(sum(1 for t in writes if start <= t < start + 1.0) for start in writes)
    assert busiest <= BURST + QPS + 2, busiest
    # ...and so the 300 statuses take at least (300 - burst) / qps seconds, while the ticks took ~2 s.
    assert finished - started >= (RULES - BURST) / QPS * 0.9
    assert gauge(operator, "queuescale_first_ticks_seconds") == first_ticks  # measured once per leadership


def test_a_restarted_operator_does_not_rewrite_true_statuses(
    many_rules: FakeKube, operators: Callable[..., OperatorProcess],
) -> None:
    """A new operator (a restart, or a new leader) whose rules carry the statuses the last one wrote, still true:
    its first ticks see what the statuses say and write nothing (their last write is taken from lastPollTime,
    well within the heartbeat), where before each wrote its status again at once: 10,000 writes a failover."""
    fake = many_rules
    first = operators()
    wait_for("every first status", lambda: written(fake) == RULES, timeout=90, describe=lambda: str(written(fake)))
    first.stop()
    restarted = time.monotonic()
    second = operators()
    wait_for("every rule's first tick", lambda: gauge(second, "queuescale_rules_ticked") == RULES, timeout=60)
    time.sleep(2 * INTERVAL)  # a second tick of every rule too
    again = status_writes(fake, restarted)
    assert not again, f"{len(again)} statuses written again, e.g. {again[:3]}"
    assert not [r for r in operator_requests(fake, restarted) if r.path.endswith("/scale")]
    first_ticks = gauge(second, "queuescale_first_ticks_seconds")
    assert first_ticks is not None and first_ticks <= min(INTERVAL, MAX_SPREAD) + 5.0, first_ticks
    assert httpx.get(f"http://127.0.0.1:{second.health_port}/readyz", timeout=5).status_code == 200


# ---------------------------------------------------------------------------------------------- one bad object


async def test_one_object_that_fails_unexpectedly_does_not_hold_up_the_scope_relist(
    fake_kube: FakeKube, kubeconfig: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A relist hands every rule of the scope to Operator.sync at once. An object whose handling raises something
    unexpected (here annotations that are not a map, which no real API server would serve: a stand-in for any
    bug) is logged with its key and counted; the rules after it are still handled, and it is not deleted."""
    api = KubeApi(await load_configuration(str(kubeconfig)))
    http = polling_client(timeout=5.0)
    # Not leading (leader election on, no elector): sync only, no ticks; a scope of its own, so not "ready".
    operator = Operator(api, http, OperatorOptions(leader_elect=True, namespaces=("elsewhere",)))
    try:
        rules = [_rule(i, "http://127.0.0.1:9") for i in range(3)]
        for i, rule in enumerate(rules):
            rule["metadata"].update(uid=f"uid-{i}", generation=1)
        await operator.sync(NS, rules)
        assert sorted(operator.rules) == [f"{NS}/r0", f"{NS}/r1", f"{NS}/r2"]

        broken = copy.deepcopy(rules[1])
        broken["metadata"].update(generation=2, annotations="not a map")
        changed = copy.deepcopy(rules[2])
        changed["metadata"]["generation"] = 2
        changed["spec"]["maxReplicas"] = 7
        with caplog.at_level(logging.ERROR, logger="controller.operator.runner"):
            await operator.sync(NS, [rules[0], broken, changed])
        assert sorted(operator.rules) == [f"{NS}/r0", f"{NS}/r1", f"{NS}/r2"]  # r1 not deleted
        state = operator.rules[f"{NS}/r2"]
        assert state.rule is not None and state.rule.spec.max_replicas == 7  # handled after the broken one
        assert NS in operator.synced_scopes
        assert [r.getMessage() for r in caplog.records] == [
            f"rule {NS}/r1: handling it in the list failed; going on with the others"]
        assert operator.metrics.registry.get_sample_value("queuescale_sync_errors_total") == 1
    finally:
        await operator.shutdown()
        await http.aclose()
        await api.close()


async def test_a_standby_keeps_the_leaders_latest_status_as_its_last_write(fake_kube: FakeKube,
                                                                           kubeconfig: Path) -> None:
    """A standby (leader election, not leading) sees the leader's status writes as MODIFIED events of an unchanged
    rule. It keeps the latest as its own last write, as of its lastPollTime, so when it takes over it neither
    rewrites a true status nor starts from the memory (cooldowns) it listed when it started."""
    api = KubeApi(await load_configuration(str(kubeconfig)))
    http = polling_client(timeout=5.0)
    operator = Operator(api, http, OperatorOptions(leader_elect=True, namespaces=("elsewhere",)))
    try:
        rule = _rule(0, "http://127.0.0.1:9")
        rule["metadata"].update(uid="uid-0", generation=1)
        await operator.sync(NS, [rule])
        state = operator.rules[f"{NS}/r0"]
        assert state.last_status is None and state.last_write == 0.0
        written = copy.deepcopy(rule)
        written["status"] = {"lastPollTime": "2026-11-24T09:00:00Z", "memory": {"scaleEvents": [[1.0, 1, 3]]}}
        await operator.upsert(written)
        assert state.last_status == written["status"]
        assert state.last_write == parse_rfc3339("2026-11-24T09:00:00Z")
        assert operator._stored_memory(state).scale_events[0].to_replicas == 3
    finally:
        await operator.shutdown()
        await http.aclose()
        await api.close()
