"""A scenario's outages, live: a loopback proxy between the operator's azure-queue source and Azurite.

The simulator fails every poll of a queue during one of its outages (controller/simulator/adapters.py). A live run
(`queuescale demo --scenario`) does the same to the operator's polls only: its source reads the queue through this
proxy, while the workers and the senders keep talking to Azurite directly, as when a storage account throttles the
reads of an autoscaler and the workers' own calls still go through (the demo's choice; a real throttle may hit
both). During a window, measured from the scenario's time 0 (`begin()`: when the demo started the reconciler),
every request through the proxy (Get Queue Metadata, and Peek Messages where the rule peeks) is answered

- for `failure: error`, as Azure answers it: the code's status (503 for ServerBusy) and reason phrase, the
  `x-ms-error-code` header and the XML error body (`<Error><Code>..</Code><Message>..</Message></Error>`, its
  message ending with the RequestId and Time lines Azure adds);
- for `failure: timeout`, not at all until the window ends: the source's own timeout (the poll's budget) runs out
  first, it drops the connection, and the held request ends with it.

Outside the windows, each request is forwarded to Azurite and its answer returned as it came (status, headers but
the hop-by-hop ones, body undecoded). aiohttp serves and forwards; it listens on 127.0.0.1 and a free port, and
`stop()` ends it and every request still held.
"""

from __future__ import annotations

import asyncio
import email.utils
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from controller.simulator.scenario import Outage

# What Azure's queue service answers for the codes a scenario's outages name: status, reason phrase, message.
# https://learn.microsoft.com/rest/api/storageservices/common-rest-api-error-codes
AZURE_ERRORS: dict[str, tuple[int, str]] = {
    "ServerBusy": (503, "The server is busy."),
    "InternalError": (500, "The server encountered an internal error. Please retry the request."),
    "OperationTimedOut": (500, "The operation could not be completed within the permitted time."),
    "AuthenticationFailed": (403, "Server failed to authenticate the request. Make sure the value of Authorization "
                                  "header is formed correctly including the signature."),
    "AuthorizationFailure": (403, "This request is not authorized to perform this operation."),
    "AuthorizationPermissionMismatch": (403, "This request is not authorized to perform this operation using this "
                                             "permission."),
    "QueueNotFound": (404, "The specified queue does not exist."),
    "QueueBeingDeleted": (409, "The specified queue is being deleted."),
}
AZURE_SERVER = "Windows-Azure-Queue/1.0 Microsoft-HTTPAPI/2.0"
# Not forwarded either way: they describe one connection, not the request (RFC 9110, 7.6.1), or the body as sent.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "content-length"})
# The client adds none of its own: the source's request goes on with the headers it had.
AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
FORWARD_TIMEOUT = 30.0  # one forwarded request, at most (Azurite answers in milliseconds)


def unknown_codes(outages: Sequence[Outage]) -> list[str]:
    """The error codes of `outages` the proxy cannot answer as Azure does (not in AZURE_ERRORS)."""
    return sorted({o.code for o in outages if o.failure == "error" and o.code not in AZURE_ERRORS})


def azure_error(code: str, *, version: str | None = None, now: float | None = None) -> web.Response:
    """Azure's answer carrying error `code`: its status and reason phrase, x-ms-error-code and the XML body."""
    status, message = AZURE_ERRORS[code]
    request_id = str(uuid.uuid4())
    at = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 10_000_000):07d}Z"
    body = (f'\ufeff<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{message}\n'
            f"RequestId:{request_id}\nTime:{stamp}</Message></Error>")
    headers = {"Content-Type": "application/xml", "Server": AZURE_SERVER, "x-ms-request-id": request_id,
               "x-ms-error-code": code, "Date": email.utils.formatdate(at, usegmt=True)}
    if version:
        headers["x-ms-version"] = version
    return web.Response(status=status, reason=message, headers=headers, body=body.encode("utf-8"))


@dataclass
class ProxyCounts:
    """What the proxy did with the requests it got."""

    forwarded: int = 0
    errors: int = 0  # answered with an outage's error
    held: int = 0  # left unanswered by a timeout outage


class OutageProxy:
    """The loopback proxy to `upstream` (an origin, `http://127.0.0.1:PORT`) that fails requests during `outages`.

    `start()` listens; until `begin(zero)` every request is forwarded; from then on a request at `clock() - zero`
    seconds within an outage fails as that outage says. `stop()` is idempotent."""

    def __init__(self, upstream: str, outages: Sequence[Outage], *, clock: Callable[[], float] = time.time) -> None:
        missing = unknown_codes(outages)
        if missing:
            raise ValueError(f"no Azure answer known for {', '.join(missing)}")
        self.upstream = URL(upstream)
        self.outages = tuple(sorted(outages, key=lambda o: o.start))
        self.counts = ProxyCounts()
        self._clock = clock
        self._zero: float | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port: int | None = None

    def __repr__(self) -> str:
        return f"OutageProxy(port={self.port}, upstream={self.upstream}, {len(self.outages)} outages)"

    @property
    def url(self) -> str:
        assert self.port is not None, "start() first"
        return f"http://127.0.0.1:{self.port}"

    def begin(self, zero: float) -> None:
        """Measure the windows from `zero` (the clock's reading at the scenario's time 0)."""
        self._zero = zero

    def outage_now(self) -> Outage | None:
        """The outage under way, if any."""
        if self._zero is None:
            return None
        t = self._clock() - self._zero
        return next((o for o in self.outages if o.covers(t)), None)

    async def start(self) -> None:
        """Listen on 127.0.0.1 and a free port (`port`)."""
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._answer)
        # handler_cancellation: a held request ends when its client gives up; shutdown_timeout bounds stop().
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        self._runner = runner
        try:
            listening = socket.socket()
            listening.bind(("127.0.0.1", 0))
            self.port = listening.getsockname()[1]
            await web.SockSite(runner, listening).start()
            self._session = aiohttp.ClientSession(auto_decompress=False, trust_env=False,
                                                  cookie_jar=aiohttp.DummyCookieJar(),
                                                  timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT))
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop listening, end every request still held, close the connections to upstream. Idempotent."""
        runner, self._runner = self._runner, None
        session, self._session = self._session, None
        if runner is not None:
            await runner.cleanup()
        if session is not None:
            await session.close()

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        outage = self.outage_now()
        if outage is not None and outage.failure == "error":
            self.counts.errors += 1
            return azure_error(outage.code, version=request.headers.get("x-ms-version"))
        if outage is not None:
            self.counts.held += 1
            # No answer until the window ends; the client's timeout, shorter, ends the request before that.
            assert self._zero is not None
            await asyncio.sleep(max(0.0, self._zero + outage.end - self._clock()))
        return await self._forward(request)

    async def _forward(self, request: web.Request) -> web.Response:
        session = self._session
        assert session is not None, "start() first"
        target = URL(f"{self.upstream}{request.raw_path}", encoded=True)  # as sent: a signed URL is not re-quoted
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP)
        body = await request.read()
        try:
            async with session.request(request.method, target, headers=headers, data=body or None,
                                       allow_redirects=False, skip_auto_headers=AUTO_HEADERS) as answer:
                content = await answer.read()
                kept = CIMultiDict((k, v) for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP)
                status, reason = answer.status, answer.reason
        except (aiohttp.ClientError, TimeoutError) as exc:  # Azurite gone: a gateway's answer, not an Azure one
            return web.Response(status=502, text=f"the outage proxy could not reach {self.upstream}: "
                                                 f"{type(exc).__name__}")
        self.counts.forwarded += 1
        return web.Response(status=status, reason=reason, body=content, headers=kept)
