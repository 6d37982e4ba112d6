"""The operator's options: flags of `queuescale run`."""

from __future__ import annotations

from dataclasses import dataclass

from controller.model.secrets import SecretAccess

# Seconds over which rules started together (the first list, a new leader) begin polling, however many they are.
# A first tick asks the API server for nothing any more: targets come from the watch (whose first list the ticks
# wait for), a status the previous leader wrote is not written again, and the writes that are due go through the
# client's token bucket (--kube-qps). So 10,000 first ticks within 5 s cost CPU (2,000 ticks/s, some 0.6 of a
# core here, bounded by --max-concurrent-ticks), not a burst of requests; spreading them over 100 s, as before,
# kept every rule from scaling for that long after a failover. 5 s rather than a whole 10 s interval: a process
# that starts cold (a restart) first spends some 5 s at 10,000 rules importing, listing the rules and targets and
# parsing the rules, and every first tick is to be within 15 s of its start.
MAX_SPREAD = 5.0


@dataclass
class OperatorOptions:
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: tuple[str, ...] = ()
    selector: str | None = None
    leader_elect: bool = False
    lease_namespace: str = "queuescale-system"
    lease_name: str = "queuescale-operator"
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    bind_address: str = "0.0.0.0"
    metrics_port: int = 8080
    health_port: int = 8081
    status_interval: float = 30.0
    # A status whose only change is lastPollTime is written this often: proof of life without a write per rule
    # per status_interval (10,000 rules would make 333 writes/s for nothing else).
    status_heartbeat: float = 300.0
    # Count-only and heartbeat writes, over all rules, average at most this many a second: with more rules than
    # status_interval x status_rate, each rule's counts are written less often (10,000 rules at 50/s: every
    # 200 s). Changes of conditions, replicas or decisions are written at once whatever the rate.
    status_rate: float = 50.0
    secret_ttl: float = 30.0
    # "annotated": a Secret is used only for the rules its queuescale.io/allowed-rules annotation names;
    # "namespace": for any rule of its namespace (see controller/kube/secrets.py).
    secret_access: SecretAccess = "annotated"
    # How long a target's last known scale is trusted by ticks that change nothing (see Reconciler): reading every
    # target every tick would be 1,000 GETs/s at 10,000 rules, for a count that only we change, almost always.
    # Not for watched targets (Deployments, StatefulSets: controller/kube/workloads.py), read every tick for free.
    target_refresh: float = 60.0
    status_writers: int = 16  # status writes in flight at once
    # The client-side limit on API requests (controller/kube/ratelimit.py): a token bucket of `kube_burst`
    # refilled at `kube_qps` a second, over every request but watches, leader election and scale writes (which
    # take their token without waiting). Above the status writes' own average (status_rate) plus the events'
    # budget (20/s), so that it bounds bursts, not the steady state. 0: no limit.
    kube_qps: float = 100.0
    kube_burst: int = 200
    # Ticks in progress at once, over all rules (see Reconciler.run): an overloaded process starts ticks late
    # instead of starting them all and timing out each one. At 0.5 ms of CPU a tick, 500 ticks take 0.25 s.
    max_concurrent_ticks: int = 500
    shutdown_grace: float = 10.0
    watch_timeout: int = 300
    http_timeout: float = 10.0
