"""A pytest plugin: a SIGTERM ends the run as Ctrl-C does.

By default SIGTERM kills pytest on the spot, and the servers its fixtures started (Azurite, Redis, PostgreSQL,
RabbitMQ) outlive it, since their finalizers never run. Raised as KeyboardInterrupt instead, pytest stops the test
at hand and tears every fixture down, so a CI run cut off at its time limit, or a session stopped, leaves nothing
running. tests/conftest.py takes the hooks in. The handler is set again before each test: code under test that
runs an event loop with its own SIGTERM handler (the operator's runner) leaves the default behind when it ends."""

from __future__ import annotations

import signal
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _interrupt)


def pytest_runtest_setup(item: pytest.Item) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
