"""The Prometheus registry and collectors. No global registry: the operator builds one and passes it down."""

from __future__ import annotations

import contextlib
import gc
import platform
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from controller import __version__

Family = TypeVar("Family", bound=MetricWrapperBase)

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
        self.oldest_age = Gauge(
            "queuescale_oldest_message_age_seconds", "Seconds the oldest waiting message of a rule's queue had "
            "waited when last read (queue kinds that say so)", ["namespace", "rule", "source", "queue"], registry=r,
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
        self.target_startup = Gauge(
            "queuescale_target_startup_seconds", "Seconds from a scale-up the operator asked of a rule's target to "
            "its readyReplicas reaching the count asked, the lower median of the last five measured (watched kinds "
            "only)", ["namespace", "rule"], registry=r,
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
        self.gc = GcPauses()
        r.register(self.gc)
        self.leader = Gauge("queuescale_leader", "1 while this replica is the leader (or runs alone)", registry=r)
        self.leading_since = Gauge(
            "queuescale_leading_since_timestamp_seconds", "When this replica began leading (or started, when it runs "
            "alone), in seconds since the epoch", registry=r)
        self.rules_ticked = Gauge(
            "queuescale_rules_ticked", "Rules that have ticked (polled, decided, scaled if needed) at least once "
            "since this replica began leading", registry=r)
        self.first_ticks = Gauge(
            "queuescale_first_ticks_seconds", "Seconds from when this replica began leading until every rule it ran "
            "had ticked once (NaN until then)", registry=r)
        self.first_ticks.set(float("nan"))
        self.sync_errors = Counter(
            "queuescale_sync_errors", "Rules in a list whose handling failed unexpectedly (logged with the rule; the "
            "others were handled)", registry=r)
        self.api_errors = Counter(
            "queuescale_kubernetes_api_errors", "Failed Kubernetes API calls by operation and HTTP status",
            ["operation", "status"], registry=r,
        )
        self.watch_errors = Counter(
            "queuescale_watch_errors", "Failures of a list or watch the operator recovered from (by watching again "
            "or relisting after a back-off), by resource and reason", ["resource", "reason"], registry=r,
        )
        self.events = Counter(
            "queuescale_events", "Kubernetes Events by outcome: sent, limited (per rule), over_budget (overall), "
            "failed", ["result"], registry=r,
        )
        self.build_info = Gauge(
            "queuescale_build_info", "Build information (always 1)", ["version", "python"], registry=r,
        )
        self.build_info.labels(version=__version__, python=platform.python_version()).set(1)
        # (namespace, rule) -> (the family's id, other label values) -> (family, series). The families live as long
        # as this object, so their ids are stable keys (the client offers no public accessor for a family's name).
        self._rule_series: dict[tuple[str, str], dict[tuple[object, ...], tuple[MetricWrapperBase, Any]]] = {}

    def of_rule(self, family: Family, namespace: str, rule: str, *rest: str) -> Family:
        """The series of a per-rule family for these label values (namespace, rule, then the family's others in
        order), remembered under the rule so that forget_rule finds its series at once."""
        series = self._rule_series.setdefault((namespace, rule), {})
        key = (id(family), *rest)
        known = series.get(key)
        if known is None:
            known = series[key] = (family, family.labels(namespace, rule, *rest))
        child: Family = known[1]
        return child

    def forget_rule(self, namespace: str, rule: str) -> None:
        """Drop every series of a deleted rule, so dashboards do not show ghosts. (Found by rule, not by walking
        every series: a namespace of 10,000 rules deleted at once would walk 10,000 x 40,000.)"""
        for (_family_id, *rest), (family, _child) in self._rule_series.pop((namespace, rule), {}).items():
            with contextlib.suppress(KeyError):
                family.remove(namespace, rule, *rest)

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


class GcPauses(Collector):
    """`queuescale_gc_pause_seconds_total{generation}`: time spent in Python's cyclic garbage collector, which
    stops the event loop while it runs. Summed in plain floats by a `gc.callbacks` hook and read when scraped
    (the hook may run inside any allocation, even one made while a metric's lock is held, so it takes no lock)."""

    name = "queuescale_gc_pause_seconds"
    labelnames = ("generation",)

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def install(self) -> None:
        if self._hook not in gc.callbacks:
            gc.callbacks.append(self._hook)

    def uninstall(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._hook)

    def _hook(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self._started

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            self.name, "Time spent in the cyclic garbage collector by generation (2: full collections)",
            labels=list(self.labelnames),
        )
        for generation, seconds in enumerate(self.seconds):
            family.add_metric([str(generation)], seconds)
        yield family
