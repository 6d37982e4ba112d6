"""A fake kube-apiserver on 127.0.0.1 (HTTPS, see tls.py) for tests, reached by the official client and kubectl
through a kubeconfig.

Run it in-process (`FakeKube().start()`, a thread) or as a subprocess (`python -m tests.fakekube --port 0
--kubeconfig-out FILE`). Tests steer it through this object or, for a subprocess, the `/_fake/*` admin endpoints:
faults (429 with Retry-After, 500, latency), dropped watches, compaction, and a Deployment "controller" that makes
status follow spec.replicas.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import copy
import datetime as dt
import json
import re
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.fakekube import deployments as fake_deployments
from tests.fakekube import discovery, lifecycle, openapi, options, printer, rbac, table, tls
from tests.fakekube import pods as fake_pods
from tests.fakekube.resources import (
    CORE_EVENTS,
    DEPLOYMENTS,
    EVENTS_V1,
    NAMESPACES,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    Obj,
    ResourceType,
)
from tests.fakekube.selectors import SelectorError, parse_field_selector, parse_label_selector, selectable_fields
from tests.fakekube.store import ApiError, Store, WatchEvent, bad_request, not_found, now_rfc3339

TOKEN = "fake-token"


@dataclass
class Fault:
    """Answer the next `times` requests matching `method` and the `path` regex (searched in path?query)."""

    path: str = ".*"
    method: str = ".*"
    status: int | None = None  # None: only add latency
    times: int | None = 1  # None: every matching request until cleared
    retry_after: int | None = None
    latency: float = 0.0
    message: str = ""

    def matches(self, method: str, target: str) -> bool:
        return bool(re.fullmatch(self.method, method, re.IGNORECASE)) and bool(re.search(self.path, target))

    @classmethod
    def from_json(cls, body: Obj) -> Fault:
        return cls(path=str(body.get("path", ".*")), method=str(body.get("method", ".*")),
                   status=body.get("status"), times=body.get("times", 1), retry_after=body.get("retryAfter"),
                   latency=float(body.get("latency", 0.0)), message=str(body.get("message", "")))


_FAULT_REASONS = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
                  403: "Forbidden", 401: "Unauthorized", 404: "NotFound", 409: "Conflict"}


def _fault_error(fault: Fault) -> ApiError:
    assert fault.status is not None
    code = fault.status
    reason = _FAULT_REASONS.get(code, "Unknown")
    message = fault.message or {
        429: "Too many requests, please try again later.",
        500: "Internal error occurred: injected fault",
        503: "The server is currently unable to handle the request",
    }.get(code, f"injected fault {code}")
    details: Obj | None = None
    headers: dict[str, str] = {}
    if fault.retry_after is not None:
        details = {"retryAfterSeconds": fault.retry_after}
        headers["Retry-After"] = str(fault.retry_after)
    return ApiError(code, reason, message, details, headers)


@dataclass(frozen=True)
class RequestRecord:
    method: str
    path: str
    query: str
    content_type: str
    status: int
    user_agent: str = ""
    at: float = 0.0  # time.monotonic() when answered: requests per second can be counted


@dataclass
class _Route:
    rt: ResourceType
    namespace: str | None  # None: all namespaces (or a cluster-scoped kind)
    name: str | None
    subresource: str


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True
    # socketserver's default listen backlog is 5: a client opening a pool of connections at once (the operator
    # starting a thousand rules) overflowed it and waited for SYN retransmits (1 s, 3 s, 7 s...).
    request_queue_size = 1024

    def __init__(self, fake: FakeKube, address: tuple[str, int], context: ssl.SSLContext) -> None:
        self.fake = fake
        self.context = context
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        # The handshake waits for the handler thread (_Handler.setup): a slow client must not stall accept().
        conn = self.context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        with self.connections_lock:
            self.connections.add(conn)
        return conn, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that refuses the certificate (a kubeconfig with another CA) or hangs up mid-handshake is the
        # client's failure, reported on its side; socketserver would print a traceback here for each one.
        if isinstance(sys.exc_info()[1], ssl.SSLError | OSError):
            return
        super().handle_error(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            for conn in list(self.connections):
                with contextlib.suppress(OSError):
                    # The TCP shutdown under the TLS layer: SSLSocket.shutdown() would also drop its TLS state
                    # while a handler thread may still be reading through it.
                    socket.socket.shutdown(conn, socket.SHUT_RDWR)


class WorkloadControllerError(AssertionError):
    """The fake's workload controller failed to make pods (a pod hook, the test's code, raised): raised by
    FakeKube.stop, so that the test fails and says why."""


class FakeKube:
    """The fake API server. Everything a test sees goes through HTTP; the helpers below read the same store."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, history_limit: int = 1000,
                 bookmark_interval: float = 1.0, ready_delay: float | None = 0.0,
                 namespace_termination_delay: float = 0.0, pods: bool = False,
                 pod_hook: fake_pods.PodHook | None = None) -> None:
        """`pods`: Deployments and ReplicaSets get Pod objects that follow spec.replicas (see `_WorkloadController`);
        `pod_hook(pod)` may edit each such pod before it is stored (see `set_pod_hook`)."""
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the fake API server listens on loopback only")
        self.store = Store(history_limit=history_limit)
        self.bookmark_interval = bookmark_interval
        self.faults: list[Fault] = []
        self.requests: list[RequestRecord] = []
        self.request_total = 0  # every API request ever answered (the log above keeps the last 5,000)
        # Requests from queuescale operators (by User-Agent), by method and resource: "PATCH queuescalers/status".
        self.operator_requests: collections.Counter[str] = collections.Counter()
        # (method, path) of requests as they arrive, before any injected latency: a test can act while one of
        # them is held (e.g. change an object between a client's read and its delayed write). Last 5,000.
        self.arrived: list[tuple[str, str]] = []
        self._watch_epoch = 0
        self.open_watches = 0  # watch streams now open: a drop_watches() ends each of them
        self._graceful_drop = False
        self._stopping = threading.Event()
        self.certificate = tls.serving_certificate()
        self._server = _Server(self, (host, port), tls.default_server_context())
        self._thread: threading.Thread | None = None
        self.controller = _WorkloadController(self.store, ready_delay, self._stopping, pods=pods, pod_hook=pod_hook)
        # A deleted namespace stays Terminating this long before its content goes (0: gone when answered).
        self.store.namespace_termination_delay = namespace_termination_delay
        self.namespaces = lifecycle.NamespaceController(self.store, self._stopping)
        self.store.on_write.append(self.controller.observe)

    # ----------------------------------------------------------------------------------------------------------
    # Lifecycle

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def client_ssl_context(self) -> ssl.SSLContext:
        """An `ssl` context trusting this server's CA, for urllib or httpx (`verify=`)."""
        return tls.client_context(self.certificate)

    def start(self) -> FakeKube:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fakekube:{self.port}", daemon=True)
        self._thread.start()
        self.controller.start()
        self.namespaces.start()
        return self

    def stop(self) -> None:
        """Stop serving, end every watch and connection, and join every thread this server started."""
        self._stopping.set()
        with self.store.lock:
            self.store.changed.notify_all()
        self._server.shutdown()
        self._server.close_connections()
        self._server.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.controller.join()
        self.namespaces.join()
        if self.controller.failures:
            raise WorkloadControllerError("the fake's workload controller failed, so some pods were never made:\n  "
                               + "\n  ".join(self.controller.failures))

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def kubeconfig(self, namespace: str = "default", *, service_account: tuple[str, str] | None = None) -> Obj:
        """A kubeconfig for the admin, or for a ServiceAccount `(namespace, name)` whose RBAC is enforced; it trusts
        the server's CA (`certificate-authority-data`), as a real cluster's kubeconfig does."""
        token = TOKEN if service_account is None else f"{rbac.SA_TOKEN_PREFIX}{':'.join(service_account)}"
        ca_data = base64.b64encode(self.certificate.ca_pem).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url, "certificate-authority-data": ca_data}}],
            "users": [{"name": "fake", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
            "current-context": "fake",
        }

    def write_kubeconfig(self, path: Path | str, namespace: str = "default", *,
                         service_account: tuple[str, str] | None = None) -> Path:
        target = Path(path)
        target.write_text(yaml.safe_dump(self.kubeconfig(namespace, service_account=service_account)))
        return target

    # ----------------------------------------------------------------------------------------------------------
    # Faults and disruptions

    def add_fault(self, fault: Fault | None = None, **kwargs: Any) -> Fault:
        """Add a fault (a `Fault`, or its fields as keywords); faults apply in the order added."""
        added = fault or Fault(**kwargs)
        with self.store.lock:
            self.faults.append(added)
        return added

    def clear_faults(self) -> None:
        with self.store.lock:
            self.faults.clear()

    def drop_watches(self, *, graceful: bool = False) -> None:
        """End every open watch: abruptly (the connection breaks mid-stream) or gracefully (the stream ends)."""
        with self.store.lock:
            self._watch_epoch += 1
            self._graceful_drop = graceful
            self.store.changed.notify_all()

    def compact(self) -> int:
        """Forget the event history: a watch from any resourceVersion before now gets 410 Gone."""
        return self.store.compact()

    def set_ready_delay(self, seconds: float | None) -> None:
        """Seconds before a workload's status follows spec.replicas; None stops the controller (pods never come)."""
        self.controller.set_delay(seconds)

    def set_pod_hook(self, hook: fake_pods.PodHook | None) -> None:
        """Call `hook(pod)` on every pod the workload controller makes (with `pods=True`), before it is stored: the
        pod's metadata, spec and the status it is about to report, to edit in place. A test artifact: e.g. a distinct
        containerPort on each pod, since every pod of the fake shares the IP 127.0.0.1."""
        with self.store.lock:
            self.controller.pod_hook = hook

    def workload_pods(self, name: str, namespace: str = "default", kind: str = "Deployment") -> list[Obj]:
        """The active pods of a Deployment (those of its ReplicaSets), a ReplicaSet or a StatefulSet, by name (with
        `pods=True`)."""
        workload = self.get("apps/v1", kind, name, namespace)
        with self.store.lock:
            sets = self.controller.owned_sets(workload) if kind == "Deployment" else [workload]
            found = [pod for rs in sets for pod in self.controller.owned_pods(rs)]
            return [self.store.get(PODS, namespace, pod["metadata"]["name"])
                    for pod in sorted(found, key=lambda pod: str(pod["metadata"]["name"]))]

    def _take_fault(self, method: str, target: str) -> Fault | None:
        with self.store.lock:
            for fault in self.faults:
                if fault.matches(method, target) and (fault.times is None or fault.times > 0):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    # ----------------------------------------------------------------------------------------------------------
    # Helpers for tests (they bypass HTTP, not the registry rules)

    def resource(self, api_version: str, kind: str) -> ResourceType:
        group, _, version = api_version.rpartition("/")
        with self.store.lock:
            for rt in self.store.types.values():
                if rt.group == group and rt.version == version and (kind in (rt.kind, rt.plural)):
                    return rt
        raise KeyError(f"the fake API server does not serve {kind} in {api_version}")

    def ensure_namespace(self, namespace: str) -> None:
        with self.store.lock:
            if ("", namespace) not in self.store.objects[NAMESPACES.key]:
                self.store.create(NAMESPACES, "", {"metadata": {"name": namespace}})

    def create(self, obj: Obj) -> Obj:
        """Create an object from a manifest (its namespace, default "default", is created if missing)."""
        rt = self.resource(str(obj["apiVersion"]), str(obj["kind"]))
        namespace = str(obj.get("metadata", {}).get("namespace") or "default") if rt.namespaced else ""
        if rt.namespaced:
            self.ensure_namespace(namespace)
        return self.store.create(rt, namespace, obj)

    def get(self, api_version: str, kind: str, name: str, namespace: str = "default") -> Obj:
        rt = self.resource(api_version, kind)
        return self.store.get(rt, namespace if rt.namespaced else "", name)

    def list_objects(self, api_version: str, kind: str, namespace: str | None = None) -> list[Obj]:
        return self.store.list(self.resource(api_version, kind), namespace)[0]

    def events(self, namespace: str | None = None) -> list[Obj]:
        """Every Event (core v1 and events.k8s.io/v1) in a namespace, oldest first."""
        found = self.store.list(CORE_EVENTS, namespace)[0] + self.store.list(EVENTS_V1, namespace)[0]
        return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))

    def table(self, resource: str = "qs", namespace: str | None = "default", *, wide: bool = False) -> str:
        """What `kubectl get <resource> [-n ns | -A] [-o wide]` prints, from the server's Table."""
        rt = self.store.find_kind(resource)
        if rt is None:
            raise KeyError(f'the server doesn\'t have a resource type "{resource}"')
        return printer.table(rt, self.store.list(rt, namespace)[0], all_namespaces=namespace is None, wide=wide)

    # ----------------------------------------------------------------------------------------------------------
    # Watches (run in the handler thread of the request)

    def watch(self, handler: _Handler, route: _Route, params: dict[str, str]) -> None:
        rt = route.rt
        match = _matcher(params, rt)
        timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        deadline = time.monotonic() + timeout if timeout is not None else None
        bookmarks = _parse_bool(params.get("allowWatchBookmarks"))
        requested = params.get("resourceVersion", "")
        as_table = _table_events(rt, handler.headers.get("Accept", ""), params.get("includeObject") or "Metadata")
        store = self.store

        def in_scope(obj: Obj | None) -> bool:
            if obj is None:
                return False
            namespace = obj["metadata"].get("namespace", "")
            return (route.namespace is None or namespace == route.namespace) and match(obj)

        with store.lock:
            epoch = self._watch_epoch
            initial: list[Obj] = []
            if requested in ("", "0"):
                items, cursor = store.list(rt, route.namespace, match)
                initial = [{"type": "ADDED", "object": item} for item in items]
            else:
                try:
                    cursor = int(requested)
                except ValueError:
                    raise bad_request(f'invalid resource version "{requested}"') from None
        with store.lock:
            self.open_watches += 1  # counted once its epoch is taken: a drop from now on ends it
        try:
            handler.start_chunked()
            if requested not in ("", "0") and cursor < store.compacted:
                handler.send_chunk(_expired(cursor, store.compacted))
                handler.end_chunked()
                return
            for added in initial:
                if not handler.send_chunk(as_table(added)):
                    return
            next_bookmark = time.monotonic() + self.bookmark_interval
            while True:
                to_send: list[Obj] = []
                with store.lock:
                    while True:
                        if self._stopping.is_set():
                            handler.close_connection = True
                            handler.end_chunked()
                            return
                        if self._watch_epoch != epoch:
                            if self._graceful_drop:
                                handler.end_chunked()
                            handler.close_connection = True
                            return
                        if cursor < store.compacted:
                            # The watch fell behind the retained window: the real server ends it with 410.
                            handler.send_chunk(_expired(cursor, store.compacted))
                            handler.end_chunked()
                            return
                        now = time.monotonic()
                        if deadline is not None and now >= deadline:
                            handler.end_chunked()
                            return
                        events = [e for e in store.events_after(cursor) if e.key == rt.key]
                        for event in events:
                            shown = _filtered(event, in_scope, rt)
                            if shown is not None:
                                to_send.append(shown)
                        cursor = store.revision
                        if to_send:
                            break
                        if not _still_served(store, rt):
                            # Its CRD is gone: the real server closes the watch once the DELETED events are out.
                            handler.end_chunked()
                            return
                        if bookmarks and now >= next_bookmark:
                            to_send.append({"type": "BOOKMARK", "object": {
                                "kind": rt.kind, "apiVersion": rt.api_version,
                                "metadata": {"resourceVersion": str(cursor)}}})
                            next_bookmark = now + self.bookmark_interval
                            break
                        wait = 0.25
                        if deadline is not None:
                            wait = min(wait, max(0.0, deadline - now))
                        if bookmarks:
                            wait = min(wait, max(0.0, next_bookmark - now))
                        store.changed.wait(wait)
                for outgoing in to_send:
                    if not handler.send_chunk(as_table(outgoing)):
                        return
        finally:
            with store.lock:
                self.open_watches -= 1


def _parse_bool(value: str | None) -> bool:
    """Go's strconv.ParseBool, as the server parses query flags (the Python client sends `watch=True`)."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def _expired(requested: int, oldest: int) -> Obj:
    return {"type": "ERROR", "object": ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")
            .status()}


def _filtered(event: WatchEvent, in_scope: Callable[[Obj | None], bool], rt: ResourceType) -> Obj | None:
    """The event a filtered watch sends: an object entering the selection is ADDED, leaving it DELETED."""
    now_in = in_scope(event.object)
    was_in = in_scope(event.previous)
    if event.type == "MODIFIED":
        kind = "MODIFIED" if now_in and was_in else "ADDED" if now_in else "DELETED" if was_in else None
    else:
        kind = event.type if now_in else None
    if kind is None:
        return None
    shown = copy.deepcopy(event.object)
    shown["apiVersion"] = rt.api_version
    shown["kind"] = rt.kind
    return {"type": kind, "object": shown}


def _table_events(rt: ResourceType, accept: str, include_object: str) -> Callable[[Obj], Obj]:
    """A watch asked for Tables (`kubectl get -w`) gets each object as a one-row Table, the column definitions in
    the first one only (k8s.io/apiserver pkg/endpoints/handlers/watch.go watchEmbeddedEncoder)."""
    version = table.wanted_table_version(accept)
    first = [True]

    def as_table(event: Obj) -> Obj:
        if version is None or event["type"] not in ("ADDED", "MODIFIED", "DELETED"):
            return event
        obj = event["object"]
        converted = table.to_table(rt, [obj], resource_version=str(obj["metadata"].get("resourceVersion", "")),
                                   include_object=include_object, api_version=version)
        if not first[0]:
            converted["columnDefinitions"] = None
        first[0] = False
        return {"type": event["type"], "object": converted}

    return as_table


def _still_served(store: Store, rt: ResourceType) -> bool:
    served = store.lookup(rt.group, rt.version, rt.plural)
    return served is not None and served.crd_uid == rt.crd_uid


def _matcher(params: dict[str, str], rt: ResourceType) -> Callable[[Obj], bool]:
    try:
        labels = parse_label_selector(params.get("labelSelector", ""))
        fields = parse_field_selector(params.get("fieldSelector", ""),
                                      selectable_fields(rt.group, rt.plural, rt.selectable_fields))
    except SelectorError as error:
        raise bad_request(str(error)) from error

    def match(obj: Obj) -> bool:
        return labels(obj.get("metadata", {}).get("labels") or {}) and fields(obj)

    return match


_WorkloadKey = tuple[tuple[str, str], str, str]  # (storage key, namespace, name)


class _WorkloadController:
    """Makes workload status follow spec.replicas, like the Deployment/StatefulSet controllers with pods that start
    (after `delay` seconds, or at once). With `pods`, Deployments and ReplicaSets get Pod objects too: created when
    spec.replicas goes up, removed as the ReplicaSet controller chooses (pods.pods_to_delete) when it goes down,
    ready `delay` seconds after they start, replaced when something else deletes one, and the workload's status counts
    them. One thread, stopped with the server."""

    def __init__(self, store: Store, delay: float | None, stopping: threading.Event, *, pods: bool = False,
                 pod_hook: fake_pods.PodHook | None = None) -> None:
        self.store = store
        self.delay = delay
        self.stopping = stopping
        self.due: dict[_WorkloadKey, tuple[float, ResourceType]] = {}
        self.thread: threading.Thread | None = None
        self.pods = pods
        self.pod_hook = pod_hook
        self.pods_due: dict[tuple[str, str], float] = {}  # (namespace, pod) -> when it turns ready
        self.pending: set[_WorkloadKey] = set()  # workloads to sync again after a change to one of their pods
        self._acting = False  # set while the controller writes: its own writes are not observed again
        self.failures: list[str] = []  # what the pod hook (a test's code) raised, for FakeKube.stop to report

    def set_delay(self, seconds: float | None) -> None:
        with self.store.lock:
            self.delay = seconds
            if self.pods and seconds is not None:
                for rt in (DEPLOYMENTS, REPLICASETS, STATEFULSETS):
                    self.pending.update((rt.key, ns, name) for ns, name in self.store.objects[rt.key])
            self.store.changed.notify_all()

    def observe(self, rt: ResourceType, obj: Obj, previous: Obj | None) -> None:
        del previous
        if self.pods and rt.key == PODS.key:
            owner = self._owner_key(obj)
            if owner is not None and not self._acting:
                self.pending.add(owner)  # synced by the thread, once the request that changed the pod is done
            return
        if self.pods and rt.key in (DEPLOYMENTS.key, REPLICASETS.key, STATEFULSETS.key):
            if not self._acting:
                self.sync_pods((rt.key, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]))
                owner = self._owner_key(obj) if rt.key == REPLICASETS.key else None
                if owner is not None:
                    self.pending.add(owner)  # its Deployment sets it back, or makes it again
            return
        if not (rt.scale_subresource and rt.group == "apps") or self.delay is None:
            return
        meta = obj["metadata"]
        if meta.get("name") is None or obj.get("status") == self._status(obj):
            return
        key = (rt.key, meta.get("namespace", ""), meta["name"])
        if self.delay == 0:
            self.settle(rt, key)
        else:
            self.due.setdefault(key, (time.monotonic() + self.delay, rt))

    @staticmethod
    def _status(obj: Obj, replicas: int | None = None, ready: int | None = None) -> Obj:
        """The status for `replicas` pods of which `ready` are ready (by default: spec.replicas, all ready)."""
        if replicas is None:
            replicas = int((obj.get("spec") or {}).get("replicas", 1))
        ready = replicas if ready is None else ready
        status: Obj = {"observedGeneration": obj["metadata"].get("generation", 1), "replicas": replicas,
                       "updatedReplicas": replicas}
        if ready:  # the real controllers omit zero counts
            status.update(readyReplicas=ready, availableReplicas=ready)
        return status

    # ----------------------------------------------------------------------------------------------------------
    # Pods (with `pods`)

    def _owner_key(self, pod: Obj) -> _WorkloadKey | None:
        for reference in pod["metadata"].get("ownerReferences") or []:
            rt = {"Deployment": DEPLOYMENTS, "ReplicaSet": REPLICASETS, "StatefulSet": STATEFULSETS}.get(
                str(reference.get("kind")))
            if reference.get("controller") and rt is not None and reference.get("apiVersion") == rt.api_version:
                return rt.key, pod["metadata"].get("namespace", ""), str(reference.get("name"))
        return None

    def owned_pods(self, workload: Obj) -> list[Obj]:
        """The workload's active pods (not finished, not being deleted), by name."""
        namespace, uid = workload["metadata"].get("namespace", ""), workload["metadata"]["uid"]
        return [pod for (ns, _), pod in sorted(self.store.objects[PODS.key].items())
                if ns == namespace and fake_pods.owner_uid(pod) == uid and fake_pods.is_active(pod)]

    def sync_pods(self, key: _WorkloadKey) -> None:
        """Sync one workload: a Deployment through its ReplicaSets (`sync_deployment`), a ReplicaSet as the
        ReplicaSet controller's manageReplicas does: as many pods as spec.replicas, then its status from them, and
        its Deployment synced again once the thread gets to it. Nothing while the controller is stopped (delay
        None)."""
        if key[0] == DEPLOYMENTS.key:
            self.sync_deployment(key)
            return
        if key[0] == STATEFULSETS.key:
            self.sync_stateful_set(key)
            return
        rt = REPLICASETS
        workload = self.store.objects[rt.key].get((key[1], key[2]))
        if workload is None or self.delay is None:
            return
        owner = self._owner_key(workload)
        if owner is not None:
            self.pending.add(owner)
        acting, self._acting = self._acting, True
        try:
            owned = self.owned_pods(workload)
            wanted = int((workload.get("spec") or {}).get("replicas", 1))
            for _ in range(wanted - len(owned)):
                if not self._start_pod(rt, workload):
                    break  # as slowStartBatch stops at a failed create; the next sync tries again
            if len(owned) > wanted:
                now = dt.datetime.now(dt.UTC)
                for pod in fake_pods.pods_to_delete(owned, owned, len(owned) - wanted, now):
                    self.pods_due.pop((key[1], pod["metadata"]["name"]), None)
                    self.store.delete(PODS, key[1], pod["metadata"]["name"])
            owned = self.owned_pods(workload)
            status = self._status(workload, len(owned), sum(1 for pod in owned if fake_pods.is_ready(pod)))
            status.pop("updatedReplicas", None)  # a ReplicaSet's status counts the pods with its labels instead
            if owned:
                status["fullyLabeledReplicas"] = len(owned)
            if workload.get("status") != status:
                self._write_status(rt, key[1], key[2], status)
        except ApiError:
            pass  # e.g. its namespace is terminating: the real controller gives up on the pods too
        finally:
            self._acting = acting

    def owned_sets(self, deployment: Obj) -> list[Obj]:
        """The ReplicaSets the Deployment controls (adopting orphans is not done)."""
        namespace, uid = deployment["metadata"].get("namespace", ""), deployment["metadata"]["uid"]
        return [rs for (ns, _), rs in sorted(self.store.objects[REPLICASETS.key].items())
                if ns == namespace and fake_pods.owner_uid(rs) == uid]

    def sync_deployment(self, key: _WorkloadKey) -> None:
        """The Deployment controller's syncDeployment, one pass (tests/fakekube/deployments.py decides): a scaling
        event (or a paused Deployment) sizes the ReplicaSets in proportion; otherwise the rollout steps (the new
        ReplicaSet made and grown within maxSurge, the old ones shrunk within maxUnavailable; for Recreate, the old
        ones emptied first). Each ReplicaSet written is synced at once; a pass that changed something is followed by
        another from the thread, as the real controller's watch would bring one."""
        deployment = self.store.objects[DEPLOYMENTS.key].get((key[1], key[2]))
        if deployment is None or self.delay is None:
            return
        acting, self._acting = self._acting, True
        try:
            changed = self._deployment_pass(deployment)
        except ApiError:
            changed = False  # e.g. its namespace is terminating
        finally:
            self._acting = acting
        if changed:
            self.pending.add(key)

    def _deployment_pass(self, deployment: Obj) -> bool:
        namespace, name = deployment["metadata"].get("namespace", ""), deployment["metadata"]["name"]
        sets = self.owned_sets(deployment)
        new = fake_deployments.find_new(deployment, sets)
        olds = [rs for rs in sets if rs is not new]
        changed = False
        spec = deployment.get("spec") or {}
        rollout = not spec.get("paused") and not fake_deployments.is_scaling_event(deployment, new, olds)
        created: Obj | None = None
        marks = None if new is None else fake_deployments.next_revision(new, olds)
        if new is not None and marks is not None:  # new again (a rollback): the next revision, as getNewReplicaSet
            body = self.store.get(REPLICASETS, namespace, new["metadata"]["name"])
            body["metadata"].setdefault("annotations", {}).update(marks)
            self.store.update(REPLICASETS, namespace, new["metadata"]["name"], body, manager="kube-controller-manager")
            new = self.store.objects[REPLICASETS.key][(namespace, new["metadata"]["name"])]
        if not rollout:
            for rs_name, size in fake_deployments.scale_sizes(deployment, new, olds).items():
                changed |= self._size_set(deployment, namespace, rs_name, size)
        elif fake_deployments.is_rolling(deployment):
            if new is None:
                new = created = self._create_set(deployment, olds)
                changed = True
            grown = fake_deployments.reconcile_new(deployment, [*olds, new], new)
            if grown is not None:
                changed |= self._size_set(deployment, namespace, new["metadata"]["name"], grown)
            else:
                for rs_name, size in fake_deployments.reconcile_old(deployment, [*olds, new], olds, new).items():
                    changed |= self._size_set(deployment, namespace, rs_name, size)
        else:  # Recreate: the old pods go before the new ones come
            for rs in fake_deployments.active(olds):
                changed |= self._size_set(deployment, namespace, rs["metadata"]["name"], 0)
            running = sum(fake_deployments.status_count(self.store.objects[REPLICASETS.key][
                (namespace, rs["metadata"]["name"])], "replicas") for rs in olds)
            if not changed and not running:
                if new is None:
                    new = created = self._create_set(deployment, olds)
                changed |= self._size_set(deployment, namespace, new["metadata"]["name"],
                                          fake_deployments.replicas(deployment))
        sets = self.owned_sets(deployment)
        new = fake_deployments.find_new(deployment, sets)
        current = self.store.objects[DEPLOYMENTS.key][(namespace, name)]
        status = fake_deployments.deployment_status(current, sets, new, now_rfc3339(), rollout=rollout)
        if created is not None:
            status["conditions"] = fake_deployments.set_condition(
                [c for c in status["conditions"] if c.get("type") != "Progressing"], "Progressing", "True",
                "NewReplicaSetCreated", f'Created new replica set "{created["metadata"]["name"]}"', now_rfc3339())
        revision = None if new is None else (new["metadata"].get("annotations") or {}).get(
            fake_deployments.REVISION)
        annotations = dict(current["metadata"].get("annotations") or {})
        if revision is not None:
            annotations[fake_deployments.REVISION] = revision
        if current.get("status") != status or annotations != (current["metadata"].get("annotations") or {}):
            # The revision goes with the status, through /status (getNewReplicaSet's UpdateStatus, after
            # SetDeploymentRevision): the Deployment's generation stays, as a fresh one's is 1.
            self._write_status(DEPLOYMENTS, namespace, name, status, annotations=annotations)
        return changed

    def _write_status(self, rt: ResourceType, namespace: str, name: str, status: Obj, *,
                      annotations: Obj | None = None) -> None:
        """A controller's UpdateStatus: the object as stored (with `annotations`, where given), and `status`."""
        body = self.store.get(rt, namespace, name)
        if annotations is not None:
            body["metadata"]["annotations"] = annotations
        body["status"] = status
        self.store.update(rt, namespace, name, body, subresource="status", manager="kube-controller-manager")

    def _create_set(self, deployment: Obj, olds: list[Obj]) -> Obj:
        """getNewReplicaSet's create, with the ScalingReplicaSet event; its pods made at once."""
        namespace = deployment["metadata"].get("namespace", "")
        pod_hash = fake_pods.template_hash((deployment.get("spec") or {}).get("template") or {})
        rs = fake_deployments.new_replica_set(deployment, pod_hash, olds)
        created = self.store.create(REPLICASETS, namespace, rs, manager="kube-controller-manager")
        size = fake_deployments.replicas(created)
        if size:
            self._deployment_event(deployment, f"Scaled up replica set {created['metadata']['name']} to {size}")
        self.sync_pods((REPLICASETS.key, namespace, created["metadata"]["name"]))
        return self.store.objects[REPLICASETS.key][(namespace, created["metadata"]["name"])]

    def _size_set(self, deployment: Obj, namespace: str, name: str, size: int) -> bool:
        """scaleReplicaSet: its replicas and its replicas annotations (the Deployment's size, and that plus
        maxSurge), a ScalingReplicaSet event where the size changed; its pods made or removed at once. Whether the
        size changed."""
        rs = self.store.get(REPLICASETS, namespace, name)
        before = fake_deployments.replicas(rs)
        wanted = fake_deployments.replicas(deployment)
        marks = {fake_deployments.DESIRED_REPLICAS: str(wanted),
                 fake_deployments.MAX_REPLICAS: str(wanted + fake_deployments.max_surge(deployment))}
        annotations = rs["metadata"].setdefault("annotations", {})
        if before == size and all(annotations.get(k) == v for k, v in marks.items()):
            return False
        annotations.update(marks)
        rs["spec"]["replicas"] = size
        self.store.update(REPLICASETS, namespace, name, rs, manager="kube-controller-manager")
        if before != size:
            direction = "up" if size > before else "down"
            self._deployment_event(deployment, f"Scaled {direction} replica set {name} to {size} from {before}")
        self.sync_pods((REPLICASETS.key, namespace, name))
        return before != size

    def _deployment_event(self, deployment: Obj, message: str) -> None:
        """A Normal event ScalingReplicaSet on the Deployment, as the deployment-controller writes one."""
        self._event(DEPLOYMENTS, deployment, "Normal", "ScalingReplicaSet", message, "deployment-controller")

    def _event(self, rt: ResourceType, workload: Obj, kind: str, reason: str, message: str, component: str) -> None:
        """A core Event on the workload, as a controller's event recorder writes one (nothing if it cannot be)."""
        meta = workload["metadata"]
        namespace, now = meta.get("namespace", ""), now_rfc3339()
        event = {"metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": namespace},
                 "involvedObject": {"apiVersion": rt.api_version, "kind": rt.kind, "namespace": namespace,
                                    "name": meta["name"], "uid": meta["uid"]},
                 "reason": reason, "message": message, "type": kind, "source": {"component": component},
                 "count": 1, "firstTimestamp": now, "lastTimestamp": now}
        with contextlib.suppress(ApiError):
            self.store.create(CORE_EVENTS, namespace, event, manager="kube-controller-manager")

    def sync_stateful_set(self, key: _WorkloadKey) -> None:
        """The StatefulSet controller's scaling, one pass (pkg/controller/statefulset/stateful_set_control.go,
        `updateStatefulSet`): a pod `<name>-<ordinal>` for each ordinal below spec.replicas. With OrderedReady (the
        default) a pod is made only once every lower ordinal's is Running and Ready, so a scale-up of k pods takes
        k start-ups; with Parallel all at once. A scale-down removes the highest ordinals first; with OrderedReady
        not while a lower ordinal's pod is unhealthy. Status from the pods. Not done: revisions (a changed template
        replaces no pod), volume claims, minReadySeconds, and the one-deletion-at-a-time wait (the fake's deletions
        are complete when answered)."""
        sts = self.store.objects[STATEFULSETS.key].get((key[1], key[2]))
        if sts is None or self.delay is None:
            return
        name = str(sts["metadata"]["name"])
        spec = sts.get("spec") or {}
        ordered = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
        wanted = int(spec.get("replicas", 1))
        acting, self._acting = self._acting, True
        try:
            owned = {int(suffix): pod for pod in self.owned_pods(sts)
                     if (suffix := str(pod["metadata"]["name"]).removeprefix(f"{name}-")).isdigit()}
            for ordinal in range(wanted):
                if ordinal not in owned:
                    if not self._start_pod(STATEFULSETS, sts, ordinal=ordinal):
                        break
                    if ordered:
                        # The pod's own create brings the next pass, as the controller's watch of its pods would
                        # (one made ready at once, with no delay, turns ready no later).
                        self.pending.add(key)
                        break
                elif ordered and not fake_pods.is_ready(owned[ordinal]):
                    break  # the next ordinal waits for this one to be Running and Ready
            for ordinal in sorted((o for o in owned if o >= wanted), reverse=True):
                if ordered and any(not fake_pods.is_ready(owned[o]) for o in owned if o < ordinal):
                    break
                self.pods_due.pop((key[1], owned[ordinal]["metadata"]["name"]), None)
                self.store.delete(PODS, key[1], owned[ordinal]["metadata"]["name"])
            pods = self.owned_pods(sts)
            status = self._status(sts, len(pods), sum(1 for pod in pods if fake_pods.is_ready(pod)))
            status["currentReplicas"] = len(pods)
            if sts.get("status") != status:
                self._write_status(STATEFULSETS, key[1], key[2], status)
        except ApiError:
            pass  # e.g. its namespace is terminating
        finally:
            self._acting = acting

    def _start_pod(self, rt: ResourceType, workload: Obj, *, ordinal: int | None = None) -> bool:
        """Create one pod of the workload as the ReplicaSet controller does, then report it running as the kubelet
        does; the test's pod hook may edit it first. A hook that raises is a failed create (False): no pod, a
        FailedCreate event on the ReplicaSet as the ReplicaSet controller writes one, and the error kept for
        FakeKube.stop, so that a test's mistake fails the test instead of killing the controller's thread (which
        left the test waiting for pods that never came)."""
        namespace = workload["metadata"].get("namespace", "")
        prefix, pod = fake_pods.pod_for(workload, rt.kind, rt.api_version)
        if ordinal is not None:  # a StatefulSet's: its name, labels and hostname say its ordinal
            name = f"{prefix}{ordinal}"
            pod["metadata"]["labels"].update({"statefulset.kubernetes.io/pod-name": name,
                                              "apps.kubernetes.io/pod-index": str(ordinal)})
            pod["spec"]["hostname"] = name
            if (workload.get("spec") or {}).get("serviceName"):
                pod["spec"]["subdomain"] = workload["spec"]["serviceName"]
        else:
            name = prefix + fake_pods.random_suffix()
            while (namespace, name) in self.store.objects[PODS.key]:
                name = prefix + fake_pods.random_suffix()
        pod["metadata"].update(name=name, namespace=namespace)
        ready = self.delay == 0
        pod["status"] = fake_pods.running_status(pod, ready=ready, now=now_rfc3339())
        if self.pod_hook is not None:
            try:
                self.pod_hook(pod)
            except Exception as error:  # any error of the test's hook is reported, not raised here
                self._failed_create(rt, workload, f"the pod hook raised {type(error).__name__}: {error}")
                return False
        name = str(pod["metadata"]["name"])
        self.store.create(PODS, namespace, {k: v for k, v in pod.items() if k != "status"},
                          manager="kube-controller-manager")
        self.store.update(PODS, namespace, name, {"metadata": {"name": name}, "status": pod["status"]},
                          subresource="status", manager="kubelet")
        if not ready and self.delay is not None:
            self.pods_due[(namespace, name)] = time.monotonic() + self.delay
        return True

    def _failed_create(self, rt: ResourceType, workload: Obj, why: str) -> None:
        """What the ReplicaSet controller does when a pod's create fails (pkg/controller/replicaset
        `manageReplicas`): a Warning event FailedCreate, "Error creating: <error>", on the ReplicaSet."""
        meta = workload["metadata"]
        self.failures.append(f"{rt.kind} {meta.get('namespace', '')}/{meta['name']}: {why}")
        self._event(rt, workload, "Warning", "FailedCreate", f"Error creating: {why}", "replicaset-controller")

    def _pod_turns_ready(self, namespace: str, name: str) -> None:
        pod = self.store.objects[PODS.key].get((namespace, name))
        if pod is None or fake_pods.is_ready(pod):
            return
        status = copy.deepcopy(pod.get("status") or {})
        now = now_rfc3339()
        for condition in status.get("conditions") or []:
            if condition.get("type") in ("Ready", "ContainersReady"):
                condition.update(status="True", lastTransitionTime=now)
                condition.pop("reason", None)
                condition.pop("message", None)
        for container in status.get("containerStatuses") or []:
            container["ready"] = True
        acting, self._acting = self._acting, True
        try:
            self.store.update(PODS, namespace, name, {"metadata": {"name": name}, "status": status},
                              subresource="status", manager="kubelet")
        finally:
            self._acting = acting
        owner = self._owner_key(pod)
        if owner is not None:
            self.sync_pods(owner)

    def settle(self, rt: ResourceType, key: tuple[tuple[str, str], str, str]) -> None:
        with self.store.lock:
            obj = self.store.objects[rt.key].get((key[1], key[2]))
            if obj is None:
                return
            self._write_status(rt, key[1], key[2], self._status(obj))

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="fakekube-controller", daemon=True)
        self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join(timeout=5)

    def _run(self) -> None:
        with self.store.lock:
            while not self.stopping.is_set():
                now = time.monotonic()
                for key, (when, rt) in list(self.due.items()):
                    if when <= now and self.delay is not None:
                        del self.due[key]
                        self.settle(rt, key)
                for pod_key, when in list(self.pods_due.items()):
                    if when <= now and self.delay is not None:
                        del self.pods_due[pod_key]
                        self._pod_turns_ready(*pod_key)
                while self.pending:
                    key = self.pending.pop()
                    try:
                        self.sync_pods(key)
                    except Exception as error:  # the thread must outlive one workload's fault
                        self.failures.append(f"syncing {key[0]} {key[1]}/{key[2]}: {type(error).__name__}: {error}")
                self.store.changed.wait(0.05)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        del format, args

    def setup(self) -> None:
        assert isinstance(self.request, ssl.SSLSocket)
        self.request.do_handshake()  # in this thread, not the accepting one; a failure ends in handle_error
        super().setup()
        # Headers and body go out in separate writes; with Nagle on, the body waits for the client's delayed ACK
        # (~40 ms on Linux), which made every request through the official client take 50-70 ms.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # ----------------------------------------------------------------------------------------------------------
    # Responses

    def send_json(self, code: int, body: Obj, headers: dict[str, str] | None = None, *,
                  content_type: str = "application/json") -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self._status_code = code
        self._record()  # before the client can see the answer, so a test reading the log after it sees this one
        self.end_headers()
        self.wfile.write(data)

    def send_error_status(self, error: ApiError) -> None:
        self.send_json(error.code, error.status(), error.headers)

    def start_chunked(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self._status_code = 200
        self._record()
        self.end_headers()
        self.wfile.flush()

    def send_chunk(self, event: Obj) -> bool:
        data = json.dumps(event).encode() + b"\n"
        try:
            self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            return False
        return True

    def end_chunked(self) -> None:
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    # ----------------------------------------------------------------------------------------------------------
    # Dispatch

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self, method: str) -> None:
        fake = self.server.fake
        parsed = urllib.parse.urlsplit(self.path)
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query, keep_blank_values=True).items()}
        raw_body = self._read_body()
        self._status_code = 0
        self._recorded = False
        try:
            if parsed.path.startswith("/_fake/"):
                self._admin(method, parsed.path, params, raw_body)
                return
            target = parsed.path + ("?" + parsed.query if parsed.query else "")
            with fake.store.lock:
                fake.arrived.append((method, parsed.path))
                del fake.arrived[:-5000]
            fault = fake._take_fault(method, target)
            if fault is not None:
                if fault.latency:
                    fake._stopping.wait(fault.latency)
                if fault.status is not None:
                    raise _fault_error(fault)
            self._api(method, parsed.path, params, raw_body)
        except ApiError as error:
            self.send_error_status(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self._record()

    def _record(self) -> None:
        """Add this request to the fake's log, once (with the status it was answered with, 0 for none)."""
        if self._recorded:
            return
        self._recorded = True
        fake = self.server.fake
        parsed = urllib.parse.urlsplit(self.path)
        content_type = self.headers.get("Content-Type", "")
        with fake.store.lock:
            fake.requests.append(RequestRecord(self.command, parsed.path, parsed.query, content_type,
                                               self._status_code, self.headers.get("User-Agent", ""),
                                               time.monotonic()))
            fake.request_total += 1
            agent = self.headers.get("User-Agent", "")
            if agent.startswith("queuescale/"):
                fake.operator_requests[f"{self.command} {_resource_of(parsed.path)}"] += 1
            del fake.requests[:-5000]

    def _decode(self, raw_body: bytes) -> Any:
        content_type = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if content_type == options.APPLY:
            try:  # an applied configuration is YAML (JSON is YAML too)
                return yaml.safe_load(raw_body or b"null")
            except yaml.YAMLError as error:
                raise bad_request(f"error decoding YAML: {error}") from error
        if "yaml" in content_type:
            raise ApiError(415, "UnsupportedMediaType",
                           f'the body of the request was in an unknown format - accepted media types include: '
                           f'application/json (the fake API server does not do server-side apply: "{content_type}")')
        if content_type != "application/json" and not content_type.endswith("patch+json"):
            # A typed client (kubectl create deployment, client-go) sends built-in kinds as protobuf, which the
            # fake cannot decode: refused as the real server refuses a media type it has no serializer for.
            raise ApiError(415, "UnsupportedMediaType",
                           "the body of the request was in an unknown format - accepted media types include: "
                           f'application/json (the fake API server decodes no "{content_type}")')
        try:
            return json.loads(raw_body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise bad_request(f"couldn't get version/kind; json parse error: {error}") from error

    def _api(self, method: str, path: str, params: dict[str, str], raw_body: bytes) -> None:
        fake = self.server.fake
        store = fake.store
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["openapi"]:
            self._openapi(parts[1:])
            return
        if path in ("/version", "/version/"):
            self.send_json(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake", "platform": "linux/amd64"})
            return
        aggregated = discovery.wanted_version(self.headers.get("Accept", "")) if parts in (["api"], ["apis"]) else None
        if aggregated is not None:
            with store.lock:
                served = list(store.types.values())
            self.send_json(200, discovery.group_discovery_list(served, legacy=parts == ["api"], version=aggregated),
                           content_type=discovery.CONTENT_TYPES[aggregated])
            return
        if parts == ["api"]:
            self.send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{fake.port}"}]})
            return
        if parts == ["apis"]:
            self.send_json(200, _group_list(store))
            return
        if parts and parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts and parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        elif parts and parts[0] == "apis" and len(parts) == 2:
            groups = [g for g in _group_list(store)["groups"] if g["name"] == parts[1]]
            if not groups:
                raise no_such_resource()
            self.send_json(200, {"kind": "APIGroup", "apiVersion": "v1", **groups[0]})
            return
        else:
            raise no_such_resource()
        if not rest:
            resources = _resource_list(store, group, version)
            if resources is None:
                raise no_such_resource()
            self.send_json(200, resources)
            return
        route = _route(store, group, version, rest)
        rt = route.rt
        namespace = route.namespace if rt.namespaced else ""
        self._authorize(method, route, params)
        write = self._write_options(method, raw_body) if method in ("POST", "PUT", "PATCH", "DELETE") else None
        strict = params.get("fieldValidation") == "Strict"
        dry_run = write is not None and write.dry_run
        manager = write.manager if write is not None else ""
        if route.name is None:
            if method == "GET":
                if _parse_bool(params.get("watch")):
                    fake.watch(self, route, params)
                    return
                items, revision = store.list(rt, route.namespace if rt.namespaced else None, _matcher(params, rt))
                if self._send_table(rt, items, str(revision), params):
                    return
                if not rt.custom:
                    for item in items:  # built-in lists carry kind and apiVersion once, on the list
                        item.pop("kind", None)
                        item.pop("apiVersion", None)
                self.send_json(200, {"kind": f"{rt.kind}List", "apiVersion": rt.api_version,
                                     "metadata": {"resourceVersion": str(revision)}, "items": items})
                return
            if method == "POST":
                if route.namespace is None and rt.namespaced:
                    raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                   "resource")
                body = self._decode(raw_body)
                if not isinstance(body, dict):
                    raise bad_request("the body must be an object")
                self.send_json(201, store.create(rt, namespace or "", body, strict=strict, dry_run=dry_run,
                                                 manager=manager))
                return
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        assert namespace is not None
        name = route.name
        if route.subresource == "scale":
            if not rt.scale_subresource:
                raise no_such_resource()
            if method == "GET":
                self.send_json(200, store.get_scale(rt, namespace, name))
            elif method == "PUT":
                body = self._decode(raw_body)
                self.send_json(200, store.update_scale(rt, namespace, name, body if isinstance(body, dict) else {},
                                                       dry_run=dry_run, manager=manager))
            elif method == "PATCH":
                content_type = self.headers.get("Content-Type", "")
                self.send_json(200, store.patch(rt, namespace, name, content_type, self._decode(raw_body),
                                                subresource="scale", dry_run=dry_run, manager=manager))
            else:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                               "resource")
            return
        if route.subresource not in ("", "status") or (route.subresource == "status" and not rt.status_subresource):
            raise no_such_resource()
        if method == "GET":
            found = store.get(rt, namespace, name)
            if route.subresource or not self._send_table(rt, [found], found["metadata"]["resourceVersion"], params):
                self.send_json(200, found)
        elif method == "PUT":
            body = self._decode(raw_body)
            if not isinstance(body, dict):
                raise bad_request("the body must be an object")
            self.send_json(200, store.update(rt, namespace, name, body, subresource=route.subresource, strict=strict,
                                             dry_run=dry_run, manager=manager))
        elif method == "PATCH" and write is not None and self.headers.get("Content-Type", "").startswith(options.APPLY):
            applied, created = store.apply(rt, namespace, name, self._decode(raw_body), manager=manager,
                                           force=write.force, subresource=route.subresource, strict=strict,
                                           dry_run=dry_run)
            self.send_json(201 if created else 200, applied)
        elif method == "PATCH":
            content_type = self.headers.get("Content-Type", "")
            self.send_json(200, store.patch(rt, namespace, name, content_type, self._decode(raw_body),
                                            subresource=route.subresource, strict=strict, dry_run=dry_run,
                                            manager=manager))
        elif method == "DELETE" and not route.subresource:
            delete_body = self._decode(raw_body) if raw_body else {}
            precondition = ((delete_body or {}).get("preconditions") or {}).get("resourceVersion")
            propagation = (delete_body or {}).get("propagationPolicy") or params.get("propagationPolicy")
            deleted = store.delete(rt, namespace, name, precondition, propagation=propagation, dry_run=dry_run)
            if rt.custom or rt.key == NAMESPACES.key:  # a namespace is answered as it goes Terminating
                self.send_json(200, deleted)
            else:
                self.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                     "details": {"name": name, "group": rt.group, "kind": rt.plural,
                                                 "uid": deleted["metadata"]["uid"]}})
        else:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _write_options(self, method: str, raw_body: bytes) -> options.WriteOptions:
        """dryRun, fieldManager and force of a write, refused with the real 422 when invalid."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query, keep_blank_values=True)
        delete_body: Any = None
        if method == "DELETE" and raw_body:
            with contextlib.suppress(json.JSONDecodeError):
                delete_body = json.loads(raw_body)
        try:
            return options.parse(method, query, self.headers.get("Content-Type", ""),
                                 self.headers.get("User-Agent", ""), delete_body)
        except options.OptionsError as error:
            status = error.status
            raise ApiError(422, "Invalid", status["message"], status["details"]) from error

    def _openapi(self, parts: list[str]) -> None:
        """/openapi/v2 (JSON only) and /openapi/v3[/<group version>] (see tests/fakekube/openapi.py)."""
        with self.server.fake.store.lock:
            served = list(self.server.fake.store.types.values())
        accept = self.headers.get("Accept", "") or "*/*"
        if not any(m.split(";")[0].strip() in ("application/json", "*/*", "application/*") for m in accept.split(",")):
            raise ApiError(406, "NotAcceptable", f"only application/json is served here, not {accept}")
        if parts == ["v2"]:
            self.send_json(200, openapi.v2_document(served))
            return
        if parts[:1] != ["v3"]:
            raise no_such_resource()
        documents = openapi.v3_documents(served)
        if len(parts) == 1:
            self.send_json(200, openapi.v3_index(documents))
        elif "/".join(parts[1:]) in documents:
            self.send_json(200, documents["/".join(parts[1:])])
        else:
            raise no_such_resource()

    def _send_table(self, rt: ResourceType, items: list[Obj], revision: str, params: dict[str, str]) -> bool:
        """Answer with a meta.k8s.io Table if the Accept header asks for one first (what kubectl get does)."""
        version = table.wanted_table_version(self.headers.get("Accept", ""))
        if version is None:
            return False
        include = params.get("includeObject") or "Metadata"
        if include not in ("None", "Metadata", "Object"):
            raise bad_request(f'Invalid value: "{include}": must be one of None, Metadata, Object')
        self.send_json(200, table.to_table(rt, items, resource_version=revision, include_object=include,
                                           api_version=version),
                       content_type=f"application/json;as=Table;v={version.rpartition('/')[2]};g=meta.k8s.io")
        return True

    def _authorize(self, method: str, route: _Route, params: dict[str, str]) -> None:
        """Admin token: anything. ServiceAccount token: what its RBAC bindings allow. Anything else: 401."""
        header = self.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ").strip()
        if token == TOKEN:
            return
        account = rbac.service_account_of(token)
        if account is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        if route.name is None:
            verb = {"GET": "watch" if _parse_bool(params.get("watch")) else "list", "POST": "create",
                    "DELETE": "deletecollection"}.get(method, method.lower())
        else:
            verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())
        resource = route.rt.plural + (f"/{route.subresource}" if route.subresource else "")
        request = rbac.Request(verb, route.rt.group, resource, route.namespace or "", route.name or "")
        if not rbac.allowed(self.server.fake.store, account, request):
            raise rbac.forbidden(account, request, route.rt)

    def _admin(self, method: str, path: str, params: dict[str, str], raw_body: bytes) -> None:
        fake = self.server.fake
        body = json.loads(raw_body) if raw_body else {}
        if path == "/_fake/faults" and method == "POST":
            fake.add_fault(Fault.from_json(body))
            self.send_json(201, {"faults": len(fake.faults)})
        elif path == "/_fake/faults" and method == "DELETE":
            fake.clear_faults()
            self.send_json(200, {"faults": 0})
        elif path == "/_fake/drop-watches" and method == "POST":
            fake.drop_watches(graceful=bool(body.get("graceful", False)))
            self.send_json(200, {})
        elif path == "/_fake/compact" and method == "POST":
            self.send_json(200, {"resourceVersion": str(fake.compact())})
        elif path == "/_fake/ready-delay" and method == "POST":
            fake.set_ready_delay(body.get("seconds"))
            self.send_json(200, {})
        elif path == "/_fake/objects" and method == "POST":
            self.send_json(201, fake.create(body))
        elif path == "/_fake/table" and method == "GET":
            namespace = params.get("namespace") or None
            try:
                text = fake.table(params.get("resource", "qs"), namespace).encode()
            except KeyError as error:
                raise not_found_resource(str(error)) from error
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(text)))
            self._status_code = 200
            self._record()
            self.end_headers()
            self.wfile.write(text)
        elif path == "/_fake/stats" and method == "GET":
            with fake.store.lock:
                by_operator = dict(fake.operator_requests)
            self.send_json(200, {"requests": fake.request_total, "operator": by_operator})
        elif path == "/_fake/requests" and method == "GET":
            with fake.store.lock:
                records = [vars(r) for r in fake.requests]
            self.send_json(200, {"requests": records})
        else:
            raise ApiError(404, "NotFound", f"no admin endpoint {method} {path}")


def _resource_of(path: str) -> str:
    """`/apis/apps/v1/namespaces/shop/deployments/w1/scale` -> `deployments/scale`; a collection -> its plural."""
    parts = [p for p in path.split("/") if p]
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        parts = parts[parts.index("namespaces") + 2:]
    else:
        parts = parts[3:] if parts[:1] == ["apis"] else parts[2:]
    if not parts:
        return path
    return parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")


def no_such_resource() -> ApiError:
    """The answer for a path no API serves (a kind whose CRD does not exist, a bad group or version), as
    k8s.io/apiserver pkg/util/notfoundhandler and the CRD handler send it."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def not_found_resource(message: str) -> ApiError:
    return ApiError(404, "NotFound", message)


def _route(store: Store, group: str, version: str, rest: list[str]) -> _Route:
    def resolve(plural: str) -> ResourceType:
        rt = store.lookup(group, version, plural)
        if rt is None:
            raise no_such_resource()
        return rt

    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        namespace = rest[1]
        rt = resolve(rest[2])
        if not rt.namespaced:
            raise no_such_resource()
        tail = rest[3:]
    else:
        namespace = None
        rt = resolve(rest[0])
        tail = rest[1:]
    if len(tail) > 2:
        raise no_such_resource()
    name = tail[0] if tail else None
    subresource = tail[1] if len(tail) > 1 else ""
    if rt.namespaced and name is not None and namespace is None:
        raise no_such_resource()
    return _Route(rt, namespace, name, subresource)


def _group_list(store: Store) -> Obj:
    groups: dict[str, list[str]] = {}
    with store.lock:
        for rt in store.types.values():
            if rt.group:
                versions = groups.setdefault(rt.group, [])
                if rt.version not in versions:
                    versions.append(rt.version)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": name, "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
         "preferredVersion": {"groupVersion": f"{name}/{versions[0]}", "version": versions[0]}}
        for name, versions in sorted(groups.items())]}


def _resource_list(store: Store, group: str, version: str) -> Obj | None:
    with store.lock:
        types = [rt for rt in store.types.values() if rt.group == group and rt.version == version]
    if not types:
        return None
    resources: list[Obj] = []
    for rt in types:
        resources.append({"name": rt.plural, "singularName": rt.kind.lower(), "namespaced": rt.namespaced,
                          "kind": rt.kind, "verbs": list(rt.verbs), "shortNames": list(rt.short_names),
                          "categories": list(rt.categories)})
        if rt.status_subresource:
            resources.append({"name": f"{rt.plural}/status", "singularName": "", "namespaced": rt.namespaced,
                              "kind": rt.kind, "verbs": ["get", "patch", "update"]})
        if rt.scale_subresource:
            resources.append({"name": f"{rt.plural}/scale", "singularName": "", "namespaced": rt.namespaced,
                              "group": "autoscaling", "version": "v1", "kind": "Scale",
                              "verbs": ["get", "patch", "update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources}


__all__ = ["TOKEN", "ApiError", "FakeKube", "Fault", "RequestRecord", "not_found"]
