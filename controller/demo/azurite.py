"""An Azurite queue service on 127.0.0.1 and a free port, started and stopped by its owner.

The binary is `$AZURITE_QUEUE_BIN`, else `.tools/node/node_modules/.bin/azurite-queue` of the project (installed
by scripts/bootstrap). In-memory, loopback only, telemetry off. `stop()` is synchronous and idempotent, for
`finally` blocks; an `atexit` hook stops it too if the owner never could.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path

from controller.model.textfmt import duration
from controller.sources.azure_auth import DEV_ACCOUNT, DEV_ACCOUNT_KEY

PROJECT_BIN = Path(__file__).resolve().parents[2] / ".tools" / "node" / "node_modules" / ".bin" / "azurite-queue"
START_TIMEOUT = 30.0


class AzuriteError(Exception):
    """Azurite could not be found or started; the message says what to do."""


def azurite_binary() -> Path:
    return Path(os.environ.get("AZURITE_QUEUE_BIN") or PROJECT_BIN)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class AzuriteQueueService:
    """One azurite-queue process with the well-known development account."""

    account = DEV_ACCOUNT

    def __init__(self, binary: Path | None = None, port: int | None = None) -> None:
        self.binary = binary or azurite_binary()
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"AzuriteQueueService(port={self.port}, pid={self.pid})"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.account}"

    @property
    def connection_string(self) -> str:
        """A secret in principle (the development key is public, but treat it as any connection string)."""
        return self.connection_string_via(self.endpoint)

    def connection_string_via(self, endpoint: str) -> str:
        """The connection string with another queue endpoint (a proxy in front of this one)."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={DEV_ACCOUNT_KEY};"
            f"QueueEndpoint={endpoint}"
        )

    def start(self) -> None:
        """Start and wait until it accepts connections; raises AzuriteError."""
        if not self.binary.exists():
            raise AzuriteError(
                f"azurite-queue not found at {self.binary}: run `bash scripts/bootstrap` or set AZURITE_QUEUE_BIN"
            )
        try:
            self.process = subprocess.Popen(
                [
                    str(self.binary), "--inMemoryPersistence", "--disableTelemetry", "--silent",
                    "--skipApiVersionCheck", "--queueHost", "127.0.0.1", "--queuePort", str(self.port),
                ],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise AzuriteError(f"cannot start {self.binary}: {exc.strerror or exc}") from None
        atexit.register(self.stop)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.stop()
                raise AzuriteError(f"azurite-queue exited with {code} before it listened on port {self.port}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise AzuriteError(f"azurite-queue did not accept connections on 127.0.0.1:{self.port} in "
                           f"{duration(START_TIMEOUT)}")

    def stop(self) -> None:
        process = self.process
        atexit.unregister(self.stop)
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait(timeout=5)
