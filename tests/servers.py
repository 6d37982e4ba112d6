"""Real Redis and PostgreSQL servers (Debian's packages, installed by scripts/bootstrap) for the tests.

Each listens on 127.0.0.1 and a free port, keeps its data in a temporary folder, waits a bounded time to start,
and is stopped (and its folder removed) by its fixture. PostgreSQL refuses to run as root, so as root the data
folder belongs to the `postgres` user the Debian package creates, and the server runs as that user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.azurite import free_port

START_TIMEOUT = 30.0
REDIS_PASSWORD = "redis-test-password-7f3a9c"  # only a test server's; the leak tests look for it
PG_SUPERUSER_PASSWORD = "pg-super-password-51b2e8"
PG_SCALER_PASSWORD = "pg-scaler-password-c04d17"


def _wait_for_port(process: subprocess.Popen[bytes], port: int, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what} exited with {process.returncode} on port {port}: {tail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not accept connections on port {port} in {START_TIMEOUT:g}s")


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


# --------------------------------------------------------------------------------------------------------------
# Redis


class RedisServer:
    """One redis-server: no persistence, loopback only, `requirepass` for the default user."""

    def __init__(self, password: str = REDIS_PASSWORD) -> None:
        self.port = free_port()
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None
        self.folder: str | None = None

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found: run scripts/bootstrap (it installs Debian's redis-server)")
        self.folder = tempfile.mkdtemp(prefix="queuescale-redis-")
        self.process = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", self.folder, "--requirepass", self.password, "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        _wait_for_port(self.process, self.port, "redis-server")
        return self

    def stop(self) -> None:
        process, self.process = self.process, None
        _stop(process)

    def close(self) -> None:
        self.stop()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def cli(self, *args: str) -> str:
        """One command through redis-cli (a second, independent client)."""
        done = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(self.port), "--no-auth-warning", "-a", self.password, *args],
            capture_output=True, text=True, timeout=10, check=True,
        )
        return done.stdout.strip()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One Redis for the whole session (keys are per test: use unique names)."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


# --------------------------------------------------------------------------------------------------------------
# PostgreSQL


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    on_path = shutil.which(name)
    if on_path is None:
        raise RuntimeError(f"{name} not found: run scripts/bootstrap (it installs Debian's postgresql)")
    return on_path


def _as_server_user() -> list[str]:
    """PostgreSQL will not run as root: as root, run its programs as the `postgres` user."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class PostgresServer:
    """One PostgreSQL cluster: initdb into a temporary folder, password (scram) logins, 127.0.0.1 only."""

    superuser = "postgres"

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.folder: str | None = None

    def dsn(self, user: str | None = None, password: str | None = None, database: str = "postgres") -> str:
        user = user or self.superuser
        password = password or PG_SUPERUSER_PASSWORD
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        self.folder = tempfile.mkdtemp(prefix="queuescale-pg-")
        data = Path(self.folder) / "data"
        pwfile = Path(self.folder) / "pw"
        pwfile.write_text(PG_SUPERUSER_PASSWORD + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
            shutil.chown(pwfile, "postgres")
        subprocess.run(
            [*_as_server_user(), _pg_bin("initdb"), "-D", str(data), "-U", self.superuser, "--auth=scram-sha-256",
             f"--pwfile={pwfile}", "--no-sync", "-E", "UTF8", "--locale=C"],
            capture_output=True, check=True, timeout=60,
        )
        log = Path(self.folder) / "server.log"
        self.process = subprocess.Popen(
            [*_as_server_user(), _pg_bin("postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(self.port),
             "-k", self.folder, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", f"log_directory={self.folder}", "-c", "logging_collector=off"],
            stdout=subprocess.DEVNULL, stderr=log.open("wb"), start_new_session=True,
        )
        _wait_for_port(self.process, self.port, "postgres", log)
        deadline = time.monotonic() + START_TIMEOUT  # the port opens before the server takes logins
        while subprocess.run([_pg_bin("pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                             check=False, timeout=10).returncode != 0:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"postgres did not take logins on port {self.port}: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def close(self) -> None:
        process, self.process = self.process, None
        _stop(process)
        if self.folder is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL for the whole session (tables are per test: use unique names)."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.close()


# --------------------------------------------------------------------------------------------------------------
# RabbitMQ

RABBITMQ_START_TIMEOUT = 90.0  # Erlang boot plus the management plugin: ~10 s idle, ~30 s on a busy 2-core machine
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"  # not /usr/sbin's wrapper, which switches user as root


class RabbitMqServer:
    """One rabbitmq-server with the management plugin: its own node name, ports, epmd, HOME and data folder.

    Every listener (AMQP, management, Erlang distribution, epmd) is on 127.0.0.1. The broker's default user
    guest/guest may log in from loopback; the tests add their own users.
    """

    def __init__(self) -> None:
        self.amqp_port, self.management_port = free_port(), free_port()
        self.dist_port, self.epmd_port = free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.folder: str | None = None
        self.node = f"queuescale-{os.getpid()}-{self.amqp_port}@localhost"

    @property
    def management_url(self) -> str:
        return f"http://127.0.0.1:{self.management_port}"

    def _environment(self) -> dict[str, str]:
        assert self.folder is not None
        base = self.folder
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))},
            "HOME": base,  # the Erlang cookie goes here
            "RABBITMQ_CONFIG_FILE": f"{base}/rabbitmq",
            "RABBITMQ_ENABLED_PLUGINS_FILE": f"{base}/enabled_plugins",
            "RABBITMQ_MNESIA_BASE": f"{base}/mnesia",
            "RABBITMQ_LOG_BASE": f"{base}/log",
            "RABBITMQ_PID_FILE": f"{base}/pid",
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def start(self) -> RabbitMqServer:
        if not Path(RABBITMQ_SERVER).exists():
            raise RuntimeError("rabbitmq-server not found: run scripts/bootstrap (it installs Debian's rabbitmq-server)")
        self.folder = tempfile.mkdtemp(prefix="queuescale-rabbitmq-")
        Path(self.folder, "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.amqp_port}\n"
            f"management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = {self.management_port}\n"
            "collect_statistics_interval = 500\n"
        )
        Path(self.folder, "enabled_plugins").write_text("[rabbitmq_management].\n")
        self.process = subprocess.Popen([RABBITMQ_SERVER], env=self._environment(), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + RABBITMQ_START_TIMEOUT
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                self.close()
                raise RuntimeError(f"rabbitmq-server exited with {code} before its management API answered")
            try:
                import httpx

                if httpx.get(f"{self.management_url}/api/overview", auth=("guest", "guest"),
                             timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.close()
        raise RuntimeError(f"rabbitmq-server did not answer on {self.management_url} in {RABBITMQ_START_TIMEOUT:g}s")

    def api(self, method: str, path: str, body: object = None) -> int:
        """One management API call as guest; returns the status."""
        import httpx

        response = httpx.request(method, f"{self.management_url}/api/{path}", auth=("guest", "guest"), json=body,
                                 timeout=10)
        return response.status_code

    def close(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            # The launcher script's group holds the Erlang VM; epmd daemonizes into the same session.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 15)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 9)
                process.wait(timeout=5)
        self._stop_epmd()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _stop_epmd(self) -> None:
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        if self.folder is not None and Path(epmd).exists():
            subprocess.run([epmd, "-port", str(self.epmd_port), "-kill"], env=self._environment(),
                           capture_output=True, timeout=10, check=False)


@pytest.fixture(scope="session")
def rabbitmq_server() -> Iterator[RabbitMqServer]:
    """One RabbitMQ for the whole session (queues are per test: use unique names)."""
    server = RabbitMqServer().start()
    try:
        yield server
    finally:
        server.close()
