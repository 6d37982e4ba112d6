"""The Kubernetes scale target: any kind with a scale subresource, through the generic `.../{name}/scale` path.

It goes through the operator's `KubeApi` (the asyncio client, `kubernetes.aio`, rather than the sync client in a
thread: the `Target` protocol is async, a cancelled tick then really cancels the request, and the operator needs no
thread pool sized to the number of rules). The caller owns the `KubeApi` (one per operator, closed on shutdown), so
tests hand in one configured for the fake API server. Failed answers are read by the one map of
controller/kube/errors.py; here they are only worded for a user (what to grant, what to fix).

Reads of a watched kind (Deployments, StatefulSets: controller/kube/workloads.py) come from the watch's cache, with
no request, and carry readyReplicas and the measured start-up time; other kinds, and watched ones whose object the
cache does not hold (not yet listed, or the list is forbidden), are read through their scale subresource.

Writes are `PUT`s of an autoscaling/v1 Scale carrying the resourceVersion that was read: if anyone changed the
target since (a user, a rollout, another autoscaler), the server answers 409 and the reconciler reads and decides
again instead of overwriting a newer decision. A workload's resourceVersion is its Scale's, so the version from the
watch serves as well as one from a GET of the Scale.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from controller.kube.api import KubeApi
from controller.kube.errors import KubeError
from controller.kube.inflight import mark_pods
from controller.kube.workloads import WATCHED_KINDS, WATCHED_VERSION, Workload, WorkloadCache
from controller.model.rule import InFlightEndpoint, ScaleTargetRef
from controller.targets.base import ScaleState, TargetConflict, TargetError

# Kinds whose plural is known without asking discovery (group, kind) -> plural.
KNOWN_PLURALS: Mapping[tuple[str, str], str] = {
    ("apps", "Deployment"): "deployments",
    ("apps", "StatefulSet"): "statefulsets",
    ("apps", "ReplicaSet"): "replicasets",
    ("", "ReplicationController"): "replicationcontrollers",
}


class TargetThrottled(TargetError):
    """The API server asked us to slow down (429): retry after `retry_after` seconds (None: it did not say)."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__("TooManyRequests", message, retryable=True)
        self.retry_after = retry_after


def split_api_version(api_version: str) -> tuple[str, str]:
    """`apps/v1` -> ("apps", "v1"); `v1` -> ("", "v1")."""
    group, _, version = api_version.rpartition("/")
    return group, version


class KubernetesScaleTarget:
    """One workload in one namespace, read and scaled through its scale subresource."""

    def __init__(self, api: KubeApi, ref: ScaleTargetRef, namespace: str, *, plural: str | None = None,
                 request_timeout: float = 10.0, workloads: WorkloadCache | None = None,
                 in_flight: InFlightEndpoint | None = None) -> None:
        """`workloads`: the watch cache to read a Deployment or StatefulSet from (None: always read /scale).
        `in_flight`: where the pods answer their in-flight counts, written to their deletion cost before a
        scale-in (controller/kube/inflight.py). Reads wait for the api's client-side request limit; a scale write
        takes its token at once (see controller/kube/ratelimit.py)."""
        self._api = api
        self.in_flight = in_flight
        self._ref = ref
        self.namespace = namespace
        self.group, self.version = split_api_version(ref.api_version)
        self._plural = plural or KNOWN_PLURALS.get((self.group, ref.kind))
        self.request_timeout = request_timeout
        watched = (self.group, ref.kind) in WATCHED_KINDS and ref.api_version == WATCHED_VERSION
        self._workloads = workloads if watched else None
        # The version the cache showed when we learned it was out of date (our own write, or a 409), with what our
        # write returned (None after a 409): until the watch moves past it, the cache is not trusted.
        self._superseded: tuple[str, ScaleState | None] | None = None

    @property
    def ref(self) -> ScaleTargetRef:
        return self._ref

    @property
    def description(self) -> str:
        """How messages name the target: `Deployment shop/orders-worker (apps/v1)`."""
        return f"{self._ref.kind} {self.namespace}/{self._ref.name} ({self._ref.api_version})"

    async def read(self) -> ScaleState:
        """The target's spec.replicas and the resourceVersion to write against: from the watch when it holds the
        target (with readyReplicas and the start-up time), else from a GET of its Scale (ready unknown). Right after
        start-up, a watched kind waits (a bounded while, see WorkloadCache.await_listed) for its first list rather
        than read /scale: 10,000 first ticks would otherwise be 10,000 GETs."""
        if self._workloads is not None and not self._workloads.listed.is_set():
            await self._workloads.await_listed()
        cached = self._from_watch()
        if cached is not None:
            return cached
        return _state(await self._request("GET", await self._scale_path()))

    def _watched(self) -> Workload | None:
        cache = self._workloads
        if cache is None or not cache.watches(self._ref.kind, self.namespace):
            return None
        return cache.get(self._ref.kind, self.namespace, self._ref.name)

    def _from_watch(self) -> ScaleState | None:
        workload = self._watched()
        if workload is None:
            return None
        assert self._workloads is not None
        startup = self._workloads.startup_seconds(self._ref.kind, self.namespace, self._ref.name)
        if self._superseded is not None:
            stale, written = self._superseded
            if workload.version == stale:  # the watch has not shown our write (or the change that beat us) yet
                if written is None:
                    return None
                return dataclasses.replace(written, ready_replicas=workload.ready_replicas, startup_seconds=startup)
            self._superseded = None
        return ScaleState(replicas=workload.replicas, ready_replicas=workload.ready_replicas,
                          version=workload.version or None, watched=True, startup_seconds=startup)

    async def scale(self, replicas: int, read: ScaleState) -> ScaleState:
        """Set spec.replicas, only if the target has not changed since `read` (TargetConflict otherwise)."""
        metadata: dict[str, Any] = {"name": self._ref.name, "namespace": self.namespace}
        if read.version is not None:
            metadata["resourceVersion"] = read.version
        cache = self._workloads
        workload = self._watched()
        if workload is not None and workload.uid and workload.version == read.version:
            # A UID precondition, as the Scale registry checks it: a target deleted and created again under the same
            # name is not the one we decided for.
            metadata["uid"] = workload.uid
        body = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": metadata, "spec": {"replicas": replicas}}
        ask = None
        if cache is not None and workload is not None and replicas > read.replicas:
            ask = cache.asked(self._ref.kind, self.namespace, self._ref.name, replicas, read.version)
        removal = await self._choose_removed(read.replicas, replicas)
        try:
            written = _state(await self._request("PUT", await self._scale_path(), body))
        except TargetError as error:
            if cache is not None and ask is not None:
                cache.withdraw(ask)
            if isinstance(error, TargetConflict) and workload is not None:
                # The server is past what the cache shows: read the Scale until the watch has moved on.
                self._superseded = (workload.version, None)
            raise
        if removal is not None:
            written = dataclasses.replace(written, removal=removal[0], removal_failed=removal[1],
                                          removal_blind=removal[2])
        if cache is None or workload is None:
            return written
        written = dataclasses.replace(
            written, ready_replicas=workload.ready_replicas, watched=True,
            startup_seconds=cache.startup_seconds(self._ref.kind, self.namespace, self._ref.name))
        # Until the watch shows our write, the cache's version is the one it replaced (even when `read` came from a
        # GET after a 409, and the cache is further behind still).
        self._superseded = (workload.version, written)
        return written

    async def _choose_removed(self, before: int, after: int) -> tuple[str, bool, bool] | None:
        """Before a scale-in of a rule with `inFlight`: write the pods' in-flight counts to their deletion cost.
        Returns the words for the scale-in's event, whether the choice failed, and whether the pods that go are
        other than the least busy of all (None: nothing to choose)."""
        if self.in_flight is None or after >= before:
            return None
        try:
            scale = await self._request("GET", await self._scale_path())
        except TargetError as error:
            return f"pods removed as the ReplicaSet chooses: {error.message}", True, True
        selector = ((scale.get("status") or {}).get("selector") if isinstance(scale, dict) else None) or ""
        if not selector:
            return (f"pods removed as the ReplicaSet chooses: {self.description} reports no pod selector", True,
                    True)
        marking = await mark_pods(self._api, self.namespace, str(selector), self.in_flight,
                                  request_timeout=self.request_timeout)
        return marking.words(before, after), marking.problem is not None, not marking.least_busy_of_all

    # ----------------------------------------------------------------------------------------------------------

    def _prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    async def _scale_path(self) -> str:
        plural = self._plural or await self._discover_plural()
        return f"{self._prefix()}/namespaces/{self.namespace}/{plural}/{self._ref.name}/scale"

    async def _discover_plural(self) -> str:
        """Ask discovery which resource serves the kind, and check it has a scale subresource."""
        resources = await self._request("GET", self._prefix(), what=f"the API group {self._ref.api_version}")
        listed = resources.get("resources") if isinstance(resources, dict) else None
        names = [r for r in listed or [] if isinstance(r, dict)]
        plural = next((str(r["name"]) for r in names if r.get("kind") == self._ref.kind and "/" not in str(r["name"])),
                      None)
        if plural is None:
            raise TargetError("UnknownKind", f"{self.description}: the API server serves no kind {self._ref.kind} in "
                              f"{self._ref.api_version}; check scaleTargetRef.kind and apiVersion", retryable=False)
        if not any(r.get("name") == f"{plural}/scale" for r in names):
            raise TargetError("NotScalable", f"{self.description}: {plural} in {self._ref.api_version} has no scale "
                              "subresource, so it cannot be scaled", retryable=False)
        self._plural = plural
        return plural

    async def _request(self, method: str, path: str, body: object = None, *, what: str | None = None) -> Any:
        try:
            # A scale is never held back behind status writes: it charges the limiter instead of waiting.
            return await self._api.call(method, path, body=body, timeout=self.request_timeout,
                                        limit="wait" if method == "GET" else "charge")
        except KubeError as error:
            raise self._error(error, what or self.description) from error

    def _error(self, error: KubeError, what: str) -> TargetError:
        status = error.status
        reason, message = error.stated.reason, error.stated.message or error.stated.text
        detail = f" ({message})" if message else ""
        if status == 0:
            return TargetError("Unavailable", f"{what}: the API server could not be reached: {error.message}",
                               retryable=True)
        if status == 409:
            return TargetConflict(f"{what} changed since it was read{detail}")
        if status == 404:
            return TargetError("NotFound", f"{what} not found: create it, or fix scaleTargetRef{detail}",
                               retryable=False)
        if status == 403:
            return TargetError("Forbidden", f"{what}: the operator may not use the scale subresource; grant get, "
                               f"update and patch on its /scale in RBAC{detail}", retryable=False)
        if status == 401:
            return TargetError("Unauthorized", f"{what}: the API server rejected the operator's credentials{detail}",
                               retryable=False)
        if status == 429:
            return TargetThrottled(f"{what}: the API server is throttling requests{detail}", error.retry_after)
        if status >= 500:
            return TargetError(reason or "ServerError", f"{what}: the API server failed (HTTP {status}){detail}",
                               retryable=True)
        return TargetError(reason or f"HTTP{status}", f"{what}: HTTP {status}{detail}", retryable=False)


def _state(scale: Any) -> ScaleState:
    if not isinstance(scale, dict):
        raise TargetError("BadResponse", f"the API server answered {type(scale).__name__}, not a Scale")
    spec = scale.get("spec") or {}
    version = (scale.get("metadata") or {}).get("resourceVersion")
    # A Scale says how many replicas exist (status.replicas), not how many are ready.
    return ScaleState(replicas=int(spec.get("replicas") or 0), ready_replicas=None,
                      version=str(version) if version else None)
