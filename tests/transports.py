"""Which transport the source tests' HTTP clients run on: httpx's default, the aiohttp one, or the operator's own
client (`polling_client`: httpx over the asyncio `StreamTransport`, whose `fetch` the Azure poller calls directly).

A module opts in with `pytestmark = pytest.mark.usefixtures("http_transport")`: each of its tests then runs once
per transport, and every client it builds with `http_client()` sits on that transport.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from controller.net.transport import AiohttpTransport, polling_client

__all__ = ["TRANSPORTS", "http_client", "http_transport"]

TRANSPORTS = ("httpx-default", "aiohttp", "asyncio")


@dataclass
class _Selection:
    transport: str = "httpx-default"


_selection = _Selection()


def http_client(*, max_connections: int = 100) -> httpx.AsyncClient:
    """A fresh client on the transport the running test selected (httpx's default when it selected none)."""
    if _selection.transport == "aiohttp":
        return httpx.AsyncClient(transport=AiohttpTransport(max_connections=max_connections))
    if _selection.transport == "asyncio":
        return polling_client(timeout=5.0, max_connections=max_connections)  # as the operator builds it
    return httpx.AsyncClient(limits=httpx.Limits(max_connections=max_connections,
                                                 max_keepalive_connections=max_connections))


@pytest.fixture(params=TRANSPORTS)
def http_transport(request: pytest.FixtureRequest) -> Iterator[str]:
    previous, _selection.transport = _selection.transport, request.param
    try:
        yield request.param
    finally:
        _selection.transport = previous
