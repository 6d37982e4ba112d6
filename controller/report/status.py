"""What the rule's status says: built from a tick's result, in the metav1.Condition shape. No I/O.

Conditions: Ready (the queues and the target can be read and scaled), Active (the queue is above the activation
threshold; reason and message are the policy's last decision), Fallback, Paused, and for a rule with
targetWaitSeconds, ColdStart (whether a replica started when work arrives can still meet it; False is a warning:
only replicas kept ready meet the objective for a burst on idle capacity), and for a rule in rate mode, ServiceTime
(whether drains and waits showed replicas as fast as the rule states; False: sized slower than stated).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from controller.kube.timestamps import rfc3339
from controller.model.fields import FieldError
from controller.model.readings import Reason
from controller.model.rule import QueueScaler
from controller.model.textfmt import duration
from controller.policy import Decision, cold_start_condition, effective_bounds
from controller.reconciler import TickResult
from controller.targets.base import TargetError
from controller.throughput import service_time_condition

Status = dict[str, Any]

MAX_MESSAGE = 1024
# Fields that change on every poll; a change in them alone is written at most every `volatile_interval`.
# readyReplicas too: it climbs pod by pod during a scale-up, a write per pod would be a write per tick.
VOLATILE_FIELDS = ("queueLength", "trend", "sources", "lastPollTime", "lastDecision", "readyReplicas")






def _short(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def condition(
    kind: str, status: str, reason: str, message: str, generation: int, now: float,
    previous: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """A metav1.Condition; lastTransitionTime moves only when the status does."""
    transition = rfc3339(now)
    for old in previous or ():
        if old.get("type") == kind and old.get("status") == status and isinstance(old.get("lastTransitionTime"), str):
            transition = old["lastTransitionTime"]
    return {
        "type": kind, "status": status, "reason": _reason(reason), "message": _short(message),
        "observedGeneration": generation, "lastTransitionTime": transition,
    }


def _reason(text: str) -> str:
    """A reason the API accepts (CamelCase letters and digits): queue services' codes are, but be sure."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "", text)
    if not cleaned or not cleaned[0].isalpha():
        cleaned = "Error" + cleaned
    return cleaned[:1024]


def _previous_conditions(previous: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    conditions = (previous or {}).get("conditions")
    return [c for c in conditions if isinstance(c, Mapping)] if isinstance(conditions, list) else []


def _paused_condition(rule: QueueScaler, now: float, prior: list[Mapping[str, Any]]) -> dict[str, Any]:
    if rule.spec.paused:
        return condition("Paused", "True", "PausedBySpec", "spec.paused is true: not scaling", rule.generation,
                         now, prior)
    if rule.paused_by_annotation:
        return condition("Paused", "True", "PausedByAnnotation",
                         'annotation queuescale.io/paused is "true": not scaling', rule.generation, now, prior)
    return condition("Paused", "False", "NotPaused", "scaling", rule.generation, now, prior)


def tick_status(result: TickResult, previous: Mapping[str, Any] | None, now: float) -> Status:
    """The whole status after a tick (always the whole conditions list: a merge patch replaces lists)."""
    rule = result.rule
    prior = _previous_conditions(previous)
    generation = rule.generation
    sources = []
    problems: list[tuple[str, str]] = []
    for source, reading in zip(rule.spec.sources, result.observation.readings, strict=False):
        entry: dict[str, Any] = {"type": source.type, "queue": source.queue_label, "count": reading.count}
        if reading.error is not None:
            entry["error"] = {"code": reading.error.code, "message": _short(reading.error.message)}
            problems.append((reading.error.code, f"queue '{source.queue_label}': {reading.error.message}"))
        if reading.note:
            entry["note"] = reading.note
        sources.append(entry)
    if result.target_error is not None:
        ref = rule.spec.scale_target_ref
        problems.append((_target_reason(result.target_error.code),
                         f"{ref.kind} '{ref.name}': {result.target_error.message}"))

    status: Status = {
        "observedGeneration": generation,
        "sources": sources,
        "lastPollTime": rfc3339(result.observation.time),
        "memory": result.memory.to_json(),
    }
    previous_status = previous or {}
    for carried in ("lastScaleTime", "desiredReplicas", "currentReplicas", "readyReplicas", "startupSeconds",
                    "queueLength", "trend"):
        if carried in previous_status:
            status[carried] = previous_status[carried]
    decision = result.decision
    if decision is not None:
        if decision.count is not None:
            status["queueLength"] = _number(decision.count)
        if decision.trend is not None:
            status["trend"] = round(decision.trend, 2)
        status["desiredReplicas"] = decision.desired
        status["lastDecision"] = {"reason": str(decision.reason), "message": _short(decision.message)}
    if result.state is not None:
        status["currentReplicas"] = result.state.replicas
        if result.state.ready_replicas is not None:
            status["readyReplicas"] = result.state.ready_replicas
        if result.state.startup_seconds is not None:
            status["startupSeconds"] = round(result.state.startup_seconds, 1)
    if result.scaled is not None:
        status["lastScaleTime"] = rfc3339(result.scaled.time)

    if problems:
        ready = condition("Ready", "False", problems[0][0], "; ".join(m for _, m in problems), generation, now, prior)
    else:
        what = f"{len(sources)} queue{'s' if len(sources) != 1 else ''}"
        ready = condition("Ready", "True", "Polling",
                          f"polling {what} every {duration(rule.spec.polling_interval)} and scaling "
                          f"{rule.spec.scale_target_ref.kind} '{rule.spec.scale_target_ref.name}'",
                          generation, now, prior)
    status["conditions"] = [
        ready,
        _active_condition(decision, rule, now, prior, result.target_error),
        _fallback_condition(decision, rule, now, prior),
        _paused_condition(rule, now, prior),
    ]
    measured = status.get("startupSeconds")
    # The decision's bounds where there is one: the schedules are read once per tick.
    bounds = decision.bounds if decision is not None else effective_bounds(rule.spec, result.time)
    # The policy's outlooks, where the rule has them: (holds, reason, message).
    for kind, outlook in (
        ("ColdStart", cold_start_condition(rule.spec, measured if isinstance(measured, (int, float)) else None,
                                           bounds.minimum)),
        ("ServiceTime", service_time_condition(rule.spec, result.memory.learned_throughput)),
    ):
        if outlook is not None:
            met, reason, message = outlook
            status["conditions"].append(
                condition(kind, "True" if met else "False", reason, message, generation, now, prior))
    return status


def _target_reason(code: str) -> str:
    """The Ready reason for a target's error code: TargetNotFound, TargetForbidden, ... and the ownership
    conflicts (TargetConflict, HPAConflict) as they are."""
    if code == "Conflict":  # HTTP 409 on every retry: someone else kept changing the scale while we wrote
        return "TargetWriteConflict"
    if code.startswith("Target") or code.endswith("Conflict"):
        return code
    return f"Target{code}"


def _active_condition(
    decision: Decision | None, rule: QueueScaler, now: float, prior: list[Mapping[str, Any]],
    target_error: TargetError | None = None,
) -> dict[str, Any]:
    generation = rule.generation
    if decision is None:
        if target_error is not None and target_error.code.endswith("Conflict") and target_error.code != "Conflict":
            return condition("Active", "Unknown", target_error.code,
                             "not deciding: another autoscaler scales the target (see the Ready condition)",
                             generation, now, prior)
        return condition("Active", "Unknown", "NoDecision", "the target could not be read", generation, now, prior)
    if decision.reason in (Reason.POLL_FAILED, Reason.FALLBACK) and decision.count is None:
        return condition("Active", "Unknown", str(decision.reason), decision.message, generation, now, prior)
    if decision.reason == Reason.PAUSED:
        return condition("Active", "Unknown", "Paused", decision.message, generation, now, prior)
    return condition("Active", "True" if decision.active else "False", str(decision.reason), decision.message,
                     generation, now, prior)


def _fallback_condition(
    decision: Decision | None, rule: QueueScaler, now: float, prior: list[Mapping[str, Any]]
) -> dict[str, Any]:
    generation = rule.generation
    if decision is not None and decision.fallback:
        return condition("Fallback", "True", "Fallback", decision.message, generation, now, prior)
    if decision is not None and decision.reason == Reason.POLL_FAILED:
        return condition("Fallback", "False", "PollFailed", decision.message, generation, now, prior)
    return condition("Fallback", "False", "PollsSucceeding", "the queues answer", generation, now, prior)


def invalid_status(
    rule_name: str, generation: int, errors: Sequence[FieldError], previous: Mapping[str, Any] | None, now: float
) -> Status:
    """A rule that cannot be used: Ready=False, reason InvalidSpec, every field error in the message."""
    prior = _previous_conditions(previous)
    message = f"rule '{rule_name}' is not valid: " + "; ".join(str(e) for e in errors)
    status: Status = {
        "observedGeneration": generation,
        "conditions": [
            condition("Ready", "False", "InvalidSpec", message, generation, now, prior),
            condition("Active", "Unknown", "InvalidSpec", "not polling: the rule is not valid", generation, now,
                      prior),
            condition("Fallback", "False", "InvalidSpec", "not polling: the rule is not valid", generation, now,
                      prior),
            condition("Paused", "False", "InvalidSpec", "not scaling: the rule is not valid", generation, now,
                      prior),
        ],
    }
    memory = (previous or {}).get("memory")
    if memory is not None:
        status["memory"] = memory  # keep the cooldowns for when the rule is fixed
    return status


def setup_failed_status(
    rule: QueueScaler, reason: str, message: str, previous: Mapping[str, Any] | None, now: float
) -> Status:
    """A valid rule that cannot start (e.g. a queue kind with no poller here): Ready=False with the reason."""
    prior = _previous_conditions(previous)
    status: Status = dict(previous or {})
    status["observedGeneration"] = rule.generation
    status["conditions"] = [
        condition("Ready", "False", reason, message, rule.generation, now, prior),
        condition("Active", "Unknown", reason, "not polling", rule.generation, now, prior),
        condition("Fallback", "False", reason, "not polling", rule.generation, now, prior),
        _paused_condition(rule, now, prior),
    ]
    return status


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(value, 3)


def significant(status: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a status whose change is worth a write at once: all but counts, trend and messages. Null
    fields count as absent: a merge patch deletes them, so a status read back from the API server (another
    replica's, or an earlier process's) has none where the one we built has them."""
    kept = {k: _without_nulls(v) for k, v in status.items() if k not in VOLATILE_FIELDS and k != "conditions"}
    kept["conditions"] = [
        {k: v for k, v in c.items() if k != "message" or c.get("type") == "Ready"}
        for c in status.get("conditions", [])
        if isinstance(c, Mapping)
    ]
    kept["errors"] = [
        (s.get("queue"), (s.get("error") or {}).get("code"))
        for s in status.get("sources", []) if isinstance(s, Mapping)
    ]
    decision = status.get("lastDecision")
    kept["reason"] = decision.get("reason") if isinstance(decision, Mapping) else None
    return kept


def _without_nulls(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def memory_from_status(status: object) -> object:
    """The stored policy memory, or None."""
    return status.get("memory") if isinstance(status, Mapping) else None
