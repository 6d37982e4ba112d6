"""The start-up time the operator measures for a StatefulSet target (controller/kube/workloads.py): `queuescale run`
in a subprocess, a real Azurite, and the fake API server's StatefulSet controller (tests/fakekube/server.py,
`sync_stateful_set`, after upstream's), whose OrderedReady pods start one after the other.

What it shows: a scale-up of k pods of an OrderedReady StatefulSet measures k start-ups, since the count asked is
ready only when the last of them is; a Parallel one measures one. The policy takes the measurement for the start-up
of any later scale-up (docs/operations.md, *Watching the targets*).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config

from tests.azurite import Azurite
from tests.fakekube.server import FakeKube
from tests.operator_harness import (
    NS,
    Operator,
    cluster_with_pods,
    make_queue,
    queue_name,
    rule,
    secret,
    status,
    wait_for,
)

START = 1.5  # seconds a new pod takes to be ready


@pytest.fixture
def cluster() -> Iterator[FakeKube]:
    yield from cluster_with_pods()


def stateful_set(name: str, policy: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "serviceName": name, "podManagementPolicy": policy,
                     "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "worker", "image": "worker:1"}]}}}}


@pytest.mark.parametrize(("policy", "start_ups"), [("OrderedReady", 3), ("Parallel", 1)])
def test_a_statefulset_scale_up_measures_the_start_ups_its_policy_puts_one_after_the_other(
    cluster: FakeKube, azurite: Azurite, tmp_path: Path, policy: str, start_ups: int
) -> None:
    api = config.new_client_from_config(config_file=str(cluster.write_kubeconfig(tmp_path / "admin")))
    name = policy.lower()
    cluster.set_ready_delay(START)
    cluster.create(stateful_set(name, policy))
    wait_for("one ready pod", lambda: (cluster.get("apps/v1", "StatefulSet", name, NS).get("status") or {}).get(
        "readyReplicas") == 1)
    queue = queue_name()
    make_queue(azurite, queue, 35)  # 10 a replica: 4, three pods more
    secret(api, f"{name}-queue", {"connection": azurite.connection_string}, allowed_rules=name)
    rule(api, name, queue, f"{name}-queue", minReplicas=1,
         scaleTargetRef={"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name})
    operator = Operator(cluster.write_kubeconfig(tmp_path / "operator"), tmp_path / "operator.log").start()
    try:
        measured = wait_for("status.startupSeconds", lambda: status(cluster, name).get("startupSeconds"),
                            timeout=30, describe=lambda: str(status(cluster, name)))
        assert cluster.get("apps/v1", "StatefulSet", name, NS)["spec"]["replicas"] == 4
        # The fake makes a pod ready START s after it is made; the watch and the ticks add little (the bound
        # leaves room for a loaded machine).
        assert start_ups * START <= measured <= start_ups * START + 1.5, measured
    finally:
        operator.stop()
