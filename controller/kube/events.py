"""Kubernetes Events about rules, rate-limited so a broken rule cannot flood the cluster."""

from __future__ import annotations

import logging
import secrets as random_names
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.kube.api import KubeApi, core_path
from controller.kube.timestamps import rfc3339

log = logging.getLogger(__name__)

COMPONENT = "queuescale"


@dataclass(frozen=True)
class ObjectRef:
    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str = ""


class EventLimiter:
    """Per object: a token bucket for all events, and each Warning reason at most once per `repeat_after`.

    A scale is a Normal event and passes while the bucket has tokens; a Warning repeated with the same reason
    (a queue that stays missing) is said once, then again only after `repeat_after` seconds.

    Over all objects: a bucket of `total_burst` events refilled at `total_per_second`. One storage account down
    under 10,000 rules is 10,000 Warnings within a polling interval, each allowed by its own rule's limits; the
    API server would get them all at once. An event held back by this budget leaves the rule's own limits
    untouched, so its Warning is said on a later tick, once the budget allows.
    """

    def __init__(self, *, burst: int = 10, refill_every: float = 30.0, repeat_after: float = 300.0,
                 total_burst: int = 200, total_per_second: float = 20.0) -> None:
        self.burst = burst
        self.refill_every = refill_every
        self.repeat_after = repeat_after
        self.total_burst = total_burst
        self.total_per_second = total_per_second
        self._tokens: dict[str, tuple[float, float]] = {}  # key -> (tokens, time)
        self._warned: dict[tuple[str, str], float] = {}
        self._total: tuple[float, float] | None = None  # (tokens, time) over all objects
        self.over_budget = 0  # events that their object's limits allowed and the overall budget did not

    def allow(self, key: str, event_type: str, reason: str, now: float) -> bool:
        if event_type == "Warning":
            last = self._warned.get((key, reason))
            if last is not None and now - last < self.repeat_after:
                return False
        tokens, since = self._tokens.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - since) / self.refill_every)
        if tokens < 1:
            self._tokens[key] = (tokens, now)
            return False
        total, total_since = self._total or (float(self.total_burst), now)
        total = min(float(self.total_burst), total + max(0.0, now - total_since) * self.total_per_second)
        if total < 1:
            self._total = (total, now)
            self.over_budget += 1
            return False
        self._total = (total - 1, now)
        self._tokens[key] = (tokens - 1, now)
        if event_type == "Warning":
            self._warned[(key, reason)] = now
        return True

    def forget(self, key: str) -> None:
        self._tokens.pop(key, None)
        for warned in [k for k in self._warned if k[0] == key]:
            del self._warned[warned]


Sender = Callable[[str, dict[str, Any]], Any]  # (namespace, body) -> awaitable


def event_sender(api: KubeApi) -> Sender:
    """Creates each Event through the API server (a POST in the object's namespace)."""

    async def send(namespace: str, body: dict[str, Any]) -> None:
        await api.request("POST", core_path("events", namespace), body=body)

    return send


class EventRecorder:
    """Creates core/v1 Events for an object, through `send` (the API call), after the limiter agrees."""

    def __init__(self, send: Sender, instance: str, limiter: EventLimiter | None = None,
                 counted: Callable[[str], None] | None = None) -> None:
        """`counted` is told each event's outcome: sent, limited (its object's limits), over_budget (the overall
        budget) or failed (the API call)."""
        self.send = send
        self.instance = instance
        self.limiter = limiter or EventLimiter()
        self.counted = counted or (lambda _: None)
        self.sent = 0
        self.suppressed = 0

    async def record(self, ref: ObjectRef, event_type: str, reason: str, message: str, now: float) -> bool:
        """Send one event unless rate-limited; True when sent. Failures are logged, never raised."""
        key = f"{ref.namespace}/{ref.name}/{ref.uid}"
        over_budget = self.limiter.over_budget
        if not self.limiter.allow(key, event_type, reason, now):
            self.suppressed += 1
            self.counted("over_budget" if self.limiter.over_budget > over_budget else "limited")
            return False
        stamp = rfc3339(now)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref.name}.{random_names.token_hex(8)}", "namespace": ref.namespace},
            "involvedObject": {
                "apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "namespace": ref.namespace,
                "uid": ref.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": COMPONENT},
            "reportingComponent": f"{COMPONENT}.io/operator",
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self.send(ref.namespace, body)
        except Exception as exc:  # an event is best effort: never let it stop a tick
            log.warning("could not record event %s for %s/%s: %s", reason, ref.namespace, ref.name,
                        getattr(exc, "status", type(exc).__name__))
            self.counted("failed")
            return False
        self.sent += 1
        self.counted("sent")
        return True
