"""Two httpx transports, one through aiohttp and one on plain asyncio (the one the operator uses), and the polling
client built on the latter.

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

`StreamTransport.fetch` keeps the same promises for the Azure poller's own calls without building httpx's request
and response (its errors carry no request); `PollingClient.direct` says when a URL may take that way.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import aiohttp
import httpx
from httpx._utils import get_environment_proxies
from yarl import URL

from controller.net.slots import Slots

__all__ = ["AiohttpTransport", "PollingClient", "RawAnswer", "StreamTransport", "polling_client"]

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



class _Call:
    """One request as its errors name it (method, origin and path; the httpx request when there is one) and its
    time limits: per phase (httpx's connect, read and pool timeouts), a deadline for the whole call (`fetch`), or
    both, whichever comes first."""

    __slots__ = ("connect_timeout", "deadline", "method", "pool_timeout", "read_timeout", "request", "url")

    def __init__(self, method: str, url: httpx.URL, request: httpx.Request | None, deadline: float | None = None,
                 *, connect: float | None = None, read: float | None = None, pool: float | None = None) -> None:
        self.method = method
        self.url = url
        self.request = request
        self.deadline = deadline  # loop time
        self.connect_timeout = connect
        self.read_timeout = read
        self.pool_timeout = pool

    @classmethod
    def of(cls, request: httpx.Request, timeouts: dict[str, float | None]) -> _Call:
        return cls(request.method, request.url, request, connect=timeouts.get("connect"),
                   read=timeouts.get("read"), pool=timeouts.get("pool"))

    def until(self, timeout: float | None) -> float | None:
        """The loop time at which a wait that starts now, bounded by `timeout`, gives up (None: never)."""
        if timeout is None:
            return self.deadline
        end = asyncio.get_running_loop().time() + timeout
        return end if self.deadline is None or end < self.deadline else self.deadline

    def where(self) -> str:
        return _where(self.method, self.url)


class _Slots:
    """The bound on requests in flight, which both transports keep themselves: a slot is given back by the
    request's own `finally`, whatever happened to it, so nothing can leak one and wedge the pool."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_connections must be at least 1, not {limit}")
        self.limit = limit
        self._slots = Slots(limit)

    async def take(self, call: _Call) -> None:
        """A slot, waiting at most until the call's pool limit for one (httpx.PoolTimeout)."""
        if self._slots.free():
            await self._slots.take()
            return
        try:
            async with asyncio.timeout_at(call.until(call.pool_timeout)):
                await self._slots.take()
        except TimeoutError:
            raise httpx.PoolTimeout(
                f"no free connection within the pool timeout ({self.limit} in use) for {call.where()}",
                request=call.request,
            ) from None

    def give_back(self) -> None:
        self._slots.give_back()


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
        self._max_connections_per_host = max_connections_per_host
        self._ssl_context = ssl_context if ssl_context is not None else httpx.create_ssl_context()
        self._keepalive_expiry = keepalive_expiry
        self._slots = _Slots(max_connections)
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
        await self._slots.take(_Call.of(request, timeouts))
        try:
            return await self._send(request, self._timeout(timeouts))
        finally:
            self._slots.give_back()

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


# Methods that a server cannot have acted on twice: resent once on a fresh connection when a reused one closed
# before any byte of the answer (the race where the server times out an idle connection as the client reuses it).
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_MAX_HEAD = 64 * 1024  # a response head larger than this is not an HTTP server we talk to
_SWEEP_SECONDS = 5.0  # how often idle connections of origins no longer polled are looked at and closed


class _ServerClosed(Exception):
    """The server closed (or reset) a connection before sending any byte of the answer."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: buffers what arrives and wakes the one request using it. The request coroutine
    does the parsing, so a poll whose answer arrives in one segment costs one wake-up."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.at_eof = False  # the server sent FIN or the connection is gone: nothing more will arrive
        self.lost: Exception | None = None  # why the connection died, when it was not a clean FIN
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._wake()

    def eof_received(self) -> bool:
        self.at_eof = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.at_eof = True
        self.lost = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def more(self, until: float | None) -> None:
        """Waits for more bytes or the end of the connection; TimeoutError at loop time `until`."""
        waiter = self._waiter = self._loop.create_future()
        timer = None if until is None else self._loop.call_at(until, _time_out, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def usable(self, now: float, expiry: float) -> bool:
        """Whether an idle connection may carry another request: open, silent and not idle too long."""
        return not self.at_eof and not self.buffer and now - self.idle_since < expiry

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()  # no graceful close: nothing we still want goes over it


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class RawAnswer:
    """An answer from `StreamTransport.fetch`: the status, the headers by lowercased name (repeated ones joined
    with ", ", as `httpx.Headers.get` gives them) and the whole body, as sent (not decompressed)."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    def __repr__(self) -> str:
        return f"RawAnswer(status_code={self.status_code}, {len(self.content)} bytes)"


# What `_read_response` gives back: HTTP version, status, reason phrase, headers as sent, body.
_Reply = tuple[bytes, int, bytes, list[tuple[bytes, bytes]], bytes]


class StreamTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests over plain asyncio HTTP/1.1 keep-alive connections, pooled per origin.

    Why: at 1,000 polls/s, aiohttp's request machinery is itself the largest part of a poll's HTTP cost; a poll
    needs one write and one small read, which an `asyncio.Protocol` and a split on CRLF do for a fraction of it.
    Same promises as `AiohttpTransport`: httpx's headers only (a streamed body is read and sent with its length),
    no redirects, no decompression, connect/read/pool timeouts, failures as secret-free `httpx.TransportError`s,
    cancellation closes the connection it interrupted and gives back the slot. `max_connections` bounds the
    requests in flight, and so the connections in use; a request that finds them all busy waits up to its pool
    timeout (`httpx.PoolTimeout`). `fetch` sends a body-less request over the same pool without httpx's request
    and response objects, for the hottest calls (see its docstring).
    """

    def __init__(
        self,
        *,
        max_connections: int = 100,
        ssl_context: ssl.SSLContext | None = None,
        keepalive_expiry: float = KEEPALIVE_SECONDS,
    ) -> None:
        self._ssl_context = ssl_context if ssl_context is not None else httpx.create_ssl_context()
        self._keepalive_expiry = keepalive_expiry
        self._slots = _Slots(max_connections)
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._next_sweep = 0.0
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        call = _Call.of(request, request.extensions.get("timeout", {}))
        version, status, reason, headers, body = await self._exchange(call, await _message(request))
        return httpx.Response(status, headers=headers, stream=_Body(body), request=request,
                              extensions={"http_version": version, "reason_phrase": reason})

    async def fetch(self, method: str, url: httpx.URL, headers: list[tuple[bytes, bytes]], *,
                    timeout: float) -> RawAnswer:
        """Sends a request with no body and exactly `headers` (plus Host, from the URL as httpx writes it), with
        no httpx request or response built: a poll's cheapest way through this transport's pool.

        `timeout` bounds the whole call (a wait for a slot, the connect, the answer and a retry on a fresh
        connection), not each phase. Failures raise what `handle_async_request` raises, without a request
        attached; a cancelled fetch closes its connection and gives back its slot.
        """
        if self._closed:
            raise RuntimeError("the transport is closed")
        call = _Call(method, url, None, asyncio.get_running_loop().time() + timeout)
        parts = [method.encode("ascii"), b" ", url.raw_path, b" HTTP/1.1\r\nHost: ", url.netloc, b"\r\n"]
        for header, text in headers:
            if b"\n" in text or b"\r" in text:  # a header value must not end the header early
                raise httpx.LocalProtocolError(f"a line break in the value of header {header!r} for {call.where()}")
            parts += (header, b": ", text, b"\r\n")
        parts.append(b"\r\n")
        _, status, _, raw_headers, body = await self._exchange(call, b"".join(parts))
        by_name: dict[str, str] = {}
        for raw_name, raw_value in raw_headers:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            by_name[name] = f"{by_name[name]}, {value}" if name in by_name else value
        return RawAnswer(status, by_name, body)

    async def _exchange(self, call: _Call, message: bytes) -> _Reply:
        """Sends `message` on an idle connection to the call's origin (or a new one) within a slot, and reads the
        answer; a reused connection that the server closed first is replaced once for an idempotent method."""
        url = call.url
        scheme = url.scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"unsupported scheme {scheme!r} for {call.where()}", request=call.request)
        origin = (scheme, url.raw_host.decode("ascii"), url.port or _DEFAULT_PORTS[scheme])
        await self._slots.take(call)
        try:
            connection = self._idle_connection(origin)
            while True:
                reused = connection is not None
                if connection is None:
                    connection = await self._connect(origin, call)
                try:
                    assert connection.transport is not None
                    connection.transport.write(message)
                    reply, keep_alive = await _read_response(connection, call)
                except _ServerClosed:
                    connection.close()
                    if reused and call.method in _IDEMPOTENT:
                        connection = None  # once, on a fresh connection: `reused` is False next time round
                        continue
                    raise _lost(connection, call, "no response") from None
                except BaseException:  # a failure, a timeout or a cancellation: the connection is mid-exchange
                    connection.close()
                    raise
                if keep_alive and not self._closed and not connection.at_eof and not connection.buffer:
                    connection.idle_since = asyncio.get_running_loop().time()
                    self._idle.setdefault(origin, []).append(connection)
                else:
                    connection.close()
                return reply
        finally:
            self._slots.give_back()

    def _idle_connection(self, origin: tuple[str, str, int]) -> _Connection | None:
        now = asyncio.get_running_loop().time()
        if now >= self._next_sweep:
            self._sweep(now)
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()  # the most recently used: the least likely to have been closed by the server
            if connection.usable(now, self._keepalive_expiry):
                return connection
            connection.close()
        return None

    def _sweep(self, now: float) -> None:
        """Closes idle connections that expired or that the server closed, for origins no longer polled too."""
        self._next_sweep = now + _SWEEP_SECONDS
        for origin, idle in list(self._idle.items()):
            keep = [c for c in idle if c.usable(now, self._keepalive_expiry)]
            for connection in idle:
                if connection not in keep:
                    connection.close()
            if keep:
                self._idle[origin] = keep
            else:
                del self._idle[origin]

    async def _connect(self, origin: tuple[str, str, int], call: _Call) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        connection = _Connection(loop)
        tls = self._ssl_context if scheme == "https" else None
        try:
            async with asyncio.timeout_at(call.until(call.connect_timeout)):  # DNS, TCP and TLS, as httpx's
                await loop.create_connection(lambda: connection, host, port, ssl=tls,
                                             server_hostname=host if tls is not None else None)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connect timed out for {call.where()}", request=call.request) from None
        except OSError as exc:  # refused, unreachable, DNS (gaierror), TLS verification (SSLError)
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise httpx.ConnectError(f"cannot connect for {call.where()}: {reason} ({type(exc).__name__})",
                                     request=call.request) from None
        return connection

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()


async def _message(request: httpx.Request) -> bytes:
    """The request line, httpx's headers as it built them (Host included), and the body with its length. A
    streamed body (Transfer-Encoding: chunked) is read here and sent with a Content-Length instead."""
    body = await request.aread()
    parts = [request.method.encode("ascii"), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    streamed = False
    for name, value in request.headers.raw:
        if name.lower() == b"transfer-encoding":
            streamed = True
            continue
        parts += (name, b": ", value, b"\r\n")
    if streamed:
        parts += (b"Content-Length: ", str(len(body)).encode("ascii"), b"\r\n")
    parts += (b"\r\n", body)
    return b"".join(parts)


async def _read_response(connection: _Connection, call: _Call) -> tuple[_Reply, bool]:
    """The answer to the request just written, and whether the connection may carry another."""
    buffer = connection.buffer
    try:
        while True:  # skip interim 1xx answers (100 Continue, 103 Early Hints)
            version, status, reason, headers = await _read_head(connection, call)
            if not 100 <= status < 200:
                break
            if status == 101:
                raise _protocol_error(call, "an unexpected protocol switch (101)")
        connection_tokens = b""
        length: int | None = None
        chunked = False
        for name, value in headers:
            lowered = name.lower()
            if lowered == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise _protocol_error(call, "a malformed Content-Length") from None
                if length < 0:
                    raise _protocol_error(call, "a negative Content-Length")
            elif lowered == b"transfer-encoding":
                chunked = value.lower().endswith(b"chunked")
            elif lowered == b"connection":
                connection_tokens += b"," + value.lower()
        keep_alive = version == b"HTTP/1.1" and b"close" not in connection_tokens
        if call.method == "HEAD" or status in (204, 304):
            body = b""
        elif chunked:
            body = await _read_chunked(connection, call)
        elif length is not None:
            while len(buffer) < length:
                if connection.at_eof:
                    raise _lost(connection, call, "incomplete response body")
                await connection.more(call.until(call.read_timeout))
            body = bytes(buffer[:length])
            del buffer[:length]
        else:  # no length: the body runs to the end of the connection
            while not connection.at_eof:
                await connection.more(call.until(call.read_timeout))
            if connection.lost is not None:
                raise _lost(connection, call, "incomplete response body")
            body = bytes(buffer)
            buffer.clear()
            keep_alive = False
    except TimeoutError:
        raise httpx.ReadTimeout(f"read timed out for {call.where()}", request=call.request) from None
    return (version, status, reason, headers, body), keep_alive


async def _read_head(connection: _Connection, call: _Call) -> tuple[bytes, int, bytes, list[tuple[bytes, bytes]]]:
    buffer = connection.buffer
    while (end := buffer.find(b"\r\n\r\n")) < 0:
        if len(buffer) > _MAX_HEAD:
            raise _protocol_error(call, "a response head over 64 KiB")
        if connection.at_eof:
            if not buffer:
                raise _ServerClosed()
            raise _lost(connection, call, "incomplete response head")
        await connection.more(call.until(call.read_timeout))
    head = bytes(buffer[:end])
    del buffer[:end + 4]
    status_line, *lines = head.split(b"\r\n")
    version, _, rest = status_line.partition(b" ")
    code, _, reason = rest.partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise _protocol_error(call, "a malformed status line")
    headers: list[tuple[bytes, bytes]] = []
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not name or name[-1:] in (b" ", b"\t") or line[:1] in (b" ", b"\t"):
            raise _protocol_error(call, "a malformed header line")  # obsolete line folding included
        headers.append((name, value.strip(b" \t")))
    return version, int(code), reason, headers


async def _read_chunked(connection: _Connection, call: _Call) -> bytes:
    buffer = connection.buffer
    body = bytearray()
    while True:
        while (line_end := buffer.find(b"\r\n")) < 0:
            if connection.at_eof:
                raise _lost(connection, call, "incomplete chunked body")
            await connection.more(call.until(call.read_timeout))
        size_text = bytes(buffer[:line_end]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise _protocol_error(call, "a malformed chunk size") from None
        if size == 0:  # the last chunk, optional trailer lines, then an empty line: "0\r\n[...\r\n]\r\n"
            while (end := buffer.find(b"\r\n\r\n", line_end)) < 0:
                if connection.at_eof:
                    raise _lost(connection, call, "incomplete chunked body")
                await connection.more(call.until(call.read_timeout))
            del buffer[:end + 4]
            return bytes(body)
        start = line_end + 2
        while len(buffer) < start + size + 2:
            if connection.at_eof:
                raise _lost(connection, call, "incomplete chunked body")
            await connection.more(call.until(call.read_timeout))
        if buffer[start + size:start + size + 2] != b"\r\n":
            raise _protocol_error(call, "a chunk without its CRLF")
        body += buffer[start:start + size]
        del buffer[:start + size + 2]


def _protocol_error(call: _Call, what: str) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError(f"malformed response for {call.where()}: {what}", request=call.request)


def _lost(connection: _Connection, call: _Call, what: str) -> httpx.TransportError:
    """A connection that ended mid-answer: reset (ReadError) or closed cleanly too early (RemoteProtocolError)."""
    if isinstance(connection.lost, OSError):
        kind = type(connection.lost).__name__
        reason = connection.lost.strerror or kind
        return httpx.ReadError(f"connection failed during {call.where()}: {reason} ({kind})", request=call.request)
    return httpx.RemoteProtocolError(f"server disconnected: {what} for {call.where()}", request=call.request)


def _where(method: str, url: httpx.URL) -> str:
    """The request's method, origin and path: never the query string, where a SAS token or signature lives."""
    port = f":{url.port}" if url.port is not None else ""
    return f"{method} {url.scheme}://{url.host}{port}{url.path}"


def _translate(exc: BaseException, request: httpx.Request) -> httpx.TransportError:
    """The httpx exception the default transport raises for the same failure, with a message free of secrets."""
    where = _where(request.method, request.url)
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


class PollingClient(httpx.AsyncClient):
    """The operator's `httpx.AsyncClient` on `StreamTransport`, which can also tell a caller when a URL may skip
    httpx and go straight to that transport's `fetch`."""

    def __init__(self, *, transport: StreamTransport, mounts: dict[str, httpx.AsyncBaseTransport | None],
                 timeout: float) -> None:
        super().__init__(transport=transport, mounts=mounts, timeout=httpx.Timeout(timeout))
        self._stream = transport
        self._routes: dict[tuple[str, str, int | None], bool] = {}

    def direct(self, url: httpx.URL) -> StreamTransport | None:
        """The `StreamTransport` when httpx would send `url` through it; None when a proxy mount applies (the
        caller then goes through httpx, so proxies keep working). A caller of `fetch` gets no client default
        headers, cookies, auth or event hooks: it sends exactly what it gives."""
        if not self._mounts:  # no proxy in the environment: every URL goes straight to the transport
            return self._stream
        origin = (url.scheme, url.host, url.port)  # mount patterns match scheme, host and port only
        through_us = self._routes.get(origin)
        if through_us is None:
            through_us = self._transport_for_url(url) is self._stream
            if len(self._routes) >= 1024:  # a handful of endpoints in practice
                self._routes.clear()
            self._routes[origin] = through_us
        return self._stream if through_us else None


def polling_client(*, timeout: float, max_connections: int = 200) -> PollingClient:
    """The shared HTTP client of the operator and of `queuescale check` / `record`: httpx over `StreamTransport`."""
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
    transport = StreamTransport(max_connections=max_connections, ssl_context=ssl_context)
    return PollingClient(transport=transport, mounts=mounts, timeout=timeout)
