"""The health and metrics servers (controller/net/httpserve.py, on aiohttp's web server)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from controller.net.httpserve import HttpServer, metrics_app, probe_app


async def test_probes_answer_get_and_head_404_elsewhere_405_for_other_methods() -> None:
    calls = []
    ready = False

    def healthz() -> tuple[int, bytes]:
        calls.append(1)
        return 200, b"ok\n"

    def readyz() -> tuple[int, bytes]:
        return (200, b"ok\n") if ready else (503, b"not synced\n")

    server = await HttpServer("127.0.0.1", 0, probe_app({"/healthz": healthz, "/readyz": readyz})).start()
    try:
        assert server.port != 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            ok = await http.get("/healthz?verbose=1")
            assert (ok.status_code, ok.text) == (200, "ok\n")
            assert ok.headers["content-type"].startswith("text/plain")
            again = await http.get("/healthz")  # keep-alive: a second request on the same connection
            assert again.status_code == 200 and len(calls) == 2
            assert (await http.head("/healthz")).status_code == 200
            not_ready = await http.get("/readyz")
            assert (not_ready.status_code, not_ready.text) == (503, "not synced\n")
            ready = True
            assert (await http.get("/readyz")).status_code == 200
            assert (await http.get("/nope")).status_code == 404
            assert (await http.post("/healthz")).status_code == 405
    finally:
        await server.stop()


class ThreadSpy(Collector):
    """A collector that notes the thread it is collected on."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.threads.append(threading.get_ident())
        yield GaugeMetricFamily("spy", "where the scrape ran", value=1)


async def test_metrics_are_rendered_off_the_event_loop_in_the_format_asked_for() -> None:
    registry = CollectorRegistry()
    Counter("queuescale_things", "things", ["kind"], registry=registry).labels(kind="x" * 2000).inc()
    spy = ThreadSpy()
    registry.register(spy)
    server = await HttpServer("127.0.0.1", 0, metrics_app(registry)).start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            plain = await http.get("/metrics", headers={"Accept-Encoding": "identity"})
            assert plain.status_code == 200
            assert plain.headers["content-type"].startswith("text/plain; version=0.0.4")
            assert 'queuescale_things_total{kind="' in plain.text and "# EOF" not in plain.text
            # Prometheus's own Accept header (scrape_protocols default) asks for OpenMetrics first.
            open_metrics = await http.get("/metrics", headers={
                "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                          "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"})
            assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
            assert open_metrics.text.endswith("# EOF\n")
            raw = await http.get("/metrics", headers={"Accept-Encoding": "gzip"})
            assert raw.headers["content-encoding"] == "gzip"
            assert raw.text == plain.text and "spy 1.0" in raw.text  # httpx undid the gzip
    finally:
        await server.stop()
    assert spy.threads and threading.get_ident() not in spy.threads


async def test_stopping_with_idle_and_half_sent_keep_alive_connections_is_quiet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A scraper's keep-alive connection, idle or in the middle of sending a request, must not turn a graceful stop
    into an ERROR with a traceback (the asyncio streams server this replaced logged one per connection)."""
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    caplog.set_level(logging.DEBUG)
    server = await HttpServer("127.0.0.1", 0, probe_app({"/healthz": lambda: (200, b"ok\n")})).start()
    idle_reader, idle = await asyncio.open_connection("127.0.0.1", server.port)
    idle.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await idle_reader.readuntil(b"ok\n")).startswith(b"HTTP/1.1 200")
    half_reader, half = await asyncio.open_connection("127.0.0.1", server.port)
    half.write(b"GET /healthz HTTP/1.1\r\nHost:")
    await half.drain()
    await asyncio.sleep(0.1)
    try:
        async with asyncio.timeout(5):  # well inside the operator's shutdown grace
            await server.stop()
            # Both connections were closed by the server: nothing is left waiting on them, so nothing is left for
            # asyncio.run to cancel (and log) when the process exits.
            assert await idle_reader.read() == b""
            await half_reader.read()
        await asyncio.sleep(0.05)
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    finally:
        idle.close()
        half.close()
        loop.set_exception_handler(None)
    assert unhandled == []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info] == []
