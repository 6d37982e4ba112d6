"""What the operator keeps of each rule between watch events: its identity, its parsed rule, its loop, and what
was last reported for it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from controller.kube.events import ObjectRef
from controller.model.fields import FieldError
from controller.model.rule import API_GROUP, API_VERSION, KIND, PAUSED_ANNOTATION, QueueScaler
from controller.reconciler import Reconciler
from controller.report.reporter import RuleReporter
from controller.report.status import Status


@dataclass
class RuleState:
    """One rule as the operator holds it (a `ReportedRule` to its reporter)."""

    key: str
    obj: dict[str, Any]
    uid: str = ""
    rule: QueueScaler | None = None
    errors: tuple[FieldError, ...] = ()
    reporter: RuleReporter | None = None
    reconciler: Reconciler | None = None
    task: asyncio.Task[None] | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    last_status: Status | None = None
    last_write: float = 0.0
    fingerprint: tuple[object, ...] = ()
    # What the tick whose status was last handed to the writer saw (None after a failed write): a tick that
    # sees the same builds no status at all until the heartbeat is due.
    submitted: tuple[object, ...] | None = None
    ticked: bool = False  # has ticked since this replica began leading

    @property
    def namespace(self) -> str:
        return str((self.obj.get("metadata") or {}).get("namespace") or "default")

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name") or "")

    def ref(self) -> ObjectRef:
        return ObjectRef(f"{API_GROUP}/{API_VERSION}", KIND, self.name, self.namespace, self.uid)


def rule_fingerprint(obj: dict[str, Any]) -> tuple[object, ...]:
    """What makes a rule different for the operator: its spec (generation) and the pause annotation."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return (meta.get("uid"), meta.get("generation"), annotations.get(PAUSED_ANNOTATION))


_KEPT_METADATA = ("name", "namespace", "uid", "generation", "resourceVersion", "annotations")


def kept(obj: dict[str, Any]) -> dict[str, Any]:
    """The part of a rule's object the operator keeps between events: its identity. The spec lives on parsed in
    the rule, the status in last_status; a whole object (managedFields and all) is some 10 KB per rule."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in _KEPT_METADATA if k in meta}}


def rule_key(obj: dict[str, Any]) -> str:
    """namespace/name of a rule's object."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def is_ready(status: Status | None) -> bool:
    """Whether a status's Ready condition is True."""
    for c in (status or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c.get("status") == "True"
    return False
