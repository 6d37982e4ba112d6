"""Redis: the `redis-list` kind's poller.

The count is the length of a list (`LLEN`), or, for a stream, the entries a consumer group has been handed and not
yet acknowledged (the `XPENDING` summary), plus with `streamCount: pendingAndLag` the entries not yet handed to the
group at all (`lag` of `XINFO GROUPS`, Redis 7+). Each is one O(1) command.

The driver is `redis` (redis.asyncio), an optional extra (`pip install 'queuescale[redis]'`); without it a poll
fails with the code `DriverNotInstalled` instead of an ImportError. Transient failures (refused connections,
timeouts, LOADING) are retried within the poll's budget; permanent ones (WRONGPASS, NOPERM, WRONGTYPE, NOGROUP)
fail at once. Messages name the host, the key and the Secret, never a password or a URL that holds one.
"""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from controller.model.readings import SourceError, SourceReading
from controller.model.sources.base import SourceSpec
from controller.model.sources.redis_list import TYPE, RedisListSource
from controller.model.textfmt import duration
from controller.sources.base import Poller, SourceContext
from controller.sources.retries import RetryPolicy, prepare_with_driver

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'queuescale[redis]'"






# --------------------------------------------------------------------------------------------------------------
# The poller


class _InvalidUrl(Exception):
    """The URL Secret is not a usable redis:// URL; the message names the Secret, never the value."""


@dataclass(frozen=True)
class _Connection:
    """Where and how to connect, as read from the spec and the Secrets of this poll. Holds a password: no repr."""

    host: str
    port: int
    db: int
    tls: bool
    username: str | None
    password: str | None = None

    def __repr__(self) -> str:
        return f"_Connection(host={self.host!r}, port={self.port}, db={self.db}, tls={self.tls})"

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    def fingerprint(self) -> str:
        text = "\0".join(str(part) for part in (self.host, self.port, self.db, self.tls, self.username, self.password))
        return hashlib.sha256(text.encode()).hexdigest()


def parse_url(url: str, where: str) -> _Connection:
    """host, port, db, TLS and credentials of a `redis://` or `rediss://` URL; raises _InvalidUrl naming `where`."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or 6379
        host = parts.hostname
    except ValueError:
        raise _InvalidUrl(f"{where} is not a valid redis:// URL") from None
    if parts.scheme not in ("redis", "rediss"):
        raise _InvalidUrl(f"{where} must be a redis:// or rediss:// URL")
    if not host:
        raise _InvalidUrl(f"{where} has no host")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise _InvalidUrl(f"{where} must name the database by number (redis://host:6379/0)")
    return _Connection(
        host=host,
        port=port,
        db=int(path) if path else 0,
        tls=parts.scheme == "rediss",
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
    )


class RedisListPoller(Poller[RedisListSource, _Connection, int]):
    """Polls one Redis list or stream. Secrets are read on every poll; a changed one opens a new connection."""

    kind = TYPE

    def __init__(
        self, spec: RedisListSource, context: SourceContext, *, retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(spec, context, retry=retry, rng=rng)
        self._client: Redis | None = None
        self._fingerprint = ""

    def __repr__(self) -> str:
        return f"RedisListPoller(key={self._spec.queue_label!r}, host={self._spec.host!r})"

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.aclose()
            except Exception as exc:  # closing must not fail a shutdown
                log.debug("redis-list %s: closing: %s", self._spec.queue_label, type(exc).__name__)

    async def prepare(self, deadline: float) -> _Connection | SourceReading:  # noqa: ARG002
        return await prepare_with_driver(driver="redis.asyncio", kind=TYPE, install_hint=INSTALL_HINT,
                                         settings=self._connection, invalid=_InvalidUrl, invalid_code="InvalidURL")

    async def _connection(self) -> _Connection:
        spec = self._spec
        password = await self.secret(spec.password_secret_ref)
        url = await self.secret(spec.url_secret_ref)
        if url is not None:
            conn = parse_url(url, str(spec.url_secret_ref))
            return _Connection(conn.host, conn.port, conn.db, conn.tls, spec.username or conn.username,
                               password if password is not None else conn.password)
        assert spec.host is not None
        return _Connection(spec.host, spec.port, spec.db, spec.tls, spec.username, password)

    def _client_for(self, connection: _Connection) -> Redis:
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        fingerprint = connection.fingerprint()
        if self._client is None or fingerprint != self._fingerprint:
            # Our own loop retries within the budget; the driver's retries would not know the budget.
            self._client = Redis(
                host=connection.host, port=connection.port, db=connection.db, username=connection.username,
                password=connection.password, ssl=connection.tls, socket_timeout=self._retry.request_timeout,
                socket_connect_timeout=self._retry.request_timeout, retry=Retry(NoBackoff(), 0), max_connections=2,
            )
            self._fingerprint = fingerprint
        return self._client

    async def attempt(self, settings: _Connection, timeout: float) -> int | SourceError:
        connection = settings
        from redis import exceptions as rx

        spec = self._spec
        try:
            client = self._client_for(connection)
            if spec.stream_name is None:
                assert spec.list_name is not None
                return int(await client.llen(spec.list_name))
            assert spec.consumer_group is not None
            summary: Any = await client.xpending(spec.stream_name, spec.consumer_group)
            count = int(summary["pending"])
            if spec.stream_count == "pendingAndLag":
                lag = await self._lag(client)
                if isinstance(lag, SourceError):
                    return lag
                count += lag
            return count
        except rx.AuthenticationError:
            who = f"user '{connection.username}'" if connection.username else "the default user"
            return SourceError("AuthenticationFailed",
                               f"Redis at {connection.where} rejected the password of {who}{self._check_secret()}",
                               retryable=False)
        except rx.NoPermissionError:
            command = "LLEN" if spec.stream_name is None else "XPENDING" + (
                " and XINFO GROUPS" if spec.stream_count == "pendingAndLag" else "")
            return SourceError("NoPermission",
                               f"the Redis user may not run {command} on key '{self._key()}' at {connection.where} "
                               f"(NOPERM): grant it {self._acl_hint()}", retryable=False)
        except rx.BusyLoadingError:
            return SourceError("Loading", f"Redis at {connection.where} is loading its data set")
        except rx.ResponseError as exc:
            return self._response_error(exc, connection)
        except rx.TimeoutError:
            return SourceError("Timeout", f"no answer from Redis at {connection.where} within {duration(timeout)}")
        except (rx.ConnectionError, OSError) as exc:
            tls = " over TLS" if connection.tls else ""
            return SourceError("ConnectionFailed",
                               f"cannot connect to Redis at {connection.where}{tls} ({type(exc).__name__})")

    async def _lag(self, client: Redis) -> int | SourceError:
        spec = self._spec
        groups: Any = await client.xinfo_groups(spec.stream_name or "")
        for group in groups:
            name = group.get("name") if isinstance(group, dict) else None
            if isinstance(name, bytes):
                name = name.decode("utf-8", "replace")
            if name == spec.consumer_group:
                lag = group.get("lag")
                if lag is None:
                    return SourceError("LagUnknown", f"Redis cannot tell the lag of group '{spec.consumer_group}' "
                                       f"on stream '{spec.stream_name}' (it needs Redis 7, and a stream whose "
                                       "entries were not deleted mid-range): use streamCount: pending",
                                       retryable=False)
                return int(lag)
        return SourceError("NoSuchGroup", f"stream '{spec.stream_name}' has no consumer group "
                           f"'{spec.consumer_group}'", retryable=False)

    def _response_error(self, exc: Exception, connection: _Connection) -> SourceError:
        text = str(exc)
        code = text.split(" ", 1)[0] if text[:1].isupper() else ""
        key = self._key()
        if code == "WRONGTYPE" or text.startswith("Operation against a key holding the wrong kind"):
            kind = "a list" if self._spec.stream_name is None else "a stream"
            field = "listName" if self._spec.stream_name is None else "streamName"
            return SourceError("WrongType", f"key '{key}' at {connection.where} is not {kind}: fix {field}",
                               retryable=False)
        if code == "NOGROUP" or "no such key" in text.lower():
            return SourceError("NoSuchGroup", f"stream '{self._spec.stream_name}' or its consumer group "
                               f"'{self._spec.consumer_group}' does not exist at {connection.where}: create the "
                               "group (XGROUP CREATE ... MKSTREAM) or fix streamName/consumerGroup",
                               retryable=False)
        # Redis's own words: short, and they never echo a password.
        return SourceError(code or "ResponseError", f"Redis at {connection.where} refused the command on key "
                           f"'{key}': {text[:200]}", retryable=False)

    def _key(self) -> str:
        return self._spec.stream_name or self._spec.list_name or ""

    def _check_secret(self) -> str:
        ref = self._spec.password_secret_ref or self._spec.url_secret_ref
        return f": check the {ref}" if ref is not None else ""

    def _acl_hint(self) -> str:
        if self._spec.stream_name is None:
            return f"'+llen ~{self._key()}'"
        extra = " +xinfo|groups" if self._spec.stream_count == "pendingAndLag" else ""
        return f"'+xpending{extra} ~{self._key()}'"


def build(spec: SourceSpec, context: SourceContext) -> RedisListPoller:
    if not isinstance(spec, RedisListSource):
        raise TypeError(f"redis-list factory got a {type(spec).__name__}")
    return RedisListPoller(spec, context)


