"""A real Azurite queue service on 127.0.0.1 and a free port, for tests and the benchmark.

The process management is the demo's (`controller.demo.azurite`: `$AZURITE_QUEUE_BIN` or the project's
`.tools/node/node_modules/.bin/azurite-queue`, installed by scripts/bootstrap); this adds the test fixtures.
`Azurite.stop()` / `start()` let a test take it down and bring it back on the same port.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.demo.azurite import AzuriteQueueService, free_port
from controller.sources.azure_auth import DEV_ACCOUNT_KEY

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["ROOT", "Azurite", "azurite", "free_port", "own_azurite"]


class Azurite(AzuriteQueueService):
    """One azurite-queue process (in-memory, loopback only) with the development account and key."""

    key = DEV_ACCOUNT_KEY

    def __enter__(self) -> Azurite:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    """One Azurite for the whole session (queues are per test: use unique names)."""
    with Azurite() as server:
        yield server


@pytest.fixture
def own_azurite() -> Iterator[Azurite]:
    """An Azurite of the test's own, which the test may stop and start again (outage tests)."""
    server = Azurite()
    try:
        server.start()
        yield server
    finally:
        server.stop()
