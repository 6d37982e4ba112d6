"""A thin asyncio layer over the official client (`kubernetes.aio`): config loading, JSON requests, watches.

Every call goes through `call()` / `request()` (plain JSON in and out, no generated models: the operator reads a
few fields of a few kinds) or `watch()` (a chunked stream of watch events). Errors are `KubeError` with the HTTP
status, read by the one map of controller/kube/errors.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypedDict
from urllib.parse import quote

import aiohttp
from kubernetes.aio import client as aio_client
from kubernetes.aio import config as aio_config
from kubernetes.aio.config.config_exception import ConfigException

from controller.kube.errors import KubeError, error_from_answer
from controller.kube.ratelimit import TokenBucket
from controller.model.rule import API_GROUP, API_VERSION

if TYPE_CHECKING:  # Unpack of a TypedDict for **kwargs is typing's from Python 3.12
    from typing_extensions import Unpack

log = logging.getLogger(__name__)

# How a request meets the client-side limiter (see KubeApi.call).
Limit = Literal["wait", "charge", "none"]


class RequestOptions(TypedDict, total=False):
    """What a request may set besides its method and path (see `KubeApi.call`)."""

    query: Mapping[str, str | int] | None
    body: object
    content_type: str
    timeout: float | None
    limit: Limit
MERGE_PATCH = "application/merge-patch+json"
PLURAL = "queuescalers"
# The longest watch event read: the API server refuses a request body over 3 MiB (and etcd an object over 1.5 MiB),
# so a real event is far shorter; the bound only keeps a broken stream from filling memory.
MAX_WATCH_EVENT = 16 * 1024 * 1024
# The read buffer the official client gives its session (kubernetes.aio.client.rest), kept when it is replaced.
CLIENT_READ_BUFFER = 2**21


class KubeConfigurationError(Exception):
    """No usable Kubernetes configuration; the message says what was looked for and what to do."""


async def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> aio_client.Configuration:
    """In-cluster config when running in a pod (and no kubeconfig given), else the kubeconfig.

    Raises KubeConfigurationError naming every place looked in when none gives a configuration.
    """
    configuration = aio_client.Configuration()
    in_cluster_problem = ""
    if kubeconfig is None:
        try:
            aio_config.load_incluster_config(client_configuration=configuration)
            return configuration
        except ConfigException as exc:
            in_cluster_problem = str(exc).rstrip(".")
    config_file = _kubeconfig_file(kubeconfig, in_cluster_problem)
    try:
        await aio_config.load_kube_config(config_file=config_file, context=context,
                                          client_configuration=configuration)
    except ConfigException as exc:
        raise KubeConfigurationError(f"{config_file}: not a usable kubeconfig: {exc}") from None
    return configuration


def _kubeconfig_file(flag: str | None, in_cluster_problem: str) -> str:
    """The kubeconfig to read: the flag, else $KUBECONFIG's first existing file, else ~/.kube/config.

    Checked here because the client, given a file that does not exist, logs `Config not found` and then fails on
    an empty configuration with `Expected key current-context`, which names neither the file nor the remedy.
    """
    if flag is not None:
        if not os.path.isfile(os.path.expanduser(flag)):
            raise KubeConfigurationError(f"--kubeconfig {flag}: no such file; give the path of a kubeconfig "
                                         "(or leave --kubeconfig out to use $KUBECONFIG or ~/.kube/config)")
        return flag
    env = os.environ.get("KUBECONFIG", "")
    candidates = [p for p in env.split(os.pathsep) if p] if env else ["~/.kube/config"]
    for candidate in candidates:
        if os.path.isfile(os.path.expanduser(candidate)):
            return candidate
    looked = [
        "--kubeconfig: not given",
        f"$KUBECONFIG: {', '.join(candidates)} (no such file)" if env else "$KUBECONFIG: not set",
        *([] if env else [f"~/.kube/config: {os.path.expanduser('~/.kube/config')} (no such file)"]),
        f"in-cluster service account: {in_cluster_problem or 'not found'}",
    ]
    raise KubeConfigurationError(
        "no Kubernetes configuration found; looked at " + "; ".join(looked) + ". Give --kubeconfig FILE, set "
        "KUBECONFIG, or run in a pod whose service account token is mounted")


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
    object: dict[str, Any]


class KubeApi:
    """JSON requests to the API server through the official asyncio client."""

    def __init__(
        self, configuration: aio_client.Configuration, *, timeout: float = 30.0, user_agent: str | None = None,
        max_watch_event: int = MAX_WATCH_EVENT, limiter: TokenBucket | None = None,
    ) -> None:
        """`limiter`: every request but watches and those made with `limit="none"` (the leader Lease) takes a
        token of it first (see controller/kube/ratelimit.py)."""
        self.api_client = aio_client.ApiClient(configuration)
        self.limiter = limiter
        self.max_watch_event = max_watch_event
        if user_agent:
            self.api_client.user_agent = user_agent  # audit logs (and tests) can tell replicas apart
        self.timeout = timeout
        self._certificate_reported = False
        _skip_netrc(self.api_client)

    async def close(self) -> None:
        await self.api_client.close()

    async def request(self, method: str, path: str, **options: Unpack[RequestOptions]) -> dict[str, Any]:
        """`call`, for an answer that is a JSON object (any other answer reads as `{}`)."""
        result = await self.call(method, path, **options)
        return result if isinstance(result, dict) else {}

    async def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: object = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        limit: Limit = "wait",
    ) -> object:
        """One request; the decoded JSON answer, whatever its shape. `limit`: "wait" for a token of the limiter
        first; "charge" a token without waiting (a scale is never held back behind status writes: the limiter
        makes the requests after it wait instead); "none" for the lease's renewals: a leader that loses its lease
        while its status writes queue would stop scaling for nothing (client-go's leader election, too, has a
        client of its own). Raises KubeError (controller/kube/errors.py)."""
        if self.limiter is not None:
            if limit == "wait":
                await self.limiter.acquire()
            elif limit == "charge":
                self.limiter.charge()
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            return await self.api_client.call_api(
                path, method, query_params=list((query or {}).items()), header_params=headers, body=body,
                response_types_map={200: "object", 201: "object", 202: "object"}, auth_settings=["BearerToken"],
                _return_http_data_only=True, _preload_content=True, _request_timeout=timeout or self.timeout,
            )
        except aio_client.ApiException as exc:
            raise error_from_answer(exc.status or 0, exc.reason or "", exc.body, exc.headers) from None
        except (TimeoutError, OSError) as exc:
            raise self._no_answer(exc) from None
        except Exception as exc:  # aiohttp's client errors
            if type(exc).__module__.startswith("aiohttp"):
                raise self._no_answer(exc) from None
            raise

    def _no_answer(self, exc: BaseException) -> KubeError:
        """The KubeError for a request the API server did not answer; an untrusted certificate says so (once in
        the log, with what the TLS check said), since retrying cannot fix a kubeconfig that names the wrong CA."""
        verify_message = _certificate_failure(exc)
        if verify_message is None:
            return KubeError(0, "Unreachable", f"no answer from the API server ({type(exc).__name__})")
        if not self._certificate_reported:
            self._certificate_reported = True
            log.error("the API server's TLS certificate is not trusted (%s): check the certificate authority of "
                      "the kubeconfig (certificate-authority-data) or of the pod's service account", verify_message)
        return KubeError(0, "CertificateNotTrusted",
                         f"the API server's TLS certificate is not trusted ({verify_message})")

    async def request_with_retries(
        self, method: str, path: str, *, attempts: int = 4, **options: Unpack[RequestOptions]
    ) -> dict[str, Any]:
        """`request`, retrying 429 (after Retry-After) and 5xx / no answer (exponential back-off with jitter)."""
        delay = 0.2
        for attempt in range(attempts):
            try:
                return await self.request(method, path, **options)
            except KubeError as exc:
                if not exc.retryable or attempt == attempts - 1:
                    raise
                wait = exc.retry_after if exc.retry_after is not None else delay * (0.5 + random.random())
                await asyncio.sleep(min(wait, 10.0))
                delay *= 2
        raise AssertionError("unreachable")

    async def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 300, query: Mapping[str, str] | None = None
    ) -> AsyncGenerator[WatchEvent, None]:
        """Watch events after `resource_version` until the server ends the stream. An expired version arrives as
        an ERROR event whose object is a Status with code 410. No answer: KubeError 0 `Unreachable`; a stream that
        breaks off: KubeError 0 `Disconnected`; an event over `max_watch_event` bytes: WatchEventTooLarge."""
        params = {
            **(query or {}), "watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        try:
            response = await self.api_client.call_api(
                path, "GET", query_params=list(params.items()), header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout_seconds + 30,
            )
        except aio_client.ApiException as exc:
            raise error_from_answer(exc.status or 0, exc.reason or "", exc.body, exc.headers) from None
        except Exception as exc:
            if isinstance(exc, TimeoutError | OSError) or type(exc).__module__.startswith("aiohttp"):
                raise self._no_answer(exc) from None
            raise
        try:
            if not 200 <= response.status < 300:
                body = await response.read()
                raise error_from_answer(response.status, response.reason or "", body, response.headers)
            async for line in _lines(response.content, self.max_watch_event):
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    log.warning("skipping a watch line that is not JSON")
                    continue
                if isinstance(event, dict) and isinstance(event.get("object"), dict):
                    yield WatchEvent(str(event.get("type")), event["object"])
        finally:
            response.release()


class WatchEventTooLarge(Exception):
    """A watch event longer than KubeApi.max_watch_event: the stream cannot be read on from there."""


async def _lines(content: Any, limit: int) -> AsyncIterator[bytes]:
    """The non-empty lines of a watch stream (one JSON event each), of any length up to `limit` bytes.

    Not aiohttp's `readline()`: its bound is twice the session's read buffer (128 KiB by aiohttp's default; the
    kubernetes client raises it to 4 MiB), which a QueueScaler with a big annotation passes under the default,
    and a line over it raised an aiohttp error that read as a dropped stream: the watch started again at once from
    the same version, met the same line, and so on, with no back-off and no log. Here the bound is ours and going
    over it is an error of its own (WatchEventTooLarge: the watcher relists). A broken stream raises KubeError 0
    `Disconnected`, which the watcher resumes from its last version; a clean end just ends."""
    partial = bytearray()
    searched = 0  # bytes of `partial` known to hold no newline
    while True:
        try:
            chunk = await content.readany()
        except Exception as exc:
            if isinstance(exc, TimeoutError | OSError) or type(exc).__module__.startswith("aiohttp"):
                raise KubeError(0, "Disconnected", f"the watch stream broke off ({type(exc).__name__})") from None
            raise
        if not chunk:
            if partial.strip():
                yield bytes(partial)
            return
        partial += chunk
        while True:
            end = partial.find(b"\n", searched)
            if (end if end >= 0 else len(partial)) > limit:  # the line, or what has come of it so far
                raise WatchEventTooLarge(f"a watch event is longer than {limit} bytes")
            if end < 0:
                searched = len(partial)
                break
            line = bytes(partial[:end]).strip()
            del partial[:end + 1]
            searched = 0
            if line:
                yield line


_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY")


def _certificate_failure(exc: BaseException) -> str | None:
    """What the TLS verification said, if `exc` (or what it wraps, as aiohttp does) is a failed certificate check."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        wrapped = getattr(seen, "certificate_error", None)  # aiohttp's ClientConnectorCertificateError
        if isinstance(wrapped, BaseException):
            seen = wrapped
            continue
        if isinstance(seen, ssl.SSLCertVerificationError):
            return str(getattr(seen, "verify_message", None) or seen)
        seen = seen.__cause__ or seen.__context__
    return None


def _skip_netrc(api_client: aio_client.ApiClient) -> None:
    """The official client's aiohttp session trusts the environment, so aiohttp looks for ~/.netrc in a worker
    thread on every request (a thread hop per API call), and a netrc entry for the API server's host makes every
    call fail next to the bearer token. When no proxy is set in the environment, there is nothing else to trust
    it for: the session is replaced by one that does not trust it.

    The client has no setting for it (kubernetes.aio's RESTClientObject builds its session with trust_env=True
    and takes no session from outside), so the replacement keeps the client's connector (its pool and TLS
    context): `detach()` closes the old session without closing the connector, which the new session then owns."""
    if any(os.environ.get(name) or os.environ.get(name.lower()) for name in _PROXY_VARIABLES):
        return
    rest_client = api_client.rest_client
    trusting = rest_client.pool_manager
    connector = trusting.connector
    trusting.detach()
    rest_client.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=False,
                                                     read_bufsize=CLIENT_READ_BUFFER)


def rules_path(namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    base = f"/apis/{API_GROUP}/{API_VERSION}"
    path = f"{base}/namespaces/{quote(namespace)}/{PLURAL}" if namespace else f"{base}/{PLURAL}"
    if name:
        path += f"/{quote(name)}"
    if subresource:
        path += f"/{subresource}"
    return path


def core_path(kind_plural: str, namespace: str, name: str | None = None) -> str:
    path = f"/api/v1/namespaces/{quote(namespace)}/{kind_plural}"
    return f"{path}/{quote(name)}" if name else path


def lease_path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace)}/leases"
    return f"{path}/{quote(name)}" if name else path
