"""A tiny asyncio HTTP/1.1 server for /healthz, /readyz and /metrics: GET only, small answers, no dependencies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping

log = logging.getLogger(__name__)

Route = Callable[[], tuple[int, str, bytes]]  # -> (status, content type, body)
REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error",
           503: "Service Unavailable"}


class HttpServer:
    def __init__(self, host: str, port: int, routes: Mapping[str, Route], *, threaded: Iterable[str] = ()) -> None:
        """`threaded`: paths whose handler runs in a worker thread, so that a slow one (rendering 40,000 series
        takes a third of a second at 10,000 rules) does not hold up the event loop and every tick due meanwhile."""
        self.host = host
        self.port = port
        self.routes = dict(routes)
        self.threaded = frozenset(threaded)
        self._server: asyncio.Server | None = None

    async def start(self) -> HttpServer:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await asyncio.wait_for(reader.readline(), 30)
                if not request:
                    return
                while (await asyncio.wait_for(reader.readline(), 30)) not in (b"\r\n", b"\n", b""):
                    pass  # headers are not needed: GET has no body
                parts = request.decode("latin-1").split()
                method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("", "/")
                path = target.split("?", 1)[0]
                route = self.routes.get(path)
                if route is None:
                    status, kind, body = 404, "text/plain", b"not found\n"
                elif method not in ("GET", "HEAD"):
                    status, kind, body = 405, "text/plain", b"GET only\n"
                else:
                    try:
                        if path in self.threaded:
                            status, kind, body = await asyncio.to_thread(route)
                        else:
                            status, kind, body = route()
                    except Exception:
                        log.exception("handler for %s failed", path)
                        status, kind, body = 500, "text/plain", b"internal error\n"
                head = (f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}\r\nContent-Type: {kind}\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n").encode()
                writer.write(head + (body if method != "HEAD" else b""))
                await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
