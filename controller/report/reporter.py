"""A tick's result becomes status, events and metrics: what the operator reports for each rule.

The reporter builds what is written (status bodies, event reasons and messages, metric samples); it writes
through what the operator hands it in a `Reporting` (the Kubernetes calls live in controller/kube/), and keeps
what it wrote on the rule's `ReportedRule` (the operator's per-rule state).
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from controller.kube.events import EventRecorder, ObjectRef
from controller.kube.ownership import CONFLICT_CODES
from controller.model.fields import FieldError
from controller.model.rule import QueueScaler
from controller.reconciler import TickResult
from controller.report.metrics import Metrics
from controller.report.status import (
    Status,
    invalid_status,
    setup_failed_status,
    significant,
    tick_status,
)


class ReportedRule(Protocol):
    """What the reporter reads and keeps of one rule between ticks."""

    key: str  # namespace/name
    last_status: Status | None  # the status last written (or found on the object)
    last_write: float  # when it was written
    # What the tick whose status was last handed to the writer saw (None after a failed write): a tick that
    # sees the same builds no status at all until the heartbeat is due.
    submitted: tuple[object, ...] | None
    ticked: bool  # has ticked since this replica began leading

    def ref(self) -> ObjectRef: ...


class StatusPacing(Protocol):
    """When counts and heartbeats are written (the operator's options)."""

    @property
    def status_interval(self) -> float: ...

    @property
    def status_heartbeat(self) -> float: ...

    @property
    def status_rate(self) -> float: ...


@dataclass(frozen=True)
class Reporting:
    """Where every rule's reports go, and what the reporter asks of the operator; built once by the operator."""

    metrics: Metrics
    events: EventRecorder
    pacing: StatusPacing
    now: Callable[[], float]
    may_write: Callable[[], bool]  # this replica may write now (it leads, and its lease is fresh)
    submit_status: Callable[[ReportedRule, Status, float], None]  # a tick's status, written off the tick
    write_status: Callable[[ReportedRule, Status, float], Awaitable[bool]]  # written now (True: it was)
    rule_count: Callable[[], int]  # how many rules share the status rate
    first_tick: Callable[[str], None]  # the rule of this key ticked for the first time since leading began
    invalidate_secrets: Callable[[str], None]  # a namespace's Secrets may have been rotated: read them again


class RuleReporter:
    """Turns a rule's tick into metrics, a status write when something changed, and events; and says why a rule
    that cannot run does not."""

    def __init__(self, reporting: Reporting, state: ReportedRule) -> None:
        self.reporting = reporting
        # Weak: the state owns the reconciler that owns this reporter, and a cycle among them would outlive the
        # rule once the heap is frozen (see controller/operator/heap.py).
        self._state = weakref.ref(state)

    @property
    def state(self) -> ReportedRule:
        state = self._state()
        if state is None:  # not while the rule's task runs: its closure holds the state
            raise LookupError("the rule's state is gone: it was deleted")
        return state

    async def invalid(self, name: str, generation: int, errors: Sequence[FieldError]) -> None:
        """The rule is not valid: Ready=False with every field error, and a Warning event. Neither from a replica
        that may not write now (a leader whose lease went stale while it was frozen): the event is a write too."""
        reporting, state = self.reporting, self.state
        if not reporting.may_write():
            return
        now = reporting.now()
        await reporting.write_status(state, invalid_status(name, generation, errors, state.last_status, now), now)
        message = "; ".join(str(e) for e in errors)
        await reporting.events.record(state.ref(), "Warning", "InvalidSpec", f"rule is not valid: {message}", now)

    async def setup_failed(self, rule: QueueScaler, reason: str, message: str) -> None:
        """A valid rule that cannot start (a queue kind with no poller here): Ready=False with the reason."""
        reporting, state = self.reporting, self.state
        now = reporting.now()
        await reporting.write_status(state, setup_failed_status(rule, reason, message, state.last_status, now), now)

    async def report(self, result: TickResult) -> None:
        reporting, state = self.reporting, self.state
        if not reporting.may_write():
            return
        if not state.ticked:
            state.ticked = True
            reporting.first_tick(state.key)
        now = reporting.now()
        rule = result.rule
        rule_labels = (rule.namespace, rule.name)
        metrics = reporting.metrics
        metrics.tick_lateness.observe(result.lateness)
        metrics.poll_duration.labels(type=rule.spec.sources[0].type if rule.spec.sources else "none").observe(
            result.poll_seconds)
        for source, reading in zip(rule.spec.sources, result.observation.readings, strict=False):
            if reading.count is not None:
                metrics.of_rule(metrics.queue_length, *rule_labels, source.type, source.queue_label).set(reading.count)
            if reading.oldest_age is not None:
                metrics.of_rule(metrics.oldest_age, *rule_labels, source.type, source.queue_label).set(
                    reading.oldest_age)
            if reading.error is not None:
                metrics.of_rule(metrics.poll_errors, *rule_labels, reading.error.code).inc()
                if reading.error.code in AUTH_CODES:
                    reporting.invalidate_secrets(rule.namespace)  # the key may have been rotated: read it again
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
            removal = result.state.removal if result.state is not None else None
            await reporting.events.record(ref, "Normal", reason,
                                   f"{result.scaled.from_replicas} -> {result.scaled.to_replicas}: "
                                   f"{decision.reason}: {decision.message}"
                                   f"{'' if removal is None else f'; {removal}'}", now)
            if removal is not None and result.state is not None and result.state.removal_failed:
                await reporting.events.record(ref, "Warning", "InFlightUnread", removal, now)
        elif result.target_error is not None:
            wanted = decision is not None and decision.desired != decision.current
            if wanted and decision is not None:
                direction = "up" if decision.desired > decision.current else "down"
                metrics.of_rule(metrics.scale_operations, *rule_labels, direction, "error").inc()
            ref_kind = rule.spec.scale_target_ref
            conflict = result.target_error.code in CONFLICT_CODES  # another autoscaler owns the target
            await reporting.events.record(
                ref, "Warning", result.target_error.code if conflict else "ScaleFailed" if wanted else
                "TargetUnavailable",
                f"{ref_kind.kind} '{ref_kind.name}': {result.target_error.code}: {result.target_error.message}", now)
        for source, reading in zip(rule.spec.sources, result.observation.readings, strict=False):
            if reading.error is not None:
                await reporting.events.record(ref, "Warning", reading.error.code,
                                       f"queue '{source.queue_label}': {reading.error.message}", now)
        if decision is not None and decision.fallback:
            await reporting.events.record(ref, "Warning", "Fallback", decision.message, now)

        since_write = now - state.last_write
        options = reporting.pacing
        spread = reporting.rule_count() / options.status_rate if options.status_rate > 0 else 0.0
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
            reporting.submit_status(state, status, now)


def _what_the_status_shows(result: TickResult) -> tuple[object, ...]:
    """Everything of a tick that tick_status reads, but the time: equal for two ticks, equal statuses."""
    error = result.target_error
    return (result.rule, result.observation.readings, result.decision, result.state, result.scaled,
            None if error is None else (error.code, error.message), result.memory)


def _counts_changed(status: Status, previous: Status) -> bool:
    """Whether anything but lastPollTime changed (counts, trend, messages)."""
    return {k: v for k, v in status.items() if k != "lastPollTime"} != {
        k: v for k, v in previous.items() if k != "lastPollTime"}


AUTH_CODES = {"AuthenticationFailed", "AuthorizationPermissionMismatch", "AuthorizationResourceTypeMismatch",
              "AuthorizationFailure"}
