"""The health and metrics HTTP servers, on aiohttp's web server (already a dependency through kubernetes.aio).

aiohttp rather than a server of our own: on a graceful stop it closes idle keep-alive connections (Prometheus holds
one to /metrics, the kubelet may hold one to the probes) and lets a request in progress finish within a short
timeout, quietly. The hand-written server it replaces cancelled each connection's pending read, and asyncio logged
that as an ERROR with a traceback on every rollout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

log = logging.getLogger(__name__)

Probe = Callable[[], tuple[int, bytes]]  # -> (status, plain-text body)

# A request still in progress when the server stops gets this long to finish; less than the operator's own shutdown
# grace, so a slow scrape never holds a rollout up.
STOP_TIMEOUT = 2.0


class HttpServer:
    """One aiohttp application on one port. `start()` binds it (port 0: a free one, then in `port`)."""

    def __init__(self, host: str, port: int, app: web.Application) -> None:
        self.host = host
        self.port = port
        self.app = app
        # No access log: Prometheus and the kubelet would add a line every few seconds each.
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=STOP_TIMEOUT)

    async def start(self) -> HttpServer:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        """Stop listening, close idle keep-alive connections, let a request in progress finish (STOP_TIMEOUT)."""
        await self._runner.cleanup()


def probe_app(routes: Mapping[str, Probe]) -> web.Application:
    """GET (and HEAD) on each path answers what its probe says, as text/plain; cheap probes, on the event loop
    (that is what /healthz checks)."""
    app = web.Application()
    for path, probe in routes.items():
        app.router.add_get(path, _probe_handler(probe))
    return app


def _probe_handler(probe: Probe) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        del request
        status, body = probe()
        return web.Response(status=status, body=body, content_type="text/plain")

    return handle


def metrics_app(registry: CollectorRegistry, path: str = "/metrics") -> web.Application:
    """`path` serves the registry in the format the scraper asks for (Prometheus text or OpenMetrics, as
    prometheus_client's own servers choose), gzip when it accepts it. Rendered in a worker thread: 40,000 series
    (10,000 rules) take a third of a second, which on the event loop would make every tick due meanwhile late.
    (That is why this is not prometheus_client's own `make_aiohttp_handler`: as of 0.26 it renders on the loop.)"""

    async def handle(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = await asyncio.to_thread(encoder, registry)
        # Compressed, when the scraper accepts gzip, in a worker thread too (zlib_executor_size=0: whatever the size).
        response = web.Response(body=body, headers={"Content-Type": content_type}, zlib_executor_size=0)
        response.enable_compression()
        return response

    app = web.Application()
    app.router.add_get(path, handle)
    return app
