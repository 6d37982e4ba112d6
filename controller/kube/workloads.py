"""The targets, watched: one list+watch per workload kind (Deployments, StatefulSets) and scope, in one cache.

Reading each rule's target through its scale subresource cost a GET per rule per `--target-refresh` (some 160/s
at 10,000 rules), showed a `kubectl scale` up to a minute late, and never told how many replicas were ready (a
Scale does not carry readyReplicas). A watch per kind gives all of it: the cache holds, per (kind, namespace,
name), only what the operator uses (spec.replicas, status.readyReplicas, resourceVersion, generation,
observedGeneration, uid), and `KubernetesScaleTarget` reads it with no request. The write stays a PUT of the
Scale: a workload's resourceVersion is its Scale's (kubernetes/kubernetes pkg/registry/apps/deployment/storage/
storage.go, `scaleFromDeployment` and `scaleUpdatedObjectInfo.UpdatedObject`), so the version from the watch is
the one to write against.

The cache also measures each target's start-up time: from a scale-up this operator asked for (the time it asked
and the count) to the moment the watch shows readyReplicas reaching that count, once the workload's controller
has seen the new spec (status.observedGeneration at least the generation that carries it). Not during a
Deployment's rollout (asked or met while pods of an older template remain): its ready count then includes surge
pods that started before the ask, and a paused rollout can hold more ready than asked, so the time from the ask
says how soon the rollout's pods came, not how long a pod takes to start.

Without RBAC to list a kind (403), the scope is logged once and left unwatched: its targets are read through
/scale as before, with ready replicas unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from controller.kube.api import KubeApi
from controller.kube.errors import KubeError
from controller.kube.rules import RuleWatcher, until_listable
from controller.model.readings import StartupTimes

log = logging.getLogger(__name__)

# Workload kinds that are watched, (group, kind) -> plural; every other kind is read through its /scale.
WATCHED_KINDS: Mapping[tuple[str, str], str] = {
    ("apps", "Deployment"): "deployments",
    ("apps", "StatefulSet"): "statefulsets",
}
WATCHED_VERSION = "apps/v1"
# A scale-up whose write the watch has not shown within this long is given up (the write failed unseen, or a
# relist skipped it); one the watch has shown waits for its ready replicas as long as it takes.
UNSEEN_ASK_TTL = 120.0
MAX_ASKS = 8  # pending scale-ups per target: more only follow one another faster than pods start
# How long first ticks wait for the first list of the watched kinds, over all rules, before they read /scale.
LIST_WAIT = 10.0

WorkloadKey = tuple[str, str, str]  # (kind, namespace, name)


def workloads_path(plural: str, namespace: str | None = None) -> str:
    """`/apis/apps/v1/deployments` (all namespaces) or `/apis/apps/v1/namespaces/NS/deployments`."""
    base = f"/apis/{WATCHED_VERSION}"
    return f"{base}/namespaces/{quote(namespace)}/{plural}" if namespace else f"{base}/{plural}"


@dataclass(frozen=True, slots=True)
class Workload:
    """The part of a Deployment or StatefulSet the operator keeps: a few numbers a target, not 10 KB of object."""

    uid: str
    replicas: int  # spec.replicas
    ready_replicas: int  # status.readyReplicas (absent: 0, as the controllers omit zero counts)
    version: str  # metadata.resourceVersion: also its Scale's
    generation: int
    observed_generation: int
    # A Deployment's rollout under way: pods of an older template still run beside the new ones (status.replicas
    # above status.updatedReplicas; upstream's DeploymentComplete needs them equal). Its ready count then holds
    # surge pods started before any scale-up, so a scale-up met then measures no start-up.
    rolling: bool = False

    @classmethod
    def of(cls, obj: Mapping[str, Any], kind: str) -> Workload | None:
        meta, spec, status = (obj.get(k) for k in ("metadata", "spec", "status"))
        if not isinstance(meta, dict):
            return None
        spec = spec if isinstance(spec, dict) else {}
        status = status if isinstance(status, dict) else {}
        return cls(
            uid=str(meta.get("uid") or ""),
            replicas=_int(spec.get("replicas"), 1),  # apps/v1 defaults an absent count to 1
            ready_replicas=_int(status.get("readyReplicas"), 0),
            version=str(meta.get("resourceVersion") or ""),
            generation=_int(meta.get("generation"), 0),
            observed_generation=_int(status.get("observedGeneration"), 0),
            rolling=kind == "Deployment"
            and _int(status.get("replicas"), 0) > _int(status.get("updatedReplicas"), 0),
        )


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass(slots=True)
class ScaleUp:
    """A scale-up this operator asked for, waiting for its ready replicas."""

    key: WorkloadKey
    replicas: int
    asked_at: float
    written_against: str | None  # the resourceVersion the write carried: events at it are from before the write
    generation: int | None = None  # the generation that carries it, once the watch shows it
    rolling: bool = False  # asked during a rollout: not measured when met


class WorkloadCache:
    """What the watches last saw of every workload in the watched scopes, and each one's start-up time."""

    def __init__(self, now: Callable[[], float] = time.time, *, list_wait: float = LIST_WAIT) -> None:
        """`now`: the clock start-up times are measured by (the operator's). `list_wait`: see await_listed."""
        self.now = now
        self.list_wait = list_wait
        self._expected: set[tuple[str, str | None]] = set()  # (kind, scope) whose watch has not listed yet
        self.listed = asyncio.Event()  # every expected watch has listed once (or may not list)
        self.listed.set()
        self._list_deadline: float | None = None
        self._objects: dict[WorkloadKey, Workload] = {}
        self._synced: dict[str, set[str | None]] = {kind: set() for _, kind in WATCHED_KINDS}
        self._asks: dict[WorkloadKey, list[ScaleUp]] = {}
        self._startup: dict[WorkloadKey, StartupTimes] = {}

    # ---------------------------------------------------------------------------------------------- first list

    def expect(self, kind: str, scope: str | None) -> None:
        """A watch will serve this kind in this scope: until it has listed once, reads wait for it."""
        self._expected.add((kind, scope))
        self.listed.clear()

    def _listed(self, kind: str, scope: str | None) -> None:
        self._expected.discard((kind, scope))
        if not self._expected:
            self.listed.set()

    async def await_listed(self) -> None:
        """Just started: wait for the first list of every watched kind, so that thousands of first ticks read
        their targets from it rather than each through a GET of its /scale. At most `list_wait` seconds from the
        first read that waits, over all reads: a list that keeps failing must not hold every tick for long."""
        loop = asyncio.get_running_loop()
        if self._list_deadline is None:
            self._list_deadline = loop.time() + self.list_wait
        remaining = self._list_deadline - loop.time()
        if remaining > 0 and not self.listed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.listed.wait(), remaining)

    # ---------------------------------------------------------------------------------------------- reads

    def watches(self, kind: str, namespace: str) -> bool:
        """Whether a watch that has listed at least once covers this kind in this namespace."""
        scopes = self._synced.get(kind) or set()
        return None in scopes or namespace in scopes

    def get(self, kind: str, namespace: str, name: str) -> Workload | None:
        return self._objects.get((kind, namespace, name))

    def startup_seconds(self, kind: str, namespace: str, name: str) -> float | None:
        """The start-up time of this workload the policy assumes: the lower median of its last measured (None
        until one is)."""
        times = self._startup.get((kind, namespace, name))
        return None if times is None else times.value

    def __len__(self) -> int:
        return len(self._objects)

    # ---------------------------------------------------------------------------------------------- scale-ups

    def asked(self, kind: str, namespace: str, name: str, replicas: int, written_against: str | None) -> ScaleUp:
        """Note, right before the write, that we are asking for `replicas`; `withdraw` it if the write fails."""
        key = (kind, namespace, name)
        seen = self._objects.get(key)
        ask = ScaleUp(key, replicas, self.now(), written_against, rolling=seen is not None and seen.rolling)
        asks = self._asks.setdefault(key, [])
        asks.append(ask)
        del asks[:-MAX_ASKS]
        return ask

    def withdraw(self, ask: ScaleUp) -> None:
        asks = self._asks.get(ask.key)
        if asks is not None and ask in asks:
            asks.remove(ask)
            if not asks:
                del self._asks[ask.key]

    def _follow(self, key: WorkloadKey, workload: Workload) -> None:
        """Move the scale-ups waiting on this workload along what the watch now shows."""
        asks = self._asks.get(key)
        if not asks:
            return
        now = self.now()
        measured: float | None = None
        kept = []
        for ask in asks:
            if ask.generation is None:
                if workload.version != ask.written_against and workload.replicas >= ask.replicas:
                    ask.generation = workload.generation  # our write (or a larger one) is in the spec now
                elif now - ask.asked_at > UNSEEN_ASK_TTL:
                    continue
            if ask.generation is not None:
                if workload.replicas < ask.replicas:
                    continue  # scaled down before the pods came: this start-up will not be measured
                if workload.observed_generation >= ask.generation and workload.ready_replicas >= ask.replicas:
                    if not (ask.rolling or workload.rolling):
                        measured = now - ask.asked_at  # the later ask of those met together: the last measured
                    continue
            kept.append(ask)
        if kept:
            self._asks[key] = kept
        else:
            del self._asks[key]
        if measured is not None:
            self._startup.setdefault(key, StartupTimes()).add(measured)

    # ---------------------------------------------------------------------------------------------- watch events

    def handler(self, kind: str) -> WorkloadHandler:
        """The RuleWatcher handler that keeps this kind's workloads current."""
        return WorkloadHandler(self, kind)

    def _sync(self, kind: str, scope: str | None, objects: list[dict[str, Any]]) -> None:
        seen = set()
        for obj in objects:
            key = self._upsert(kind, obj)
            if key is not None:
                seen.add(key)
        for key in [k for k in self._objects if k[0] == kind and (scope is None or k[1] == scope)]:
            if key not in seen:
                self._forget(key)
        self._synced[kind].add(scope)
        self._listed(kind, scope)

    def _upsert(self, kind: str, obj: dict[str, Any]) -> WorkloadKey | None:
        meta = obj.get("metadata")
        workload = Workload.of(obj, kind)
        if not isinstance(meta, dict) or workload is None or not meta.get("name"):
            return None
        key = (kind, str(meta.get("namespace") or ""), str(meta["name"]))
        before = self._objects.get(key)
        if before is not None and before.uid != workload.uid:
            self._forget(key)  # deleted and created again under the same name: its measurements are not this one's
        self._objects[key] = workload
        self._follow(key, workload)
        return key

    def _forget(self, key: WorkloadKey) -> None:
        self._objects.pop(key, None)
        self._asks.pop(key, None)
        self._startup.pop(key, None)

    def _unwatched(self, kind: str, scope: str | None) -> None:
        """This scope cannot be watched (RBAC): its targets are read through /scale."""
        self._synced[kind].discard(scope)
        for key in [k for k in self._objects if k[0] == kind and (scope is None or k[1] == scope)]:
            self._forget(key)
        self._listed(kind, scope)  # nothing to wait for: its targets are read through /scale


class WorkloadHandler:
    """One kind's watch events into the cache (the RuleHandler protocol)."""

    def __init__(self, cache: WorkloadCache, kind: str) -> None:
        self.cache = cache
        self.kind = kind

    async def sync(self, scope: str | None, objects: list[dict[str, Any]]) -> None:
        self.cache._sync(self.kind, scope, objects)

    async def upsert(self, obj: dict[str, Any]) -> None:
        self.cache._upsert(self.kind, obj)

    async def delete(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            self.cache._forget((self.kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")))


class WorkloadWatch:
    """Keeps the cache in step with one kind's workloads in one scope. Where it may not list them, it logs once,
    leaves the scope to /scale reads, and asks again every `recheck` seconds (RBAC can be granted later)."""

    def __init__(self, api: KubeApi, cache: WorkloadCache, kind: str, *, namespace: str | None = None,
                 watch_timeout: int = 300, recheck: float = 300.0,
                 on_error: Callable[[str], None] | None = None) -> None:
        """`on_error(reason)`: every failure the watch recovers from, as RuleWatcher counts them."""
        plural = next((p for (_, k), p in WATCHED_KINDS.items() if k == kind), None)
        if plural is None:
            raise ValueError(f"{kind} is not a watched workload kind")
        self.api = api
        self.cache = cache
        self.kind = kind
        self.plural = plural
        self.namespace = namespace
        self.watch_timeout = watch_timeout
        self.recheck = recheck
        self.on_error = on_error
        self.watcher: RuleWatcher | None = None
        cache.expect(kind, namespace)

    async def run(self) -> None:
        """Runs until cancelled."""
        path = workloads_path(self.plural, self.namespace)
        scope = self.namespace or "all namespaces"

        def refused(exc: KubeError, first: bool) -> None:
            if first:
                log.warning("not watching %s in %s (%s %s): their targets are read through /scale, ready replicas "
                            "and start-up times stay unknown; grant list and watch on %s (see docs/operations.md, "
                            "RBAC). Asking again every %gs", self.plural, scope, exc.status, exc.reason, self.plural,
                            self.recheck)
            self.cache._unwatched(self.kind, self.namespace)

        if await until_listable(self.api, path, recheck=self.recheck, refused=refused):
            log.info("watching %s in %s", self.plural, scope)
        self.watcher = RuleWatcher(self.api, self.cache.handler(self.kind), namespace=self.namespace,
                                   watch_timeout=self.watch_timeout, path=path, resource=f"{self.kind}s",
                                   on_error=self._failed)
        await self.watcher.run()

    def _failed(self, reason: str) -> None:
        if reason in ("Forbidden", "Unauthorized"):
            # RBAC taken away while watching: what the cache holds will not change again, so stop trusting it
            # (targets go back to /scale) until a list succeeds again.
            self.cache._unwatched(self.kind, self.namespace)
        if self.on_error is not None:
            self.on_error(reason)


def workload_watches(api: KubeApi, cache: WorkloadCache, scopes: list[str | None], *, watch_timeout: int = 300,
                     on_error: Callable[[str, str], None] | None = None) -> Iterator[WorkloadWatch]:
    """One watch per watched kind and scope (all namespaces, or each watched one), as the rule watch has.
    `on_error(plural, reason)`: a failure one of them recovered from."""
    for scope in scopes:
        for (_, kind), plural in WATCHED_KINDS.items():
            counted = None if on_error is None else functools.partial(on_error, plural)
            yield WorkloadWatch(api, cache, kind, namespace=scope, watch_timeout=watch_timeout, on_error=counted)
