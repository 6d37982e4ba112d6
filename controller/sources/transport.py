"""An httpx transport that sends requests through aiohttp, and the polling client built on it.

Why: at 1,000 polls/s on one core, httpx's default transport (httpcore over anyio) is the top CPU cost of a tick,
about 0.7 ms per request; aiohttp's C-accelerated HTTP/1.1 client does the same request for a fraction of that
(figures in docs/benchmarks.md). Sources keep taking an `httpx.AsyncClient`: httpx still builds the request
(auth, headers, cookies, timeouts, decoding of the body), only the bytes on the wire go through aiohttp.

What this transport promises, as httpx's own does:
- the request goes out with httpx's headers only: aiohttp adds no Accept, Accept-Encoding, User-Agent or
  Content-Type of its own (Azure Shared Key signs Content-Type and Content-Length), no cookies, no netrc auth;
- no redirects are followed and no body is decompressed here (httpx does both);
- the per-request timeouts (connect, read, pool) hold, and every failure is an `httpx.TransportError` subclass
  carrying the request, whose message never holds the URL's query string (a SAS lives there);
- a cancelled request gives back its pool slot: cancellation never wedges the pool.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from types import TracebackType

import aiohttp
import httpx
from httpx._utils import get_environment_proxies
from yarl import URL

__all__ = ["AiohttpTransport", "polling_client"]

# aiohttp adds these when a request lacks them; httpx always sets the first three itself, and it sets
# Content-Type only when the caller gave one. An added `Content-Type: application/octet-stream` would break a
# Shared Key signature, which covers Content-Type.
_NOT_AUTOMATIC = frozenset({"Accept", "Accept-Encoding", "User-Agent", "Content-Type"})

# How long an idle connection is kept for reuse. Longer than httpx's 5 s so that a rule polled every 10 s reuses
# its connection (a new TLS handshake costs more CPU than the poll); aiohttp retries an idempotent request once on
# a fresh connection when a reused one turns out to be closed by the server.
KEEPALIVE_SECONDS = 15.0


class _Body(httpx.AsyncByteStream):
    """A body already read from the wire. httpx reads it through its own stream wrapper, which decodes it and
    stamps `response.elapsed`, as with its default transport."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._body:
            yield self._body


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests through one `aiohttp.ClientSession`, opened on first use in the running event loop.

    `max_connections` bounds the requests in flight (and so the open connections); a request that finds them all
    busy waits up to its pool timeout (`httpx.PoolTimeout`). `max_connections_per_host` (0: no limit) is
    aiohttp's own per-host bound; a wait for it counts against the connect timeout. `ssl_context` defaults to
    httpx's (certifi's CA bundle, or `SSL_CERT_FILE` / `SSL_CERT_DIR`), so TLS trusts what it trusted before.
    """

    def __init__(
        self,
        *,
        max_connections: int = 100,
        max_connections_per_host: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        keepalive_expiry: float = KEEPALIVE_SECONDS,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections}")
        self._max_connections = max_connections
        self._max_connections_per_host = max_connections_per_host
        self._ssl_context = ssl_context if ssl_context is not None else httpx.create_ssl_context()
        self._keepalive_expiry = keepalive_expiry
        self._slots = asyncio.Semaphore(max_connections)
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._timeouts: dict[tuple[float | None, float | None], aiohttp.ClientTimeout] = {}

    def _open_session(self) -> aiohttp.ClientSession:
        # limit=0: our semaphore is the bound. aiohttp's own limit would be a second pool that a leaked slot could
        # wedge; ours is released by `async with` whatever happens to the request.
        connector = aiohttp.TCPConnector(
            limit=0, limit_per_host=self._max_connections_per_host, ssl=self._ssl_context,
            keepalive_timeout=self._keepalive_expiry,
        )
        return aiohttp.ClientSession(
            connector=connector,
            # trust_env=False: with it aiohttp reads ~/.netrc in a thread for every request and picks proxies
            # itself; httpx has already applied the environment (see polling_client for proxies).
            trust_env=False,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # httpx keeps the cookies
            timeout=aiohttp.ClientTimeout(total=None),
            raise_for_status=False,
        )

    def _timeout(self, timeouts: dict[str, float | None]) -> aiohttp.ClientTimeout:
        connect, read = timeouts.get("connect"), timeouts.get("read")
        cached = self._timeouts.get((connect, read))
        if cached is None:
            # connect bounds DNS plus the TCP and TLS handshakes (aiohttp's `connect` covers DNS, `sock_connect`
            # the handshakes), as httpx's connect timeout does. aiohttp has no write timeout: a stalled upload is
            # cut by the read timer, which runs from when the request starts to be sent.
            cached = aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=connect, sock_read=read)
            if len(self._timeouts) < 64:  # a handful of distinct budgets in practice
                self._timeouts[(connect, read)] = cached
        return cached

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        if self._slots.locked():
            try:
                async with asyncio.timeout(timeouts.get("pool")):
                    await self._slots.acquire()
            except TimeoutError:
                raise httpx.PoolTimeout(
                    f"no free connection within the pool timeout ({self._max_connections} in use) for "
                    f"{_where(request)}", request=request,
                ) from None
        else:
            await self._slots.acquire()
        try:
            return await self._send(request, self._timeout(timeouts))
        finally:
            self._slots.release()

    async def _send(self, request: httpx.Request, timeout: aiohttp.ClientTimeout) -> httpx.Response:
        if self._session is None:
            self._session = self._open_session()
        # The raw list: names keep their case and repeated names stay separate, as httpx would send them. A
        # Transfer-Encoding header means a streamed body: it is read here and aiohttp sends it with a length.
        headers: list[tuple[str, str]] = []
        present: set[str] = set()
        for raw_name, raw_value in request.headers.raw:
            name = raw_name.decode("latin-1")
            if name.lower() == "transfer-encoding":
                continue
            present.add(name.title())
            headers.append((name, raw_value.decode("latin-1")))
        body = await request.aread()
        # Ask aiohttp to skip only the automatic headers this request lacks and could get: skipping copies aiohttp's
        # header map, a cost worth avoiding on every poll. httpx always sets Accept, Accept-Encoding and User-Agent;
        # aiohttp adds a Content-Type to a POST, PUT or PATCH or to any body.
        missing = set(_NOT_AUTOMATIC - present)
        if not body and request.method not in ("POST", "PUT", "PATCH"):
            missing.discard("Content-Type")
        failure: httpx.TransportError
        try:
            async with self._session.request(
                request.method,
                URL(str(request.url), encoded=True),  # as httpx encoded it: a signed URL must not be re-quoted
                headers=headers,
                data=body or None,
                skip_auto_headers=missing or None,
                allow_redirects=False,
                timeout=timeout,
            ) as answer:
                content = await answer.read()
                return httpx.Response(
                    answer.status,
                    headers=list(answer.raw_headers),
                    stream=_Body(content),
                    request=request,
                    extensions={"http_version": b"HTTP/1.1", "reason_phrase": (answer.reason or "").encode()},
                )
        except (aiohttp.ClientError, OSError) as exc:
            # TimeoutError is an OSError. Built here, raised below: the httpx exception carries no reference to
            # aiohttp's, whose message or request_info may hold the full URL.
            failure = _translate(exc, request)
        raise failure

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def __aenter__(self) -> AiohttpTransport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()


def _where(request: httpx.Request) -> str:
    """The request's method, origin and path: never the query string, where a SAS token or signature lives."""
    url = request.url
    port = f":{url.port}" if url.port is not None else ""
    return f"{request.method} {url.scheme}://{url.host}{port}{url.path}"


def _translate(exc: BaseException, request: httpx.Request) -> httpx.TransportError:
    """The httpx exception the default transport raises for the same failure, with a message free of secrets."""
    where = _where(request)
    kind = type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(f"connect timed out for {where}", request=request)
    if isinstance(exc, TimeoutError):  # aiohttp.SocketTimeoutError and anything else that timed out
        return httpx.ReadTimeout(f"read timed out for {where}", request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        reason = exc.os_error.strerror or type(exc.os_error).__name__
        return httpx.ConnectError(f"cannot connect for {where}: {reason} ({kind})", request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError(f"server disconnected without a complete response for {where}",
                                         request=request)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(f"incomplete response body for {where} ({kind})", request=request)
    if isinstance(exc, aiohttp.ClientResponseError):  # a malformed status line or headers
        return httpx.RemoteProtocolError(f"malformed response for {where} ({kind}, status {exc.status})",
                                         request=request)
    if isinstance(exc, OSError):  # ClientOSError: reset or broken pipe on an open connection
        reason = exc.strerror or kind
        return httpx.ReadError(f"connection failed during {where}: {reason} ({kind})", request=request)
    return httpx.TransportError(f"request failed for {where} ({kind})", request=request)


def polling_client(*, timeout: float, max_connections: int = 200) -> httpx.AsyncClient:
    """The shared HTTP client of the operator and of `queuescale check` / `record`: httpx over aiohttp."""
    ssl_context = httpx.create_ssl_context()
    # httpx mounts proxy transports for HTTP(S)_PROXY / ALL_PROXY / NO_PROXY only when it builds its own transport
    # (`allow_env_proxies = trust_env and transport is None` in httpx._client), so with ours we mount them here,
    # from the very function httpx uses. Proxied requests keep httpx's own transport: behaviour over a proxy is
    # unchanged (CONNECT tunnels, SOCKS); only direct requests take the fast path. NO_PROXY entries map to None,
    # which httpx reads as "the client's transport", i.e. ours.
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    mounts: dict[str, httpx.AsyncBaseTransport | None] = {
        pattern: None if proxy is None else httpx.AsyncHTTPTransport(proxy=proxy, verify=ssl_context, limits=limits)
        for pattern, proxy in get_environment_proxies().items()
    }
    transport = AiohttpTransport(max_connections=max_connections, ssl_context=ssl_context)
    return httpx.AsyncClient(transport=transport, mounts=mounts, timeout=httpx.Timeout(timeout))
