"""The sources' one HTTP path (`controller.net.http.HttpClient`, on aiohttp) against real servers on 127.0.0.1:
what goes out, what comes back, every way a fetch fails (always an HttpFailure that names no query string), the
pool, cancellation, TLS and proxies from the environment."""

from __future__ import annotations

import ast
import asyncio
import gzip
import shutil
import socket
import ssl
import subprocess
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from controller.net.http import Answer, HttpClient, HttpFailure, HttpTimeout, polling_client

SECRET_QUERY = "sv=2025-11-05&sp=r&sig=TOPSECRETsignature%2B0123"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "RawServer"], Awaitable[None]]


@dataclass
class Received:
    line: str  # "GET /path?query HTTP/1.1"
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class RawServer:
    """An HTTP/1.1 server written against the socket, so a test controls every byte and when the connection ends."""

    url: str
    requests: list[Received] = field(default_factory=list)
    connections: int = 0


async def read_request(reader: asyncio.StreamReader) -> Received | None:
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head:
        return None
    line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = [(name.strip(), value.strip()) for name, value in
               (h.split(":", 1) for h in header_lines if h)]
    names = {name.lower(): value for name, value in headers}
    body = b""
    if "content-length" in names:
        body = await reader.readexactly(int(names["content-length"]))
    elif names.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            body += chunk[:-2]
    return Received(line, headers, body)


def response(status: str, headers: list[tuple[str, str]], body: bytes = b"", *, length: bool = True) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in headers)]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def answering(make: Callable[[Received], bytes]) -> Handler:
    """A keep-alive handler: every request on a connection gets `make(request)`."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        while (request := await read_request(reader)) is not None:
            server.requests.append(request)
            writer.write(make(request))
            await writer.drain()
    return handle


def ok(body: bytes = b"ok") -> Handler:
    def make(request: Received) -> bytes:
        if request.line.startswith("HEAD"):  # the length the GET would have, and no body
            return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        return response("200 OK", [], body)
    return answering(make)


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[RawServer]:
    writers: set[asyncio.StreamWriter] = set()
    state = RawServer(url="")

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.connections += 1
        writers.add(writer)
        try:
            await handler(reader, writer, state)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writers.discard(writer)
            writer.close()

    server = await asyncio.start_server(connected, "127.0.0.1", 0)
    state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield state
    finally:
        server.close()
        for writer in list(writers):
            writer.close()
        await server.wait_closed()


def client(*, max_connections: int = 100, timeout: float = 5.0) -> HttpClient:
    return HttpClient(timeout=timeout, max_connections=max_connections)


def secret_free(exc: BaseException) -> str:
    """Everything a log line or traceback could show of `exc`; asserts it holds no part of the query."""
    shown = "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])
    for part in ("TOPSECRET", "sig=", "sp=r"):
        assert part not in shown, f"the query string leaked: {shown}"
    return shown


# --------------------------------------------------------------------------------------------------------------
# What comes back


async def test_status_headers_and_body_come_back_as_sent() -> None:
    headers = [("X-Dup", "one"), ("x-ms-request-id", "r1"), ("X-Dup", "two")]
    async with raw_server(answering(lambda _r: response("418 I'm a teapot", headers, b"short and stout"))) as server, \
            client() as http:
        answer = await http.fetch("GET", f"{server.url}/pot")
    assert (answer.status, answer.body) == (418, b"short and stout")
    assert answer.headers["X-MS-REQUEST-ID"] == "r1"  # any case
    assert answer.headers.get("x-dup") == "one"
    assert answer.headers["content-length"] == "15"


async def test_chunked_body_is_joined_and_the_connection_kept() -> None:
    chunked = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    async with raw_server(answering(lambda _r: response("200 OK", [("Transfer-Encoding", "chunked")], chunked,
                                                        length=False))) as server, client() as http:
        answer = await http.fetch("GET", f"{server.url}/chunks")
        again = await http.fetch("GET", f"{server.url}/chunks")
    assert answer.body == b"hello world" == again.body
    assert server.connections == 1


async def test_chunked_body_with_extensions_trailers_and_split_segments_is_joined() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        while (request := await read_request(reader)) is not None:
            server.requests.append(request)
            for piece in (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"5;ext=1\r\nhel",
                          b"lo\r\n", b"0\r\nX-Trailer: t\r\n\r\n"):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.01)

    async with raw_server(handle) as server, client() as http:
        answer = await http.fetch("GET", f"{server.url}/q")
        again = await http.fetch("GET", f"{server.url}/q")
    assert answer.body == b"hello" == again.body
    assert server.connections == 1


async def test_empty_bodies_head_and_no_content() -> None:
    def make(request: Received) -> bytes:
        if request.line.startswith("HEAD"):  # a HEAD answer announces a length but carries no body
            return b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nx-ms-approximate-messages-count: 7\r\n\r\n"
        if "/gone" in request.line:
            return b"HTTP/1.1 204 No Content\r\n\r\n"
        return response("200 OK", [], b"")

    async with raw_server(answering(make)) as server, client() as http:
        head = await http.fetch("HEAD", f"{server.url}/q")
        empty = await http.fetch("GET", f"{server.url}/empty")
        gone = await http.fetch("DELETE", f"{server.url}/gone")
        after = await http.fetch("GET", f"{server.url}/empty")  # all on one connection: no body was waited for
    assert (head.status, head.body, head.headers["x-ms-approximate-messages-count"]) == (200, b"", "7")
    assert (empty.status, empty.body, gone.status, gone.body, after.status) == (200, b"", 204, b"", 200)
    assert server.connections == 1


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\n\r\nto the end",
    b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nto the end",
], ids=["1.1-no-length", "1.0"])
async def test_a_body_without_length_is_read_to_the_close_and_the_connection_not_reused(answer: bytes) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        request = await read_request(reader)
        assert request is not None
        server.requests.append(request)
        writer.write(answer)
        await writer.drain()
        writer.close()

    async with raw_server(handle) as server, client() as http:
        first = await http.fetch("GET", f"{server.url}/q")
        second = await http.fetch("GET", f"{server.url}/q")
    assert first.body == second.body == b"to the end"
    assert server.connections == 2


async def test_a_compressed_body_is_decoded_and_an_encoded_path_kept() -> None:
    packed = gzip.compress(b'{"messages_ready": 3}')
    async with raw_server(answering(lambda _r: response("200 OK", [("Content-Encoding", "gzip")], packed))) as server, \
            client() as http:
        answer = await http.fetch("GET", f"{server.url}/api/queues/%2F/q")
    assert answer.json() == {"messages_ready": 3}
    assert server.requests[0].line == "GET /api/queues/%2F/q HTTP/1.1"  # %2F stays encoded


def test_an_answer_that_is_not_json_raises_value_error() -> None:
    with pytest.raises(ValueError, match="Expecting value"):
        Answer(200, {}, b"<html>").json()


async def test_redirects_are_not_followed() -> None:
    def make(request: Received) -> bytes:
        if "/old" in request.line:
            return response("302 Found", [("Location", "/new")])
        return response("200 OK", [], b"new")

    async with raw_server(answering(make)) as server, client() as http:
        answer = await http.fetch("GET", f"{server.url}/old")
    assert (answer.status, answer.headers["location"], len(server.requests)) == (302, "/new", 1)


# --------------------------------------------------------------------------------------------------------------
# What goes out


async def sent(call: Callable[[HttpClient, str], Awaitable[Answer]]) -> Received:
    async with raw_server(ok()) as server, client() as http:
        await call(http, server.url)
    [request] = server.requests
    return request


async def test_a_signed_get_goes_out_as_written_with_the_callers_headers() -> None:
    """The query is not re-quoted (a signature covers it) and the caller's headers go out as given: Shared Key
    signs x-ms-*, and aiohttp adds neither Content-Type nor Content-Length to a GET (both would be signed)."""
    query = f"comp=metadata&{SECRET_QUERY}&x=a%2Fb%20c"
    request = await sent(lambda http, url: http.fetch(
        "GET", f"{url}/acct/q?{query}",
        headers={"x-ms-version": "2025-11-05", "Authorization": "SharedKey a:b", "User-Agent": "queuescale/1"}))
    assert request.line == f"GET /acct/q?{query} HTTP/1.1"
    names = {name.lower(): value for name, value in request.headers}
    assert (names["x-ms-version"], names["authorization"], names["user-agent"]) == (
        "2025-11-05", "SharedKey a:b", "queuescale/1")
    assert "content-type" not in names and "content-length" not in names
    assert request.body == b""


async def test_a_post_carries_its_body_its_length_and_the_content_type_it_was_given() -> None:
    request = await sent(lambda http, url: http.fetch(
        "POST", f"{url}/", headers={"content-type": "application/x-amz-json-1.0"}, body=b'{"QueueUrl": "q"}'))
    names = {name.lower(): value for name, value in request.headers}
    assert (names["content-type"], names["content-length"]) == ("application/x-amz-json-1.0", "17")
    assert request.body == b'{"QueueUrl": "q"}'


async def test_a_post_with_no_content_type_gets_none() -> None:
    """aiohttp would add `Content-Type: application/octet-stream` to a bytes body; Shared Key signs Content-Type."""
    request = await sent(lambda http, url: http.fetch("POST", f"{url}/", body=b"raw"))
    assert [name for name, _ in request.headers if name.lower() == "content-type"] == []
    assert request.body == b"raw"


async def test_a_header_value_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    async with raw_server(ok()) as server, client() as http:
        with pytest.raises(HttpFailure) as caught:
            await http.fetch("GET", f"{server.url}/q?{SECRET_QUERY}", headers={"x-ms-date": "now\r\nX-Evil: 1"})
    secret_free(caught.value)
    assert server.requests == []


# --------------------------------------------------------------------------------------------------------------
# Timeouts and failures


def silent() -> Handler:
    """Reads requests and never answers."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        while (request := await read_request(reader)) is not None:
            server.requests.append(request)
    return handle


async def test_no_answer_is_a_timeout_that_names_no_query() -> None:
    async with raw_server(silent()) as server, client() as http:
        with pytest.raises(HttpTimeout) as caught:
            await http.fetch("GET", f"{server.url}/q?{SECRET_QUERY}", timeout=0.2)
    assert "GET http://127.0.0.1" in secret_free(caught.value)
    assert "/q" in str(caught.value)


async def test_the_timeout_bounds_the_whole_call_not_each_read() -> None:
    """A server that trickles its answer a byte at a time never lets a per-read timeout fire; fetch's does."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        for _ in range(100):
            await asyncio.sleep(0.05)
            writer.write(b"x")
            await writer.drain()

    async with raw_server(handle) as server, client() as http:
        started = asyncio.get_running_loop().time()
        with pytest.raises(HttpTimeout) as caught:
            await http.fetch("GET", f"{server.url}/q?{SECRET_QUERY}", timeout=0.3)
    assert asyncio.get_running_loop().time() - started < 1.0
    secret_free(caught.value)


@contextmanager
def full_backlog() -> Iterator[str]:
    """A listening socket whose accept queue is full and never drained: a connect to it hangs (SYNs are dropped)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        yield f"http://127.0.0.1:{port}"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


async def test_a_connect_that_hangs_is_a_timeout() -> None:
    with full_backlog() as url:
        async with client() as http:
            with pytest.raises(HttpTimeout) as caught:
                await http.fetch("GET", f"{url}/q?{SECRET_QUERY}", timeout=0.3)
    secret_free(caught.value)


async def test_waiting_for_a_busy_pool_counts_against_the_timeout() -> None:
    async with raw_server(silent()) as server, client(max_connections=1) as http:
        busy = asyncio.ensure_future(http.fetch("GET", f"{server.url}/slow", timeout=2.0))
        await asyncio.sleep(0.1)
        started = asyncio.get_running_loop().time()
        with pytest.raises(HttpTimeout) as caught:
            await http.fetch("GET", f"{server.url}/q?{SECRET_QUERY}", timeout=0.2)
        assert asyncio.get_running_loop().time() - started < 1.0
        busy.cancel()
        await asyncio.gather(busy, return_exceptions=True)
    secret_free(caught.value)


async def test_a_refused_connection_is_a_failure_that_says_so() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: refused
        async with client() as http:
            with pytest.raises(HttpFailure) as caught:
                await http.fetch("GET", f"http://127.0.0.1:{port}/q?{SECRET_QUERY}", timeout=2.0)
    shown = secret_free(caught.value)
    assert not isinstance(caught.value, HttpTimeout)
    assert f"127.0.0.1:{port}/q" in shown
    assert caught.value.reason.startswith("cannot connect")


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ncut short",  # a connection closed mid-body
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",  # garbage instead of HTTP
], ids=["closed-mid-body", "not-http"])
async def test_a_broken_answer_is_a_failure(answer: bytes) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()
        writer.close()

    async with raw_server(handle) as server, client() as http:
        with pytest.raises(HttpFailure) as caught:
            await http.fetch("GET", f"{server.url}/q?{SECRET_QUERY}", timeout=2.0)
    assert not isinstance(caught.value, HttpTimeout)
    secret_free(caught.value)


async def test_a_failure_carries_nothing_of_aiohttps_exception() -> None:
    """aiohttp's exceptions may hold the whole URL (request_info): none is chained to ours."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        async with client() as http:
            with pytest.raises(HttpFailure) as caught:
                await http.fetch("GET", f"http://127.0.0.1:{probe.getsockname()[1]}/q?{SECRET_QUERY}")
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__ or caught.value.__context__ is None


# --------------------------------------------------------------------------------------------------------------
# Keep-alive and the pool


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        request = await read_request(reader)
        assert request is not None
        server.requests.append(request)
        writer.write(response("200 OK", [], b"once"))  # no `Connection: close`: the client keeps it for reuse
        await writer.drain()
        writer.close()

    async with raw_server(handle) as server, client() as http:
        first = await http.fetch("GET", f"{server.url}/q")
        await asyncio.sleep(0.1)  # the FIN has arrived
        second = await http.fetch("GET", f"{server.url}/q")
    assert (first.body, second.body, server.connections) == (b"once", b"once", 2)


def close_on_second_request() -> Handler:
    """Answers the first request of a connection; reads the second and closes without answering (the race where a
    server times out an idle connection just as the client reuses it)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        request = await read_request(reader)
        assert request is not None
        server.requests.append(request)
        writer.write(response("200 OK", [], b"fresh"))
        await writer.drain()
        if (request := await read_request(reader)) is not None:
            server.requests.append(request)
    return handle


async def test_a_reused_connection_that_dies_is_retried_once_for_get_not_for_post() -> None:
    """aiohttp resends an idempotent request once on a new connection when a reused one closes before answering;
    a POST fails."""
    async with raw_server(close_on_second_request()) as server, client() as http:
        await http.fetch("GET", f"{server.url}/q")
        again = await http.fetch("GET", f"{server.url}/q")
        assert (again.status, again.body, server.connections) == (200, b"fresh", 2)
        with pytest.raises(HttpFailure):
            await http.fetch("POST", f"{server.url}/q", body=b"x")


async def test_connections_are_reused_and_bounded_by_max_connections() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        while (request := await read_request(reader)) is not None:
            server.requests.append(request)
            await asyncio.sleep(0.02)
            writer.write(response("200 OK", [], b"ok"))
            await writer.drain()

    async with raw_server(handle) as server, client(max_connections=4) as http:
        answers = await asyncio.gather(*(http.fetch("GET", f"{server.url}/q") for _ in range(40)))
    assert [a.status for a in answers] == [200] * 40
    assert server.connections == 4


# --------------------------------------------------------------------------------------------------------------
# Cancellation


async def test_cancelled_requests_do_not_wedge_the_pool() -> None:
    """The httpcore failure mode that once wedged the operator: hundreds of requests cancelled while waiting for a
    connection, while connecting (a connect that hangs) and while waiting for an answer leave the pool usable."""
    async with client(max_connections=10) as http:
        async with raw_server(silent()) as server:
            with full_backlog() as hanging:
                crowd = [http.fetch("GET", f"{hanging if i % 3 == 0 else server.url}/q") for i in range(300)]
                outcomes = await asyncio.gather(*(asyncio.wait_for(call, 0.3) for call in crowd), return_exceptions=True)
        assert all(isinstance(o, TimeoutError) for o in outcomes), {type(o).__name__ for o in outcomes}
        async with raw_server(ok(b"after")) as server:
            answers = await asyncio.wait_for(
                asyncio.gather(*(http.fetch("GET", f"{server.url}/q") for _ in range(30))), 3.0)
    assert [a.body for a in answers] == [b"after"] * 30


async def test_a_hundred_cancelled_requests_leave_a_pool_of_two_usable() -> None:
    """Cancelled while connecting, while waiting for a connection, mid-answer: a normal request afterwards gets an
    answer at once."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        while (request := await read_request(reader)) is not None:
            server.requests.append(request)
            if "/slow" in request.line:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")  # and never the rest
                await writer.drain()
                continue
            writer.write(response("200 OK", [], b"after"))
            await writer.drain()

    async with raw_server(handle) as server, client(max_connections=2) as http:
        for round_ in range(10):
            crowd = [asyncio.ensure_future(http.fetch("GET", f"{server.url}/slow")) for _ in range(10)]
            await asyncio.sleep(0.005 * round_)  # cancel at different points of the exchange
            for call in crowd:
                call.cancel()
            outcomes = await asyncio.gather(*crowd, return_exceptions=True)
            assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)
        answer = await asyncio.wait_for(http.fetch("GET", f"{server.url}/q"), 1.0)
    assert answer.body == b"after"


def echo_path_late(hung_up: list[str]) -> Handler:
    """Answers each request with its path, 50 ms late for /late; notes the last request line when the client hangs
    up."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        while (request := await read_request(reader)) is not None:
            server.requests.append(request)
            await asyncio.sleep(0.05 if "/late" in request.line else 0)
            writer.write(response("200 OK", [], request.line.split()[1].encode()))
            await writer.drain()
        hung_up.append(server.requests[-1].line)
    return handle


async def test_a_cancelled_request_never_lends_its_answer_to_the_next() -> None:
    """Bytes of a cancelled request's answer must never be read as the answer to the next request."""
    hung_up: list[str] = []
    async with raw_server(echo_path_late(hung_up)) as server, client(max_connections=1) as http:
        await http.fetch("GET", f"{server.url}/warm")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(http.fetch("GET", f"{server.url}/late"), 0.01)
        await asyncio.sleep(0.1)  # the late answer has arrived by now
        answer = await http.fetch("GET", f"{server.url}/next")
    assert answer.body == b"/next"


# --------------------------------------------------------------------------------------------------------------
# TLS, proxies, life cycle


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


async def test_tls_is_verified_by_default_and_a_given_context_is_used(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await read_request(reader) is not None:
                writer.write(response("200 OK", [], b"secure"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connected, "127.0.0.1", 0, ssl=server_side)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/q?{SECRET_QUERY}"
    try:
        async with HttpClient() as http:
            with pytest.raises(HttpFailure) as caught:
                await http.fetch("GET", url, timeout=5.0)
        secret_free(caught.value)
        assert "TLS" in str(caught.value)
        async with HttpClient(ssl_context=ssl.create_default_context(cafile=str(cert))) as http:
            assert (await http.fetch("GET", url, timeout=5.0)).body == b"secure"
    finally:
        server.close()
        await server.wait_closed()


async def test_environment_proxies_are_used_but_not_for_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    async with raw_server(answering(lambda r: response("200 OK", [], f"proxy saw {r.line}".encode()))) as proxy, \
            raw_server(ok(b"direct")) as direct:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        monkeypatch.delenv("http_proxy", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with polling_client(timeout=5.0) as http:
            through = await http.fetch("GET", "http://queues.example.invalid/acct/q?comp=metadata")
            around = await http.fetch("GET", f"{direct.url}/q")
    assert through.body == b"proxy saw GET http://queues.example.invalid/acct/q?comp=metadata HTTP/1.1"
    assert around.body == b"direct"


async def test_without_proxies_in_the_environment_every_request_goes_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with raw_server(ok(b"direct")) as direct, polling_client(timeout=5.0) as http:
        assert (await http.fetch("GET", f"{direct.url}/q")).body == b"direct"
    with pytest.raises(HttpFailure):
        async with polling_client(timeout=5.0) as http:
            await http.fetch("GET", "http://queues.example.invalid/q")  # no proxy to resolve it for us


async def test_polling_client_applies_its_timeout() -> None:
    async with raw_server(silent()) as server, polling_client(timeout=0.2, max_connections=2) as http:
        started = asyncio.get_running_loop().time()
        with pytest.raises(HttpTimeout):
            await http.fetch("GET", f"{server.url}/q")
        assert asyncio.get_running_loop().time() - started < 2.0


async def test_a_closed_client_refuses_requests() -> None:
    async with raw_server(ok()) as server:
        http = client()
        assert (await http.fetch("GET", f"{server.url}/q")).status == 200
        await http.aclose()
        with pytest.raises(RuntimeError):
            await http.fetch("GET", f"{server.url}/q")


def test_a_client_needs_at_least_one_connection() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        HttpClient(max_connections=0)


def test_the_http_path_and_the_sources_use_no_private_name_of_a_library() -> None:
    """Issue 16: no `_name` of httpx, aiohttp or any other library (an import from a private module, or an attribute
    reached on anything but our own `self`/`cls`), in controller/net and controller/sources."""
    root = Path(__file__).resolve().parents[2] / "controller"
    found: list[str] = []
    for path in sorted([*(root / "net").rglob("*.py"), *(root / "sources").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("controller"):
                names = [*node.module.split("."), *(alias.name for alias in node.names)]
                found += [f"{path.name}:{node.lineno} {node.module}" for name in names if _private(name)]
            elif isinstance(node, ast.Attribute) and _private(node.attr) and not (
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    assert found == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")
