"""A tick's result becomes status, events and metrics: what the operator reports for each rule."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from controller.kube.ownership import CONFLICT_CODES
from controller.reconciler import TickResult
from controller.report.status import (
    significant,
    tick_status,
)

if TYPE_CHECKING:  # REDESIGN: the reporter must not know the Operator
    from controller.operator.runner import Operator, RuleState


class RuleReporter:
    """Turns a rule's tick into metrics, a status write when something changed, and events."""

    def __init__(self, operator: Operator, state: RuleState) -> None:
        self.operator = operator
        # Weak: the state owns the reconciler that owns this reporter, and a cycle among them would outlive the
        # rule once the heap is frozen (see _settle_the_heap).
        self._state = weakref.ref(state)

    @property
    def state(self) -> RuleState:
        state = self._state()
        if state is None:  # not while the rule's task runs: its closure holds the state
            raise LookupError("the rule's state is gone: it was deleted")
        return state

    async def report(self, result: TickResult) -> None:
        op, state = self.operator, self.state
        if not op.may_write():
            return
        if not state.ticked:
            op._first_tick(state)
        now = op.clock.now()
        rule = result.rule
        rule_labels = (rule.namespace, rule.name)
        metrics = op.metrics
        metrics.tick_lateness.observe(result.lateness)
        metrics.poll_duration.labels(type=rule.spec.sources[0].type if rule.spec.sources else "none").observe(
            result.poll_seconds)
        for source, reading in zip(rule.spec.sources, result.observation.readings, strict=False):
            if reading.count is not None:
                metrics.of_rule(metrics.queue_length, *rule_labels, source.type, source.queue_label).set(reading.count)
            if reading.error is not None:
                metrics.of_rule(metrics.poll_errors, *rule_labels, reading.error.code).inc()
                if reading.error.code in AUTH_CODES:
                    op.secrets.invalidate(rule.namespace)  # the key may have been rotated: read it again
        decision = result.decision
        if decision is not None:
            if decision.count is not None:
                metrics.of_rule(metrics.rule_count, *rule_labels).set(decision.count)
            metrics.of_rule(metrics.desired_replicas, *rule_labels).set(decision.desired)
        if result.state is not None:
            metrics.of_rule(metrics.current_replicas, *rule_labels).set(result.state.replicas)
            if result.state.startup_seconds is not None:
                metrics.of_rule(metrics.target_startup, *rule_labels).set(result.state.startup_seconds)

        ref = state.ref()
        if result.scaled is not None and decision is not None:
            direction = "up" if result.scaled.to_replicas > result.scaled.from_replicas else "down"
            metrics.of_rule(metrics.scale_operations, *rule_labels, direction, "success").inc()
            reason = "ScaledUp" if direction == "up" else "ScaledDown"
            await op.events.record(ref, "Normal", reason,
                                   f"{result.scaled.from_replicas} -> {result.scaled.to_replicas}: "
                                   f"{decision.reason}: {decision.message}", now)
        elif result.target_error is not None:
            wanted = decision is not None and decision.desired != decision.current
            if wanted and decision is not None:
                direction = "up" if decision.desired > decision.current else "down"
                metrics.of_rule(metrics.scale_operations, *rule_labels, direction, "error").inc()
            ref_kind = rule.spec.scale_target_ref
            conflict = result.target_error.code in CONFLICT_CODES  # another autoscaler owns the target
            await op.events.record(
                ref, "Warning", result.target_error.code if conflict else "ScaleFailed" if wanted else
                "TargetUnavailable",
                f"{ref_kind.kind} '{ref_kind.name}': {result.target_error.code}: {result.target_error.message}", now)
        for source, reading in zip(rule.spec.sources, result.observation.readings, strict=False):
            if reading.error is not None:
                await op.events.record(ref, "Warning", reading.error.code,
                                       f"queue '{source.queue_label}': {reading.error.message}", now)
        if decision is not None and decision.fallback:
            await op.events.record(ref, "Warning", "Fallback", decision.message, now)

        since_write = now - state.last_write
        options = op.options
        spread = len(op.rules) / options.status_rate if options.status_rate > 0 else 0.0
        heartbeat = max(options.status_heartbeat, spread)
        seen = _what_the_status_shows(result)
        if seen == state.submitted and since_write < heartbeat:
            return  # the status would differ from the one written only by lastPollTime
        status = tick_status(result, state.last_status, now)
        previous = state.last_status or {}
        if significant(status) != significant(previous) or (
            since_write >= max(options.status_interval, spread) and _counts_changed(status, previous)
        ) or since_write >= heartbeat:
            state.submitted = seen
            op.status_writes.submit(state.key, (state, status, now))


def _what_the_status_shows(result: TickResult) -> tuple[object, ...]:
    """Everything of a tick that tick_status reads, but the time: equal for two ticks, equal statuses."""
    error = result.target_error
    return (result.rule, result.observation.readings, result.decision, result.state, result.scaled,
            None if error is None else (error.code, error.message), result.memory)


def _counts_changed(status: dict[str, Any], previous: dict[str, Any]) -> bool:
    """Whether anything but lastPollTime changed (counts, trend, messages)."""
    return {k: v for k, v in status.items() if k != "lastPollTime"} != {
        k: v for k, v in previous.items() if k != "lastPollTime"}


AUTH_CODES = {"AuthenticationFailed", "AuthorizationPermissionMismatch", "AuthorizationResourceTypeMismatch",
              "AuthorizationFailure"}
