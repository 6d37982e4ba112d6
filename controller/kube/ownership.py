"""One autoscaler per target: which rule owns a target, and whether a HorizontalPodAutoscaler scales it too.

Two rules on one Deployment would take turns setting its replicas (10 -> 40 -> 20 -> 40), each Ready=True. So
each target has one owner: of the valid rules naming it (same namespace, API group, kind and name), the one
created first, ties broken by name. That order is in the objects themselves, so every replica of the operator,
and every leader after a failover, picks the same owner without talking to the others. The other rules get
Ready=False, reason `TargetConflict`, and never scale; they go on polling (their counts stay in status and
metrics, and their trend history is warm) so that when the owner is deleted or points elsewhere, the next in line
takes over on its next tick.

An HPA on the same target fights the same way, so a rule whose target an `autoscaling/v2` HPA names
(scaleTargetRef: same group, kind and name) does not scale it either: Ready=False, reason `HPAConflict`. KEDA
refuses the same thing when a ScaledObject is created (kedacore/keda apis/keda/v1alpha1/scaledobject_webhook.go,
verifyHpas: "the workload '...' of type '...' is already managed by the hpa '...'"); an operator has no admission
step, so it refuses at every tick. The HPAs are known from one list+watch per watched scope (RuleWatcher, with
the HPA path): a few objects, read once, instead of a GET per target per interval (10,000 rules would be 10,000
GETs per check). Without RBAC to list them (403) or without the autoscaling/v2 API (404), the check is skipped:
logged once, retried every `recheck` seconds, so granting the permission later needs no restart.

This module only knows; `controller.targets.guards.OwnedTarget` asks `Ownership.conflict` before each read and
scale of a rule's target, and refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from controller.kube.api import KubeApi
from controller.kube.errors import KubeError
from controller.kube.rules import RuleWatcher, until_listable
from controller.kube.timestamps import parse_rfc3339
from controller.model.rule import QueueScaler

log = logging.getLogger(__name__)

TARGET_CONFLICT = "TargetConflict"
HPA_CONFLICT = "HPAConflict"
CONFLICT_CODES = frozenset({TARGET_CONFLICT, HPA_CONFLICT})
HPA_API = "/apis/autoscaling/v2"


@dataclass(frozen=True)
class Conflict:
    """Why a rule may not scale its target: `code` (TargetConflict, HPAConflict) and a message for its status."""

    code: str
    message: str


@dataclass(frozen=True)
class TargetKey:
    """What identifies a target: namespace, API group (not version: apps/v1 and apps/v1beta2 are one object),
    kind and name."""

    namespace: str
    group: str
    kind: str
    name: str

    @classmethod
    def of(cls, namespace: str, api_version: str, kind: str, name: str) -> TargetKey:
        group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
        return cls(namespace, group, kind, name)

    @classmethod
    def of_rule(cls, rule: QueueScaler) -> TargetKey:
        ref = rule.spec.scale_target_ref
        return cls.of(rule.namespace, ref.api_version, ref.kind, ref.name)


@dataclass(frozen=True)
class Claim:
    """A rule's claim on its target, ranked by creation time then name (the earliest wins)."""

    rule: str  # the rule's name (its namespace is the target's)
    created: float
    created_text: str

    @property
    def rank(self) -> tuple[float, str]:
        return (self.created, self.rule)


class TargetClaims:
    """Which valid rule claims which target; the owner of a target is its earliest claim."""

    def __init__(self) -> None:
        self._by_target: dict[TargetKey, dict[str, Claim]] = {}
        self._by_rule: dict[str, TargetKey] = {}  # rule key (namespace/name) -> the target it claims

    def claim(self, rule_key: str, target: TargetKey, obj: dict[str, Any]) -> None:
        """Record (or move) `rule_key`'s claim: a rule pointed elsewhere leaves its old target at once."""
        self.release(rule_key)
        meta = obj.get("metadata") or {}
        text = str(meta.get("creationTimestamp") or "")
        created = parse_rfc3339(text)
        # A rule without a creation time (never from a real API server) ranks last rather than first.
        claim = Claim(str(meta.get("name") or ""), created if created is not None else float("inf"), text)
        self._by_target.setdefault(target, {})[rule_key] = claim
        self._by_rule[rule_key] = target

    def release(self, rule_key: str) -> None:
        target = self._by_rule.pop(rule_key, None)
        if target is None:
            return
        claims = self._by_target.get(target)
        if claims is not None:
            claims.pop(rule_key, None)
            if not claims:
                del self._by_target[target]

    def owner(self, target: TargetKey) -> Claim | None:
        claims = self._by_target.get(target)
        if not claims:
            return None
        return min(claims.values(), key=lambda c: c.rank)

    def target_of(self, rule_key: str) -> TargetKey | None:
        return self._by_rule.get(rule_key)

    def on(self, target: TargetKey) -> list[str]:
        """The keys of the rules claiming `target`."""
        return list(self._by_target.get(target) or ())

    def contested(self, target: TargetKey) -> bool:
        return len(self._by_target.get(target) or ()) > 1

    def __len__(self) -> int:
        return len(self._by_rule)


class HpaIndex:
    """The HorizontalPodAutoscalers of the watched scopes, by the target each one scales (a RuleWatcher handler)."""

    def __init__(self, on_change: Callable[[TargetKey], None] | None = None) -> None:
        self._targets: dict[tuple[str, str], TargetKey] = {}  # (namespace, hpa name) -> its scaleTargetRef
        self._by_target: dict[TargetKey, set[str]] = {}  # a target -> the names of the HPAs scaling it
        self.on_change: Callable[[TargetKey], None] = on_change or _nothing
        self._scopes: set[str | None] = set()  # scopes not yet listed (nor given up on)
        self.settled = asyncio.Event()  # every expected scope listed, or skipped
        self.settled.set()
        self.skipped: set[str | None] = set()

    def expect(self, scope: str | None) -> None:
        """A watch will serve this scope: until it has listed once, rules wait briefly before their first scale."""
        self._scopes.add(scope)
        self.settled.clear()

    def _done(self, scope: str | None) -> None:
        self._scopes.discard(scope)
        if not self._scopes:
            self.settled.set()

    def skip(self, scope: str | None) -> None:
        """No HPAs can be read in this scope: the check is off there."""
        self.skipped.add(scope)
        self._forget_scope(scope)
        self._done(scope)

    def _forget_scope(self, scope: str | None) -> None:
        for key in [k for k in self._targets if scope is None or k[0] == scope]:
            self._set(key, None)

    async def sync(self, scope: str | None, objects: list[dict[str, Any]]) -> None:
        listed = {_hpa_key(obj): _scaled(obj) for obj in objects}
        for key in [k for k in self._targets if (scope is None or k[0] == scope) and k not in listed]:
            self._set(key, None)
        for key, target in listed.items():
            self._set(key, target)
        self.skipped.discard(scope)
        self._done(scope)

    async def upsert(self, obj: dict[str, Any]) -> None:
        self._set(_hpa_key(obj), _scaled(obj))

    async def delete(self, obj: dict[str, Any]) -> None:
        self._set(_hpa_key(obj), None)

    def _set(self, key: tuple[str, str], target: TargetKey | None) -> None:
        before = self._targets.get(key)
        if before == target:
            return
        if before is not None:
            del self._targets[key]
            names = self._by_target[before]
            names.discard(key[1])
            if not names:
                del self._by_target[before]
        if target is not None:
            self._targets[key] = target
            self._by_target.setdefault(target, set()).add(key[1])
        for changed in (before, target):
            if changed is not None:
                self.on_change(changed)

    def on(self, target: TargetKey) -> list[str]:
        """The names of the HPAs that scale `target`."""
        names = self._by_target.get(target)
        return sorted(names) if names else []


def _nothing(_: object) -> None:
    return None


def _hpa_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _scaled(obj: dict[str, Any]) -> TargetKey | None:
    """The target an HPA scales (its spec.scaleTargetRef), or None when it names none."""
    ref = (obj.get("spec") or {}).get("scaleTargetRef")
    if not isinstance(ref, dict) or not ref.get("name"):
        return None
    return TargetKey.of(_hpa_key(obj)[0], str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""),
                        str(ref["name"]))


def hpa_path(namespace: str | None) -> str:
    if namespace:
        return f"{HPA_API}/namespaces/{quote(namespace)}/horizontalpodautoscalers"
    return f"{HPA_API}/horizontalpodautoscalers"


class HpaWatch:
    """Keeps an HpaIndex in step with one scope's HPAs; gives up quietly (once logged) where it may not list them."""

    def __init__(self, api: KubeApi, index: HpaIndex, *, namespace: str | None = None, watch_timeout: int = 300,
                 recheck: float = 300.0) -> None:
        self.api = api
        self.index = index
        self.namespace = namespace
        self.watch_timeout = watch_timeout
        self.recheck = recheck
        index.expect(namespace)

    async def run(self) -> None:
        """Runs until cancelled."""
        path = hpa_path(self.namespace)
        scope = self.namespace or "all namespaces"

        def refused(exc: KubeError, first: bool) -> None:
            if first:
                what = "the autoscaling/v2 API is not served" if exc.status == 404 else \
                    "the operator may not list horizontalpodautoscalers (RBAC)"
                log.warning("HPA conflict check off in %s: %s; rules there are not checked for an HPA on their "
                            "target (checking again every %gs)", scope, what, self.recheck)
            self.index.skip(self.namespace)

        if await until_listable(self.api, path, recheck=self.recheck, refused=refused):
            log.info("HPA conflict check on in %s", scope)
        await RuleWatcher(self.api, self.index, namespace=self.namespace, watch_timeout=self.watch_timeout,
                          path=path, resource="HorizontalPodAutoscalers").run()


class Ownership:
    """The claims and the HPAs together: whether a rule may scale its target now, and why not."""

    def __init__(self, *, forget: Callable[[str], None] | None = None, hpa_wait: float = 5.0) -> None:
        """`forget(rule_key)`: the rule's reconciler should read its target afresh on its next tick (a tick that
        trusts the scale it last read does not read, so would not learn of a conflict until the next refresh)."""
        self.claims = TargetClaims()
        self.hpas = HpaIndex(self._changed)
        self.hpa_wait = hpa_wait
        self.forget: Callable[[str], None] = forget or _nothing
        self._hpa_deadline: float | None = None

    def claim(self, rule_key: str, rule: QueueScaler, obj: dict[str, Any]) -> None:
        """`rule_key` is a valid rule scaling `rule`'s target; `obj` (its object) gives its creation time."""
        target = TargetKey.of_rule(rule)
        before = self.claims.target_of(rule_key)
        if before == target:
            return
        self.release(rule_key)
        self.claims.claim(rule_key, target, obj)
        if self.claims.contested(target):
            self._changed(target)

    def release(self, rule_key: str) -> None:
        """`rule_key` is gone, invalid or about to claim another target: the next in line may take over."""
        target = self.claims.target_of(rule_key)
        self.claims.release(rule_key)
        if target is not None:
            self._changed(target)

    def _changed(self, target: TargetKey) -> None:
        for rule_key in self.claims.on(target):
            self.forget(rule_key)

    async def await_hpas(self) -> None:
        """Just started: give the first HPA list a moment, so a first tick does not scale a target an HPA scales.
        At most `hpa_wait` seconds from the first tick that waits, over all rules: an HPA list that keeps failing
        must not hold every tick of every rule."""
        loop = asyncio.get_running_loop()
        if self._hpa_deadline is None:
            self._hpa_deadline = loop.time() + self.hpa_wait
        remaining = self._hpa_deadline - loop.time()
        if remaining > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.hpas.settled.wait(), remaining)

    def conflict(self, rule_key: str, target: TargetKey) -> Conflict | None:
        """Why `rule_key` may not scale `target`, or None when it may (the message follows the target's name in
        the status and the event)."""
        hpas = self.hpas.on(target)
        if hpas:
            names = ", ".join(f"'{n}'" for n in hpas)
            return Conflict(
                HPA_CONFLICT,
                f"already scaled by the HorizontalPodAutoscaler {names}: two autoscalers on one target fight, so "
                f"this rule does not scale it; delete the HPA "
                f"(kubectl delete hpa {hpas[0]} -n {target.namespace}) or point the rule at another target")
        owner = self.claims.owner(target)
        if owner is None or f"{target.namespace}/{owner.rule}" == rule_key:
            return None
        since = f", created {owner.created_text}" if owner.created_text else ""
        return Conflict(
            TARGET_CONFLICT,
            f"already scaled by rule '{owner.rule}' (the oldest rule on it{since}): this rule does not scale it "
            "until that rule is deleted or points elsewhere")
