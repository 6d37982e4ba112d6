"""The Prometheus registry and collectors. No global registry: the operator builds one and passes it down."""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from controller import __version__

POLL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """Every series the operator exports, on a registry of its own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.queue_length = Gauge(
            "queuescale_queue_length", "Message count last read from a rule's queue",
            ["namespace", "rule", "source", "queue"], registry=r,
        )
        self.rule_count = Gauge(
            "queuescale_rule_count", "Aggregated (weighted sum or max) count a rule decided on",
            ["namespace", "rule"], registry=r,
        )
        self.desired_replicas = Gauge(
            "queuescale_desired_replicas", "Replicas the policy wants", ["namespace", "rule"], registry=r,
        )
        self.current_replicas = Gauge(
            "queuescale_current_replicas", "Replicas the target has after the last tick", ["namespace", "rule"],
            registry=r,
        )
        self.scale_operations = Counter(
            "queuescale_scale_operations", "Scale writes by direction (up, down) and result (success, error)",
            ["namespace", "rule", "direction", "result"], registry=r,
        )
        self.poll_errors = Counter(
            "queuescale_poll_errors", "Failed polls by the queue service's error code",
            ["namespace", "rule", "reason"], registry=r,
        )
        self.poll_duration = Histogram(
            "queuescale_poll_duration_seconds", "Time to poll all of a rule's queues", ["type"],
            buckets=POLL_BUCKETS, registry=r,
        )
        self.tick_lateness = Histogram(
            "queuescale_tick_lateness_seconds", "How late a rule's tick started after its scheduled time",
            buckets=LATENESS_BUCKETS, registry=r,
        )
        self.rules = RuleStates()
        r.register(self.rules)
        self.leader = Gauge("queuescale_leader", "1 while this replica is the leader (or runs alone)", registry=r)
        self.api_errors = Counter(
            "queuescale_kubernetes_api_errors", "Failed Kubernetes API calls by operation and HTTP status",
            ["operation", "status"], registry=r,
        )
        self.build_info = Gauge(
            "queuescale_build_info", "Build information (always 1)", ["version", "python"], registry=r,
        )
        self.build_info.labels(version=__version__, python=platform.python_version()).set(1)

    def forget_rule(self, namespace: str, rule: str) -> None:
        """Drop every series of a deleted rule, so dashboards do not show ghosts."""
        for family in (self.queue_length, self.rule_count, self.desired_replicas, self.current_replicas,
                       self.scale_operations, self.poll_errors):
            for labels in list(family._metrics):  # the client offers no remove-by-prefix
                values = dict(zip(family._labelnames, labels, strict=True))
                if values.get("namespace") == namespace and values.get("rule") == rule:
                    family.remove(*labels)


class RuleStates(Collector):
    """`queuescale_rules{state}`, counted when scraped: keeping it current on every status write would walk every
    rule each time (quadratic work at 10,000 rules)."""

    name = "queuescale_rules"
    labelnames = ("state",)

    def __init__(self) -> None:
        self.count: Callable[[], Mapping[str, int]] = dict

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            self.name, "Rules known to this operator by state (ready, not_ready, invalid, paused)",
            labels=list(self.labelnames),
        )
        for state, rules in self.count().items():
            family.add_metric([state], rules)
        yield family
