"""The one HTTP path of the sources: `fetch(method, url, headers, body, timeout)` gives an `Answer` (status,
headers, body), on aiohttp's client.

Why aiohttp called directly, and no httpx or hand-written HTTP/1.1 client under it: at 10,000 rules (1,000 polls/s)
it holds the load on a fraction of one core with p99 lateness far under a second, within a few tens of percent of
the CPU of the hand-written client it replaced, and it is maintained by others (figures: docs/benchmarks.md, "One
HTTP path for the sources"). A source needs one request and one small answer per poll: this narrow protocol is all
it sees, so a test hands it a client on a loopback server, or any object with the same `fetch`.

What `HttpClient.fetch` promises:
- the request carries the caller's headers (a caller that signs them gives every signed one) plus Host, and
  aiohttp's Accept, Accept-Encoding and User-Agent where the caller gave none; a body without a Content-Type gets
  none (aiohttp would add `application/octet-stream`);
- redirects are not followed; a compressed body is decoded;
- `timeout` bounds the whole call: the wait for a free connection, the connect, the request and the answer;
- every failure is an `HttpFailure` (`HttpTimeout` when the time ran out) whose text names the method, origin and
  path, never the query string (a SAS lives there), and which carries nothing of aiohttp's exception;
- a cancelled fetch gives back its connection: cancellation never wedges the pool;
- proxies come from the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY, as urllib reads them), once per
  origin; aiohttp's own `trust_env` is left off, since it would also read ~/.netrc in a thread on every request.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import aiohttp
import certifi
from yarl import URL

__all__ = ["Answer", "Fetch", "HttpClient", "HttpFailure", "HttpTimeout", "polling_client"]

# How long an idle connection is kept for reuse: longer than a rule's usual 10 s polling interval, so that each
# poll reuses its connection (a new TLS handshake costs more CPU than the poll). aiohttp resends an idempotent
# request once on a fresh connection when a reused one turns out to be closed by the server.
KEEPALIVE_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class Answer:
    """What came back: the status, the headers (looked up without regard to case) and the whole body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.body)


class HttpFailure(Exception):
    """No answer: the connection failed, broke or the answer was malformed. The text names no query string."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason  # a few words for a source's own message: "connection refused", "server disconnected"


class HttpTimeout(HttpFailure):
    """No whole answer within the fetch's timeout."""


class Fetch(Protocol):
    """What a source needs of HTTP: one request, one whole answer."""

    async def fetch(self, method: str, url: str, *, headers: Mapping[str, str] | None = None,
                    body: bytes | None = None, timeout: float | None = None) -> Answer:
        """The answer to one request; raises HttpFailure (HttpTimeout) when none came within `timeout` seconds."""
        ...


class HttpClient:
    """One aiohttp session, opened on first use in the running event loop, shared by every source of a process.

    `max_connections` bounds the connections open at once (aiohttp's pool); a fetch that finds them all busy waits
    within its timeout. `ssl_context` defaults to certifi's CA bundle, or `SSL_CERT_FILE` / `SSL_CERT_DIR` when set.
    """

    def __init__(self, *, timeout: float = 5.0, max_connections: int = 200, ssl_context: ssl.SSLContext | None = None,
                 keepalive: float = KEEPALIVE_SECONDS) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections}")
        self.timeout = timeout
        self._max_connections = max_connections
        self._ssl_context = ssl_context if ssl_context is not None else default_ssl_context()
        self._keepalive = keepalive
        self._proxies = urllib.request.getproxies()  # read once, as httpx read them when its client was built
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._proxy_of: dict[tuple[str, str, int | None], URL | None] = {}
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    async def fetch(self, method: str, url: str, *, headers: Mapping[str, str] | None = None,
                    body: bytes | None = None, timeout: float | None = None) -> Answer:
        """The answer to one request; raises HttpFailure (HttpTimeout) when none came within `timeout` seconds
        (the client's default when None)."""
        if self._closed:
            raise RuntimeError("the HTTP client is closed")
        session = self._session if self._session is not None else self._open()
        target = URL(url, encoded=True)  # as written: a signed URL must not be re-quoted
        seconds = self.timeout if timeout is None else timeout
        skip = ("Content-Type",) if body and (headers is None or not _has(headers, "content-type")) else ()
        failure: HttpFailure
        try:
            async with session.request(method, target, headers=headers, data=body, proxy=self._proxy(target),
                                       timeout=self._timeout(seconds), allow_redirects=False,
                                       skip_auto_headers=skip) as answer:
                return Answer(answer.status, answer.headers, await answer.read())
        except TimeoutError:  # aiohttp's own timeouts are TimeoutErrors too
            failure = HttpTimeout(f"no answer within {seconds:g}s for {_where(method, target)}", "timed out")
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            # Built here, raised below: nothing of aiohttp's exception, whose text may hold the whole URL, goes on.
            reason = _reason(exc)
            failure = HttpFailure(f"{reason} for {_where(method, target)}", reason)
        raise failure

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0, ssl=self._ssl_context,
                                         keepalive_timeout=self._keepalive)
        self._session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,  # proxies are ours (see the module docstring); no ~/.netrc
            cookie_jar=aiohttp.DummyCookieJar(),  # a poll is not a browser session
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            raise_for_status=False,
        )
        return self._session

    def _proxy(self, url: URL) -> URL | None:
        origin = (url.scheme, url.host or "", url.port)
        if origin not in self._proxy_of:
            proxy = self._proxies.get(url.scheme) or self._proxies.get("all")
            if proxy is not None and urllib.request.proxy_bypass(url.host or ""):
                proxy = None
            if len(self._proxy_of) >= 1024:
                self._proxy_of.clear()
            self._proxy_of[origin] = URL(proxy) if proxy else None
        return self._proxy_of[origin]

    def _timeout(self, seconds: float) -> aiohttp.ClientTimeout:
        cached = self._timeouts.get(seconds)
        if cached is None:
            cached = aiohttp.ClientTimeout(total=seconds)
            if len(self._timeouts) < 256:  # the budgets a poll gives are few and repeat
                self._timeouts[seconds] = cached
        return cached

    async def aclose(self) -> None:
        """Close every connection; a later fetch raises RuntimeError."""
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.aclose()


def polling_client(*, timeout: float, max_connections: int = 200) -> HttpClient:
    """The shared HTTP client of the operator and of `queuescale check` / `record`."""
    return HttpClient(timeout=timeout, max_connections=max_connections)


def default_ssl_context() -> ssl.SSLContext:
    """What TLS trusts: `SSL_CERT_FILE` / `SSL_CERT_DIR` when set, else certifi's bundle (as httpx did)."""
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if (cafile and os.path.isfile(cafile)) or (capath and os.path.isdir(capath)):
        return ssl.create_default_context(cafile=cafile if cafile and os.path.isfile(cafile) else None,
                                          capath=capath if capath and os.path.isdir(capath) else None)
    return ssl.create_default_context(cafile=certifi.where())


def _has(headers: Mapping[str, str], lowered: str) -> bool:
    return any(name.lower() == lowered for name in headers)


def _where(method: str, url: URL) -> str:
    """The request's method, origin and path: never the query string, where a SAS token or signature lives."""
    port = f":{url.explicit_port}" if url.explicit_port is not None else ""
    return f"{method} {url.scheme}://{url.host}{port}{url.path}"


def _reason(exc: BaseException) -> str:
    """A few words on why there was no answer, from the exception's kind only (its text may hold the URL)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | ssl.SSLError):
        return "TLS verification failed"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect: {exc.os_error.strerror or type(exc.os_error).__name__}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected without a complete answer"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "incomplete answer body"
    if isinstance(exc, aiohttp.ClientResponseError):  # a malformed status line or headers
        return "malformed answer"
    if isinstance(exc, aiohttp.InvalidURL):
        return "invalid URL"
    if isinstance(exc, ValueError):  # aiohttp refuses a header value with a line break
        return "invalid request"
    if isinstance(exc, OSError):  # ClientOSError: reset or broken pipe on an open connection
        return f"connection failed: {exc.strerror or type(exc).__name__}"
    return f"request failed ({type(exc).__name__})"
