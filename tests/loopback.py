"""A tiny scripted HTTP server on 127.0.0.1 (a thread), recording every request it gets.

A client that resets its connection (a process killed or frozen and woken with its sockets timed out) is counted
in `client_resets`, as a real server would shrug it off; any other error while serving is kept in `errors` and
fails the test when the server stops, instead of socketserver printing a traceback among the test dots.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str  # with the query
    headers: dict[str, str]
    body: bytes

    @property
    def form(self) -> dict[str, str]:
        return {name: values[0] for name, values in parse_qs(self.body.decode()).items()}

    @property
    def route(self) -> str:
        return urlsplit(self.path).path


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


Script = Callable[[Recorded], Reply]


def always(reply: Reply) -> Script:
    """A script that gives every request the same answer."""
    return lambda _request: reply


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: LoopbackServer, handler: type[BaseHTTPRequestHandler]) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), handler)

    def handle_error(self, request: object, client_address: object) -> None:
        # socketserver's default prints "Exception occurred during processing of request from ..." and a
        # traceback to stderr, which nobody asserts on: keep it for the test instead.
        error = sys.exc_info()[1]
        with self.owner._lock:
            self.owner.errors.append(f"{type(error).__name__}: {error}")


class LoopbackServer:
    """Answers each request with `script(request)`; `requests` lists what came, in order."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[Recorded] = []
        self.client_resets = 0  # connections the client reset (between or during requests)
        self.errors: list[str] = []  # anything else that went wrong while serving
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle(self) -> None:
                try:
                    super().handle()
                except (ConnectionResetError, BrokenPipeError):
                    # The client went away without closing cleanly (the operator's process killed, or frozen
                    # by SIGSTOP until its connections timed out): ordinary for a server, not a failure.
                    with owner._lock:
                        owner.client_resets += 1

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with owner._lock:
                    owner.requests.append(request)
                reply = owner.script(request)
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (a timeout test): nothing to answer

            do_GET = do_POST = do_HEAD = _serve  # noqa: N815

            def log_message(self, *_args: object) -> None:
                return

        self._server = _Server(self, Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), name="loopback", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        if self.errors and exc[0] is None:
            raise AssertionError(f"the loopback server failed while serving: {self.errors}")
