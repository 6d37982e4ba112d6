"""The start-up time the operator measures (controller/kube/workloads.py), through a Deployment's rollout: `queuescale
run` in a subprocess, a real Azurite, the fake API server's Deployment controller (tests/fakekube/deployments.py,
after upstream's) and the real kubectl driving the rollout.

A rollout paused at its first step holds the surge pod: 5 ready for a spec of 4. A scale-up to 5 is then met
at once, though a pod takes 3 s to start; it must not be measured as a start-up of a fraction of a second. Once the
rollout is complete, the next scale-up is measured as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config

from tests.azurite import Azurite
from tests.fakekube.resources import Obj
from tests.fakekube.server import FakeKube
from tests.operator_harness import (
    NS,
    Operator,
    cluster_with_pods,
    kubectl_in,
    make_queue,
    queue_name,
    replica_sets,
    replicas,
    rule,
    secret,
    start_rollout,
    status,
    wait_for,
)

START = 3.0  # seconds a new pod takes to be ready


@pytest.fixture
def cluster() -> Iterator[FakeKube]:
    yield from cluster_with_pods()


def counts(cluster: FakeKube, name: str) -> dict[str, Any]:
    """The Deployment's status counts, as the operator's watch sees them."""
    found = cluster.get("apps/v1", "Deployment", name, NS).get("status") or {}
    return {k: found.get(k, 0) for k in ("replicas", "updatedReplicas", "readyReplicas")}


def test_a_scale_up_met_by_a_paused_rollouts_surge_pods_is_not_a_start_up(
    cluster: FakeKube, azurite: Azurite, tmp_path: Path
) -> None:
    api = config.new_client_from_config(config_file=str(cluster.write_kubeconfig(tmp_path / "admin")))
    admin = cluster.write_kubeconfig(tmp_path / "kubectl")
    queue = queue_name()
    messages = make_queue(azurite, queue, 0)
    # The rollout's first pods take time enough to pause before they are ready.
    start_rollout(cluster, api, admin, "renders", 2 * START)

    def sets() -> list[Obj]:
        return replica_sets(cluster)

    # New 2 and old 3. Paused there (before the new pods are ready, 6 s), the new ReplicaSet is not saturated (2 of
    # 4), so nothing more moves: once its pods are ready, 5 ready for a spec of 4.
    kubectl_in(admin, "rollout", "pause", "deployment/renders")
    cluster.set_ready_delay(START)
    wait_for("5 ready for 4", lambda: counts(cluster, "renders") == {
        "replicas": 5, "updatedReplicas": 2, "readyReplicas": 5}, timeout=20,
        describe=lambda: f"{counts(cluster, 'renders')} {[(rs['spec'], rs['status']) for rs in sets()]}")

    for i in range(45):  # 10 a replica: 5
        messages.send_message(f"m{i}")
    secret(api, "renders-queue", {"connection": azurite.connection_string}, allowed_rules="renders")
    rule(api, "renders", queue, "renders-queue", minReplicas=4)
    operator = Operator(cluster.write_kubeconfig(tmp_path / "operator"), tmp_path / "operator.log").start()
    try:
        wait_for("the scale-up to 5", lambda: replicas(cluster, "renders") == 5, timeout=30)
        wait_for("the rule to see 5 ready", lambda: status(cluster, "renders").get("readyReplicas") == 5)
        # Met by pods that were there before the ask. Before, this measured 0.0 s, and the policy took it for the
        # start-up of every later scale-up.
        assert status(cluster, "renders").get("startupSeconds") is None

        kubectl_in(admin, "rollout", "resume", "deployment/renders")
        kubectl_in(admin, "rollout", "status", "deployment/renders", "--timeout=30s")
        wait_for("the rollout complete", lambda: (
            c := counts(cluster, "renders"))["replicas"] == c["updatedReplicas"] == c["readyReplicas"] == 5)
        for i in range(25):  # 70 in all: 7
            messages.send_message(f"n{i}")
        wait_for("the scale-up to 7", lambda: replicas(cluster, "renders") == 7, timeout=30)
        measured = wait_for("status.startupSeconds", lambda: status(cluster, "renders").get("startupSeconds"),
                            timeout=15, describe=lambda: str(status(cluster, "renders")))
        # The fake makes a pod ready 3 s after it is made; the watch adds little (the bound leaves room for a
        # loaded machine).
        assert START <= measured <= START + 1.5, measured
    finally:
        operator.stop()
