"""The Kubernetes scale target: any kind with a scale subresource, through the generic `.../{name}/scale` path.

It uses `kubernetes.aio` rather than the sync client in a thread: the `Target` protocol is async, a cancelled
tick then really cancels the request (a thread keeps blocking on its socket), and the operator needs no thread
pool sized to the number of rules. The caller owns the `ApiClient` (one per operator, closed on shutdown), so
tests hand in a client configured for the fake API server.

Writes are `PUT`s of an autoscaling/v1 Scale carrying the resourceVersion that was read: if anyone changed the
target since (a user, a rollout, another autoscaler), the server answers 409 and the reconciler reads and decides
again instead of overwriting a newer decision.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
from kubernetes.aio.client import ApiClient
from kubernetes.aio.client.exceptions import ApiException

from controller.spec import ScaleTargetRef
from controller.targets.base import ScaleState, TargetConflict, TargetError

log = logging.getLogger(__name__)

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

    def __init__(self, api: ApiClient, ref: ScaleTargetRef, namespace: str, *, plural: str | None = None,
                 request_timeout: float = 10.0, read_ready: bool = False) -> None:
        """`read_ready`: also GET the workload for status.readyReplicas (a Scale does not carry it). That needs
        `get` on the workload kind itself; without it (403) ready replicas stay unknown and are not asked again."""
        self._api = api
        self.read_ready = read_ready
        self._ref = ref
        self.namespace = namespace
        self.group, self.version = split_api_version(ref.api_version)
        self._plural = plural or KNOWN_PLURALS.get((self.group, ref.kind))
        self.request_timeout = request_timeout

    @property
    def ref(self) -> ScaleTargetRef:
        return self._ref

    @property
    def description(self) -> str:
        """How messages name the target: `Deployment shop/orders-worker (apps/v1)`."""
        return f"{self._ref.kind} {self.namespace}/{self._ref.name} ({self._ref.api_version})"

    async def read(self) -> ScaleState:
        """The target's Scale: spec.replicas and the resourceVersion to write against."""
        path = await self._scale_path()
        state = _state(await self._request("GET", path))
        if not self.read_ready:
            return state
        return dataclasses.replace(state, ready_replicas=await self._ready_replicas(path.removesuffix("/scale")))

    async def _ready_replicas(self, path: str) -> int | None:
        """status.readyReplicas of the workload (absent means 0), or None when it cannot be read."""
        try:
            workload = await self._request("GET", path)
        except TargetError as error:
            if error.code == "Forbidden":
                self.read_ready = False  # RBAC will not change by itself: stop asking
                log.warning("%s: cannot read ready replicas (%s); reporting them as unknown", self.description,
                            error.message)
            return None
        status = workload.get("status") if isinstance(workload, dict) else None
        ready = status.get("readyReplicas") if isinstance(status, dict) else None
        return int(ready) if isinstance(ready, int) else 0

    async def scale(self, replicas: int, read: ScaleState) -> ScaleState:
        """Set spec.replicas, only if the target has not changed since `read` (TargetConflict otherwise)."""
        metadata: dict[str, Any] = {"name": self._ref.name, "namespace": self.namespace}
        if read.version is not None:
            metadata["resourceVersion"] = read.version
        body = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": metadata, "spec": {"replicas": replicas}}
        scale = await self._request("PUT", await self._scale_path(), body)
        return _state(scale)

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
            return await self._api.call_api(
                path, method,
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                body=body,
                response_types_map={200: "object", 201: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=self.request_timeout,
            )
        except ApiException as error:
            raise self._error(error, what or self.description) from error
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise TargetError("Unavailable", f"{what or self.description}: the API server could not be reached: "
                              f"{error or type(error).__name__}", retryable=True) from error

    def _error(self, error: ApiException, what: str) -> TargetError:
        status = int(error.status or 0)
        reason, message = _status_of(error)
        detail = f" ({message})" if message else ""
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
            return TargetThrottled(f"{what}: the API server is throttling requests{detail}",
                                   _retry_after(error.headers))
        if status >= 500 or status == 0:
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


def _status_of(error: ApiException) -> tuple[str, str]:
    """The reason and message of the Status body the API server sent, when it sent one."""
    body = error.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    try:
        status = json.loads(body) if isinstance(body, str) and body else {}
    except json.JSONDecodeError:
        return "", str(body)[:200]
    if not isinstance(status, dict):
        return "", ""
    return str(status.get("reason") or ""), str(status.get("message") or "")


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
