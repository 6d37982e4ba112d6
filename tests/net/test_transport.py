"""Our transports (aiohttp, and the plain asyncio one the operator uses) under httpx against real servers on
127.0.0.1: what goes out, what comes back, every way a request fails, and that a crowd of cancelled requests leaves
the pool usable.

Many cases run through every transport (`any_transport`): ours must behave as httpx's default does; `our_transport`
runs what only ours do (a retry on a reused connection); the last section is the asyncio transport's own framing.
"""

from __future__ import annotations

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

import httpx
import pytest

from controller.net.transport import AiohttpTransport, StreamTransport, polling_client

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


def aiohttp_client(*, max_connections: int = 100) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=AiohttpTransport(max_connections=max_connections))


def asyncio_client(*, max_connections: int = 100) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=StreamTransport(max_connections=max_connections))


def default_client(*, max_connections: int = 100) -> httpx.AsyncClient:
    return httpx.AsyncClient(limits=httpx.Limits(max_connections=max_connections))


ClientFactory = Callable[..., httpx.AsyncClient]


FACTORIES: dict[str, ClientFactory] = {"httpx-default": default_client, "aiohttp": aiohttp_client,
                                      "asyncio": asyncio_client}


@pytest.fixture(params=list(FACTORIES))
def any_transport(request: pytest.FixtureRequest) -> ClientFactory:
    return FACTORIES[request.param]


@pytest.fixture(params=["aiohttp", "asyncio"])
def our_transport(request: pytest.FixtureRequest) -> ClientFactory:
    """The operator's own transports, for what httpx's default does differently (it retries nothing)."""
    return FACTORIES[request.param]


def secret_free(exc: BaseException) -> str:
    """Everything a log line or traceback could show of `exc`; asserts it holds no part of the query."""
    shown = "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])
    for part in ("TOPSECRET", "sig=", "sp=r"):
        assert part not in shown, f"the query string leaked: {shown}"
    return shown


# --------------------------------------------------------------------------------------------------------------
# What comes back


async def test_status_reason_and_repeated_headers_come_back_as_sent(any_transport: ClientFactory) -> None:
    headers = [("X-Dup", "one"), ("x-ms-request-id", "r1"), ("X-Dup", "two"), ("Set-Cookie", "a=1"),
               ("Set-Cookie", "b=2")]
    async with raw_server(answering(lambda _r: response("418 I'm a teapot", headers, b"short and stout"))) as server, \
            any_transport() as http:
        answer = await http.get(f"{server.url}/pot")
    assert (answer.status_code, answer.reason_phrase, answer.http_version) == (418, "I'm a teapot", "HTTP/1.1")
    assert answer.headers.get_list("x-dup") == ["one", "two"]
    assert answer.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert answer.headers["content-length"] == "15"
    assert answer.content == b"short and stout"
    assert answer.elapsed.total_seconds() > 0


async def test_chunked_body_is_joined_and_no_content_length_is_invented(any_transport: ClientFactory) -> None:
    chunked = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    async with raw_server(answering(lambda _r: response("200 OK", [("Transfer-Encoding", "chunked")], chunked,
                                                        length=False))) as server, any_transport() as http:
        answer = await http.get(f"{server.url}/chunks")
        again = await http.get(f"{server.url}/chunks")  # the connection is still good after a chunked body
    assert answer.content == b"hello world" == again.content
    assert "content-length" not in answer.headers
    assert server.connections == 1


async def test_empty_bodies_head_and_no_content(any_transport: ClientFactory) -> None:
    def make(request: Received) -> bytes:
        if request.line.startswith("HEAD"):  # a HEAD answer announces a length but carries no body
            return b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nx-ms-approximate-messages-count: 7\r\n\r\n"
        if "/gone" in request.line:
            return b"HTTP/1.1 204 No Content\r\n\r\n"
        return response("200 OK", [], b"")

    async with raw_server(answering(make)) as server, any_transport() as http:
        head = await http.head(f"{server.url}/q")
        empty = await http.get(f"{server.url}/empty")
        gone = await http.delete(f"{server.url}/gone")
        after = await http.get(f"{server.url}/empty")  # all on one connection: no body was waited for
    assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", "1234")
    assert head.headers["x-ms-approximate-messages-count"] == "7"
    assert (empty.status_code, empty.content, gone.status_code, gone.content, after.status_code) == (
        200, b"", 204, b"", 200)
    assert server.connections == 1


async def test_a_compressed_body_is_decoded_once_by_httpx(any_transport: ClientFactory) -> None:
    packed = gzip.compress(b'{"messages_ready": 3}')
    async with raw_server(answering(lambda _r: response("200 OK", [("Content-Encoding", "gzip")], packed))) as server, \
            any_transport() as http:
        answer = await http.get(f"{server.url}/api/queues/%2F/q")
    assert answer.json() == {"messages_ready": 3}
    assert answer.headers["content-encoding"] == "gzip"
    assert server.requests[0].line == "GET /api/queues/%2F/q HTTP/1.1"  # %2F stays encoded


async def test_redirects_are_left_to_httpx(any_transport: ClientFactory) -> None:
    def make(request: Received) -> bytes:
        if "/old" in request.line:
            return response("302 Found", [("Location", "/new")])
        return response("200 OK", [], b"new")

    async with raw_server(answering(make)) as server, any_transport() as http:
        not_followed = await http.get(f"{server.url}/old")
        followed = await http.get(f"{server.url}/old", follow_redirects=True)
    assert (not_followed.status_code, not_followed.headers["location"]) == (302, "/new")
    assert (followed.status_code, followed.content, len(followed.history)) == (200, b"new", 1)


# --------------------------------------------------------------------------------------------------------------
# What goes out


async def sent_by(factory: ClientFactory, call: Callable[[httpx.AsyncClient, str], Awaitable[httpx.Response]]) -> Received:
    async with raw_server(ok()) as server, factory() as http:
        await call(http, server.url)
    [request] = server.requests
    port = server.url.rsplit(":", 1)[1]
    request.headers = [(name, value.replace(port, "<port>")) for name, value in request.headers]
    return request


@pytest.mark.parametrize("name", ["get-signed", "post-bytes", "post-json", "post-empty", "head", "stream"])
async def test_the_wire_carries_exactly_what_the_default_transport_sends(name: str, our_transport: ClientFactory) -> None:
    """Same request line, headers (names, values, order) and body: aiohttp adds nothing, so Shared Key and SigV4
    signatures over Content-Type and Content-Length still verify."""
    async def chunks() -> AsyncIterator[bytes]:
        yield b"part one, "
        yield b"part two"

    calls: dict[str, Callable[[httpx.AsyncClient, str], Awaitable[httpx.Response]]] = {
        "get-signed": lambda http, url: http.get(f"{url}/acct/q?comp=metadata&{SECRET_QUERY}",
                                                 headers={"x-ms-version": "2025-11-05", "Authorization": "SharedKey a:b"}),
        "post-bytes": lambda http, url: http.post(f"{url}/", content=b'{"QueueUrl": "q"}',
                                                  headers={"content-type": "application/x-amz-json-1.0"}),
        "post-json": lambda http, url: http.post(f"{url}/token", json={"grant_type": "client_credentials"}),
        "post-empty": lambda http, url: http.post(f"{url}/empty"),
        "head": lambda http, url: http.head(f"{url}/q"),
        "stream": lambda http, url: http.post(f"{url}/stream", content=chunks()),
    }
    default = await sent_by(default_client, calls[name])
    ours = await sent_by(our_transport, calls[name])
    if name == "stream":
        # httpx streams with chunked encoding; the aiohttp transport reads the body first and sends its length.
        assert ("Transfer-Encoding", "chunked") in default.headers
        assert ours.headers == [h for h in default.headers if h[0] != "Transfer-Encoding"] + [("Content-Length", "18")]
        assert ours.body == default.body == b"part one, part two"
        return
    assert (ours.line, ours.headers, ours.body) == (default.line, default.headers, default.body)


async def test_a_post_with_no_content_type_gets_none(our_transport: ClientFactory) -> None:
    """aiohttp would add `Content-Type: application/octet-stream` to a bytes body; Shared Key signs Content-Type."""
    request = await sent_by(our_transport, lambda http, url: http.post(f"{url}/", content=b"raw"))
    assert [name for name, _ in request.headers if name.lower() == "content-type"] == []
    assert request.body == b"raw"


# --------------------------------------------------------------------------------------------------------------
# Timeouts and failures


def silent() -> Handler:
    """Reads requests and never answers."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        while (request := await read_request(reader)) is not None:
            server.requests.append(request)
    return handle


async def test_no_answer_is_a_read_timeout(any_transport: ClientFactory) -> None:
    async with raw_server(silent()) as server, any_transport() as http:
        with pytest.raises(httpx.ReadTimeout) as caught:
            await http.get(f"{server.url}/q?{SECRET_QUERY}", timeout=0.2)
    assert caught.value.request.url.path == "/q"
    secret_free(caught.value)


async def test_a_body_that_stalls_is_a_read_timeout(any_transport: ClientFactory) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
        await writer.drain()
        await asyncio.sleep(5)

    async with raw_server(handle) as server, any_transport() as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.get(f"{server.url}/q", timeout=0.2)


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


async def test_a_connect_that_hangs_is_a_connect_timeout(any_transport: ClientFactory) -> None:
    with full_backlog() as url:
        async with any_transport() as http:
            with pytest.raises(httpx.ConnectTimeout) as caught:
                await http.get(f"{url}/q?{SECRET_QUERY}", timeout=0.3)
    secret_free(caught.value)


async def test_waiting_for_a_busy_pool_is_a_pool_timeout(any_transport: ClientFactory) -> None:
    async with raw_server(silent()) as server, any_transport(max_connections=1) as http:
        busy = asyncio.ensure_future(http.get(f"{server.url}/slow", timeout=2.0))
        await asyncio.sleep(0.1)
        with pytest.raises(httpx.PoolTimeout) as caught:
            await http.get(f"{server.url}/q?{SECRET_QUERY}", timeout=httpx.Timeout(2.0, pool=0.1))
        busy.cancel()
        await asyncio.gather(busy, return_exceptions=True)
    secret_free(caught.value)


async def test_a_refused_connection_is_a_connect_error(any_transport: ClientFactory) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: refused
        async with any_transport() as http:
            with pytest.raises(httpx.ConnectError) as caught:
                await http.get(f"http://127.0.0.1:{port}/q?{SECRET_QUERY}", timeout=2.0)
    shown = secret_free(caught.value)
    assert f"127.0.0.1:{port}/q" in shown or any_transport is default_client


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ncut short",  # a connection closed mid-body
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",  # garbage instead of HTTP
], ids=["closed-mid-body", "not-http"])
async def test_a_broken_answer_is_a_remote_protocol_error(any_transport: ClientFactory, answer: bytes) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()
        writer.close()

    async with raw_server(handle) as server, any_transport() as http:
        with pytest.raises(httpx.RemoteProtocolError) as caught:
            await http.get(f"{server.url}/q?{SECRET_QUERY}", timeout=2.0)
    secret_free(caught.value)


# --------------------------------------------------------------------------------------------------------------
# Keep-alive


async def test_a_connection_the_server_closed_while_idle_is_replaced(any_transport: ClientFactory) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        request = await read_request(reader)
        assert request is not None
        server.requests.append(request)
        writer.write(response("200 OK", [], b"once"))  # no `Connection: close`: the client keeps it for reuse
        await writer.drain()
        writer.close()

    async with raw_server(handle) as server, any_transport() as http:
        first = await http.get(f"{server.url}/q")
        await asyncio.sleep(0.1)  # the FIN has arrived
        second = await http.get(f"{server.url}/q")
    assert (first.content, second.content, server.connections) == (b"once", b"once", 2)


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


async def test_a_reused_connection_that_dies_is_retried_once_for_get_not_for_post(our_transport: ClientFactory) -> None:
    """aiohttp resends an idempotent request (GET, HEAD, PUT, DELETE) once on a new connection when a reused one
    closes before answering; a POST fails with RemoteProtocolError. (httpx's default transport retries neither.)"""
    async with raw_server(close_on_second_request()) as server, our_transport() as http:
        await http.get(f"{server.url}/q")
        again = await http.get(f"{server.url}/q")
        assert (again.status_code, again.content, server.connections) == (200, b"fresh", 2)
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post(f"{server.url}/q", content=b"x")
    async with raw_server(close_on_second_request()) as server, default_client() as http:
        await http.get(f"{server.url}/q")
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get(f"{server.url}/q")


async def test_connections_are_reused_and_bounded_by_max_connections(our_transport: ClientFactory) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        while (request := await read_request(reader)) is not None:
            server.requests.append(request)
            await asyncio.sleep(0.02)
            writer.write(response("200 OK", [], b"ok"))
            await writer.drain()

    async with raw_server(handle) as server, our_transport(max_connections=4) as http:
        answers = await asyncio.gather(*(http.get(f"{server.url}/q") for _ in range(40)))
    assert [a.status_code for a in answers] == [200] * 40
    assert server.connections == 4


# --------------------------------------------------------------------------------------------------------------
# Cancellation


@pytest.mark.parametrize("factory", [
    aiohttp_client,
    asyncio_client,
    pytest.param(default_client, marks=pytest.mark.xfail(
        strict=False, reason="httpcore 1.0.9 leaves connections CONNECTING when cancelled mid-connect: wedges in "
                             "about 2 runs of 3 (why the Azure poller shields its requests)")),
], ids=["aiohttp", "asyncio", "httpx-default"])
async def test_cancelled_requests_do_not_wedge_the_pool(factory: ClientFactory) -> None:
    """The httpcore failure mode, at the transport itself: hundreds of requests cancelled while waiting for a slot,
    while connecting (a connect that hangs) and while waiting for an answer leave every slot free again."""
    async with factory(max_connections=10) as http:
        async with raw_server(silent()) as server:
            with full_backlog() as hanging:
                # Mixed, so that the first ten slots go to connects that hang and to requests left unanswered.
                crowd = [http.get(f"{hanging if i % 3 == 0 else server.url}/q") for i in range(300)]
                outcomes = await asyncio.gather(*(asyncio.wait_for(call, 0.3) for call in crowd), return_exceptions=True)
        assert all(isinstance(o, TimeoutError) for o in outcomes), {type(o).__name__ for o in outcomes}
        async with raw_server(ok(b"after")) as server:
            answers = await asyncio.wait_for(asyncio.gather(*(http.get(f"{server.url}/q") for _ in range(30))), 3.0)
    assert [a.content for a in answers] == [b"after"] * 30


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


OUR_CLASSES = pytest.mark.parametrize("transport_class", [AiohttpTransport, StreamTransport],
                                      ids=["aiohttp", "asyncio"])


@OUR_CLASSES
async def test_tls_is_verified_by_default_and_a_given_context_is_used(
        certificate: tuple[Path, Path], transport_class: type[AiohttpTransport | StreamTransport]) -> None:
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
        async with httpx.AsyncClient(transport=transport_class()) as http:
            with pytest.raises(httpx.ConnectError) as caught:
                await http.get(url, timeout=5.0)
        secret_free(caught.value)
        assert "certificate" in str(caught.value).lower()
        trusting = ssl.create_default_context(cafile=str(cert))
        async with httpx.AsyncClient(transport=transport_class(ssl_context=trusting)) as http:
            assert (await http.get(url, timeout=5.0)).content == b"secure"
    finally:
        server.close()
        await server.wait_closed()


async def test_polling_client_sends_through_environment_proxies_but_not_for_no_proxy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx mounts HTTP(S)_PROXY itself only when it builds its own transport; polling_client mounts them."""
    async with raw_server(answering(lambda r: response("200 OK", [], f"proxy saw {r.line}".encode()))) as proxy, \
            raw_server(ok(b"direct")) as direct:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with polling_client(timeout=5.0) as http:
            through = await http.get("http://queues.example.invalid/acct/q?comp=metadata")
            around = await http.get(f"{direct.url}/q")
        async with httpx.AsyncClient(transport=StreamTransport()) as bare:
            # The claim that httpx honours the environment under any transport is false: a bare client with a
            # transport of its own ignores HTTP_PROXY (httpx._client: allow_env_proxies = trust_env and
            # transport is None).
            with pytest.raises(httpx.ConnectError):
                await bare.get("http://queues.example.invalid/q", timeout=5.0)
    assert through.content == b"proxy saw GET http://queues.example.invalid/acct/q?comp=metadata HTTP/1.1"
    assert around.content == b"direct"


async def test_polling_client_applies_its_timeout() -> None:
    async with raw_server(silent()) as server, polling_client(timeout=0.2, max_connections=2) as http:
        started = asyncio.get_running_loop().time()
        with pytest.raises(httpx.ReadTimeout):
            await http.get(f"{server.url}/q")
        assert asyncio.get_running_loop().time() - started < 2.0


@OUR_CLASSES
async def test_a_closed_transport_refuses_requests(transport_class: type[AiohttpTransport | StreamTransport]) -> None:
    async with raw_server(ok()) as server:
        http = httpx.AsyncClient(transport=transport_class())
        assert (await http.get(f"{server.url}/q")).status_code == 200
        await http.aclose()
        with pytest.raises(RuntimeError):
            await http.get(f"{server.url}/q")


# --------------------------------------------------------------------------------------------------------------
# The asyncio transport's own HTTP/1.1: framing, keep-alive and cancellation


async def test_chunked_body_with_extensions_trailers_and_split_segments_is_joined() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        while (request := await read_request(reader)) is not None:
            server.requests.append(request)
            for piece in (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nqu", b"eu\r\n",
                          b"1\r\ne\r\n0\r\nX-Trailer: yes\r\n", b"\r\n"):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.01)  # each piece arrives in a segment of its own

    async with raw_server(handle) as server, asyncio_client() as http:
        first = await http.get(f"{server.url}/q")
        second = await http.get(f"{server.url}/q")
    assert (first.content, second.content, server.connections) == (b"queue", b"queue", 1)


@pytest.mark.parametrize("answer", [
    b"HTTP/1.0 200 OK\r\n\r\nread to the end",
    b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nread to the end",
], ids=["http-1.0", "connection-close"])
async def test_a_body_without_length_is_read_to_the_close_and_the_connection_not_reused(answer: bytes) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        request = await read_request(reader)
        assert request is not None
        server.requests.append(request)
        writer.write(answer[:30])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(answer[30:])
        await writer.drain()
        writer.close()

    async with raw_server(handle) as server, asyncio_client() as http:
        first = await http.get(f"{server.url}/q")
        second = await http.get(f"{server.url}/q")
    assert (first.content, second.content, server.connections) == (b"read to the end", b"read to the end", 2)


async def test_connection_close_with_a_length_is_not_reused() -> None:
    async with raw_server(answering(lambda _r: response("200 OK", [("Connection", "close")], b"bye"))) as server, \
            asyncio_client() as http:
        answers = [await http.get(f"{server.url}/q") for _ in range(3)]
    assert ([a.content for a in answers], server.connections) == ([b"bye"] * 3, 3)


async def test_an_idle_connection_closed_by_the_server_is_retried_once_for_get() -> None:
    """The server closes its end of an idle keep-alive connection; the GET that reuses it before the FIN arrives is
    resent once on a fresh connection, and a POST in the same spot fails."""
    async with raw_server(close_on_second_request()) as server, asyncio_client() as http:
        await http.get(f"{server.url}/q")
        again = await http.get(f"{server.url}/q")
        assert (again.content, server.connections, len(server.requests)) == (b"fresh", 2, 3)
        with pytest.raises(httpx.RemoteProtocolError) as caught:
            await http.post(f"{server.url}/q?{SECRET_QUERY}", content=b"x")
        assert server.connections == 2  # no retry for the POST
    secret_free(caught.value)


async def test_a_fresh_connection_closed_without_an_answer_is_not_retried() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        request = await read_request(reader)
        assert request is not None
        server.requests.append(request)

    async with raw_server(handle) as server, asyncio_client() as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get(f"{server.url}/q", timeout=2.0)
    assert server.connections == 1


async def test_an_idle_connection_past_the_keepalive_expiry_is_replaced() -> None:
    async with raw_server(ok()) as server, \
            httpx.AsyncClient(transport=StreamTransport(keepalive_expiry=0.05)) as http:
        await http.get(f"{server.url}/q")
        await http.get(f"{server.url}/q")
        await asyncio.sleep(0.1)
        await http.get(f"{server.url}/q")
    assert server.connections == 2


async def test_a_hundred_cancelled_requests_leave_a_pool_of_two_usable() -> None:
    """Cancelled while connecting, while waiting for a slot, mid-answer: each interrupted connection is closed and
    its slot given back, so a normal request afterwards gets an answer at once."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        while (request := await read_request(reader)) is not None:
            server.requests.append(request)
            if "/slow" in request.line:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")  # and never the rest
                await writer.drain()
                continue
            writer.write(response("200 OK", [], b"after"))
            await writer.drain()

    async with raw_server(handle) as server, asyncio_client(max_connections=2) as http:
        for round_ in range(10):
            crowd = [asyncio.ensure_future(http.get(f"{server.url}/slow")) for _ in range(10)]
            await asyncio.sleep(0.005 * round_)  # cancel at different points of the exchange
            for call in crowd:
                call.cancel()
            outcomes = await asyncio.gather(*crowd, return_exceptions=True)
            assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)
        answer = await asyncio.wait_for(http.get(f"{server.url}/q"), 1.0)
    assert answer.content == b"after"


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


async def test_a_cancelled_request_closes_its_connection_rather_than_reusing_it() -> None:
    """Bytes of a cancelled request's answer must never be read as the answer to the next request, and the
    interrupted connection is closed at once rather than left open until the transport closes."""
    hung_up: list[str] = []
    handle = echo_path_late(hung_up)
    async with raw_server(handle) as server, asyncio_client(max_connections=1) as http:
        await http.get(f"{server.url}/warm")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(http.get(f"{server.url}/late"), 0.01)
        await asyncio.sleep(0.1)  # the late answer has arrived by now
        assert hung_up == ["GET /late HTTP/1.1"]
        answer = await http.get(f"{server.url}/next")
    assert answer.content == b"/next"


# --------------------------------------------------------------------------------------------------------------
# StreamTransport.fetch: the same pool and promises without httpx's request and response objects


def stream() -> StreamTransport:
    return StreamTransport(max_connections=2)


async def test_fetch_sends_host_and_exactly_the_given_headers_and_reuses_the_connection() -> None:
    answer_headers = [("x-ms-approximate-messages-count", "7"), ("X-Dup", "one"), ("X-Dup", "two")]
    async with raw_server(answering(lambda _r: response("200 OK", answer_headers, b"body"))) as server:
        transport = stream()
        url = httpx.URL(f"{server.url}/acct/q?comp=metadata")
        try:
            answers = [await transport.fetch("GET", url, [(b"x-ms-version", b"2025-11-05"), (b"User-Agent", b"t")],
                                             timeout=2.0) for _ in range(3)]
        finally:
            await transport.aclose()
    port = server.url.rsplit(":", 1)[1]
    assert [(a.status_code, a.content) for a in answers] == [(200, b"body")] * 3
    assert answers[0].headers.get("x-ms-approximate-messages-count") == "7"
    assert answers[0].headers.get("x-dup") == "one, two"  # as httpx.Headers.get joins repeated names
    assert server.connections == 1
    first = server.requests[0]
    assert first.line == "GET /acct/q?comp=metadata HTTP/1.1"
    assert first.headers == [("Host", f"127.0.0.1:{port}"), ("x-ms-version", "2025-11-05"), ("User-Agent", "t")]


async def test_fetch_joins_a_chunked_body_split_across_segments() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        while (request := await read_request(reader)) is not None:
            server.requests.append(request)
            for piece in (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nqu", b"eu\r\n1\r\ne\r\n",
                          b"0\r\n\r\n"):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.01)

    async with raw_server(handle) as server:
        transport = stream()
        try:
            answers = [await transport.fetch("GET", httpx.URL(f"{server.url}/q"), [], timeout=2.0) for _ in range(2)]
        finally:
            await transport.aclose()
    assert ([a.content for a in answers], server.connections) == ([b"queue", b"queue"], 1)


async def test_fetch_timeout_bounds_the_whole_call_not_each_read() -> None:
    """A server that trickles its answer a byte at a time never lets a per-read timeout fire; fetch's does."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: RawServer) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        for _ in range(100):
            await asyncio.sleep(0.05)
            writer.write(b"x")
            await writer.drain()

    async with raw_server(handle) as server:
        transport = stream()
        started = asyncio.get_running_loop().time()
        try:
            with pytest.raises(httpx.ReadTimeout) as caught:
                await transport.fetch("GET", httpx.URL(f"{server.url}/q?{SECRET_QUERY}"), [], timeout=0.3)
        finally:
            await transport.aclose()
    assert asyncio.get_running_loop().time() - started < 1.0
    assert "GET http://127.0.0.1" in secret_free(caught.value)


async def test_fetch_times_out_connecting_and_waiting_for_a_slot_without_leaking_the_query() -> None:
    transport = StreamTransport(max_connections=1)
    try:
        with full_backlog() as url, pytest.raises(httpx.ConnectTimeout) as connect:
            await transport.fetch("GET", httpx.URL(f"{url}/q?{SECRET_QUERY}"), [], timeout=0.3)
        async with raw_server(silent()) as server:
            busy = asyncio.ensure_future(transport.fetch("GET", httpx.URL(f"{server.url}/slow"), [], timeout=5.0))
            await asyncio.sleep(0.1)
            with pytest.raises(httpx.PoolTimeout) as pool:
                await transport.fetch("GET", httpx.URL(f"{server.url}/q?{SECRET_QUERY}"), [], timeout=0.2)
            busy.cancel()
            await asyncio.gather(busy, return_exceptions=True)
    finally:
        await transport.aclose()
    secret_free(connect.value)
    secret_free(pool.value)


async def test_fetch_errors_name_no_query_and_carry_no_request() -> None:
    transport = stream()
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
            with pytest.raises(httpx.ConnectError) as refused:
                await transport.fetch("GET", httpx.URL(f"http://127.0.0.1:{port}/q?{SECRET_QUERY}"), [], timeout=2.0)
        with pytest.raises(httpx.LocalProtocolError) as injected:
            await transport.fetch("GET", httpx.URL(f"http://127.0.0.1:{port}/q"),
                                  [(b"Authorization", b"SharedKey a:TOPSECRET\r\nX-Evil: 1")], timeout=2.0)
    finally:
        await transport.aclose()
    assert f"GET http://127.0.0.1:{port}/q" in secret_free(refused.value)
    secret_free(injected.value)
    with pytest.raises(RuntimeError):
        _ = refused.value.request  # httpx's way of saying no request is attached


async def test_fetch_resends_once_when_the_server_closed_the_reused_connection() -> None:
    async with raw_server(close_on_second_request()) as server:
        transport = stream()
        url = httpx.URL(f"{server.url}/q")
        try:
            await transport.fetch("GET", url, [], timeout=2.0)
            again = await transport.fetch("GET", url, [], timeout=2.0)
        finally:
            await transport.aclose()
    assert (again.content, server.connections, len(server.requests)) == (b"fresh", 2, 3)


async def test_a_cancelled_fetch_frees_its_slot_and_closes_its_connection() -> None:
    hung_up: list[str] = []
    handle = echo_path_late(hung_up)
    async with raw_server(handle) as server:
        transport = StreamTransport(max_connections=1)
        try:
            await transport.fetch("GET", httpx.URL(f"{server.url}/warm"), [], timeout=2.0)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(transport.fetch("GET", httpx.URL(f"{server.url}/late"), [], timeout=2.0), 0.01)
            await asyncio.sleep(0.1)
            assert hung_up == ["GET /late HTTP/1.1"]
            answer = await asyncio.wait_for(transport.fetch("GET", httpx.URL(f"{server.url}/next"), [], timeout=2.0),
                                            1.0)  # the one slot is free again
        finally:
            await transport.aclose()
    assert answer.content == b"/next"


async def test_fetch_and_httpx_share_one_pool() -> None:
    async with raw_server(ok(b"shared")) as server:
        transport = stream()
        async with httpx.AsyncClient(transport=transport) as http:
            await http.get(f"{server.url}/q")
            fetched = await transport.fetch("GET", httpx.URL(f"{server.url}/q"), [], timeout=2.0)
            await http.get(f"{server.url}/q")
    assert (fetched.content, server.connections) == (b"shared", 1)


async def test_polling_client_routes_direct_only_where_no_proxy_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,.blob.example")
    async with polling_client(timeout=5.0) as http:
        ours = http._transport
        assert isinstance(ours, StreamTransport)
        assert http.direct(httpx.URL("https://acct.queue.core.windows.net/q?comp=metadata")) is None
        assert http.direct(httpx.URL("http://acct.queue.core.windows.net/q")) is None
        assert http.direct(httpx.URL("http://127.0.0.1:10001/devstoreaccount1/q")) is ours
        assert http.direct(httpx.URL("https://acct.blob.example/q")) is ours
        assert http.direct(httpx.URL("https://acct.queue.core.windows.net/q")) is None  # cached, same answer
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name)
    async with polling_client(timeout=5.0) as http:
        assert http.direct(httpx.URL("https://acct.queue.core.windows.net/q")) is http._transport
