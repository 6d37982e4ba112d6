"""The tests' loopback HTTP server: a client resetting its connection is not an error printed among the dots (as
socketserver.BaseServer.handle_error does by default), and a real error while serving fails the test."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

import pytest

from tests.loopback import LoopbackServer, Recorded, Reply, always


def wait_until(check: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_client_resetting_a_kept_alive_connection_is_counted_not_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with LoopbackServer(always(Reply(200, body=b"ok"))) as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as client:
            client.sendall(b"GET /queue HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"\r\n\r\nok"):  # the whole answer: the server is done with this request
                answer += client.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200")
            # SO_LINGER 0: close() sends RST, as a killed process's sockets do; the server is waiting for the
            # next request on the kept-alive connection and its read fails with ECONNRESET.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        wait_until(lambda: server.client_resets == 1)
        assert server.client_resets == 1
        assert server.errors == []
    assert len(server.requests) == 1
    assert "Exception occurred during processing of request" not in capsys.readouterr().err


def test_an_error_while_serving_fails_the_test_when_the_server_stops() -> None:
    def broken(_request: Recorded) -> Reply:
        raise ValueError("the script has a bug")

    server = LoopbackServer(broken).__enter__()
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        client.recv(4096)
    wait_until(lambda: server.errors)
    with pytest.raises(AssertionError, match="ValueError: the script has a bug"):
        server.__exit__(None, None, None)  # what a `with` block ending without an exception of its own calls
