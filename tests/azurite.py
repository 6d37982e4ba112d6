"""A real Azurite queue service on 127.0.0.1 and a free port, for tests and the benchmark.

The binary is `$AZURITE_QUEUE_BIN` or `.tools/node/node_modules/.bin/azurite-queue` (installed by
scripts/bootstrap). `Azurite.stop()` / `start()` let a test take it down and bring it back on the same port.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.sources.azure_auth import DEV_ACCOUNT, DEV_ACCOUNT_KEY

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BIN = ROOT / ".tools" / "node" / "node_modules" / ".bin" / "azurite-queue"
START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def azurite_binary() -> Path:
    return Path(os.environ.get("AZURITE_QUEUE_BIN") or DEFAULT_BIN)


class Azurite:
    """One azurite-queue process (in-memory, loopback only)."""

    account = DEV_ACCOUNT
    key = DEV_ACCOUNT_KEY

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.account}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={self.key};"
            f"QueueEndpoint={self.endpoint}"
        )

    def start(self) -> None:
        binary = azurite_binary()
        if not binary.exists():
            raise RuntimeError(f"azurite-queue not found at {binary}: run scripts/bootstrap or set AZURITE_QUEUE_BIN")
        self.process = subprocess.Popen(
            [
                str(binary), "--inMemoryPersistence", "--disableTelemetry", "--silent", "--skipApiVersionCheck",
                "--queueHost", "127.0.0.1", "--queuePort", str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"azurite-queue exited with {self.process.returncode} on port {self.port}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"azurite-queue did not accept connections on port {self.port} in {START_TIMEOUT:g}s")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

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
