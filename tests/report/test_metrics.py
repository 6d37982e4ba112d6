"""controller/report/metrics.py: per-rule series, and forgetting a deleted rule's series without touching the others."""

from __future__ import annotations

import gc

from controller.report.metrics import Metrics


def test_a_deleted_rules_series_go_and_the_others_stay() -> None:
    metrics = Metrics()
    for rule in ("orders", "invoices"):
        metrics.of_rule(metrics.queue_length, "shop", rule, "azure-queue", f"{rule}-q").set(7)
        metrics.of_rule(metrics.desired_replicas, "shop", rule).set(2)
        metrics.of_rule(metrics.scale_operations, "shop", rule, "up", "success").inc()
    metrics.of_rule(metrics.desired_replicas, "other", "orders").set(3)  # same name, another namespace
    metrics.forget_rule("shop", "orders")
    value = metrics.registry.get_sample_value
    assert value("queuescale_queue_length", {"namespace": "shop", "rule": "orders", "source": "azure-queue",
                                             "queue": "orders-q"}) is None
    assert value("queuescale_desired_replicas", {"namespace": "shop", "rule": "orders"}) is None
    assert value("queuescale_scale_operations_total", {"namespace": "shop", "rule": "orders", "direction": "up",
                                                       "result": "success"}) is None
    assert value("queuescale_desired_replicas", {"namespace": "shop", "rule": "invoices"}) == 2
    assert value("queuescale_desired_replicas", {"namespace": "other", "rule": "orders"}) == 3
    assert value("queuescale_queue_length", {"namespace": "shop", "rule": "invoices", "source": "azure-queue",
                                             "queue": "invoices-q"}) == 7


def test_the_same_labels_give_the_same_series() -> None:
    metrics = Metrics()
    first = metrics.of_rule(metrics.rule_count, "shop", "orders")
    assert metrics.of_rule(metrics.rule_count, "shop", "orders") is first
    metrics.forget_rule("shop", "orders")
    metrics.forget_rule("shop", "orders")  # twice, or a rule that never reported: nothing to do
    assert metrics.of_rule(metrics.rule_count, "shop", "orders") is not first


def test_gc_pauses_are_summed_by_generation_and_read_when_scraped() -> None:
    metrics = Metrics()
    metrics.gc.install()
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        metrics.gc.uninstall()
    assert metrics.gc._hook not in gc.callbacks
    full = metrics.registry.get_sample_value("queuescale_gc_pause_seconds_total", {"generation": "2"})
    young = metrics.registry.get_sample_value("queuescale_gc_pause_seconds_total", {"generation": "0"})
    assert full is not None and full > 0
    assert young is not None and young > 0
    before = full
    gc.collect(2)  # uninstalled: no longer counted
    assert metrics.registry.get_sample_value("queuescale_gc_pause_seconds_total", {"generation": "2"}) == before
