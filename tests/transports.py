"""The HTTP client the source tests poll through: the operator's own (`polling_client`, aiohttp underneath), so what
passes here is what runs in production. A test that needs to see or shape each request hands a source any object
with the same `fetch` instead (tests/sources/test_azure_poller_units.py)."""

from __future__ import annotations

from controller.net.http import HttpClient, polling_client

__all__ = ["http_client"]


def http_client(*, max_connections: int = 100) -> HttpClient:
    """A fresh client, built as the operator builds its own."""
    return polling_client(timeout=5.0, max_connections=max_connections)
