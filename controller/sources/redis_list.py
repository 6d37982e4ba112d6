"""Redis: the `redis-list` kind's fields, validation and poller.

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
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlsplit

from controller.policy import SourceError, SourceReading
from controller.sources.base import SourceContext, register_source_factory
from controller.sources.retries import RetryPolicy, deadline_for, prepare_with_driver, with_retries
from controller.spec import Fields, SecretKeyRef, SourceSpec, register_source_kind
from controller.textfmt import duration

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

TYPE = "redis-list"
INSTALL_HINT = "pip install 'queuescale[redis]'"
_HOST = r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]"


@dataclass(frozen=True, kw_only=True)
class RedisListSource(SourceSpec):
    """One Redis list (or stream and consumer group) and how to reach it: host/port/db, or a URL from a Secret."""

    list_name: str | None = None
    stream_name: str | None = None
    consumer_group: str | None = None
    stream_count: Literal["pending", "pendingAndLag"] = "pending"
    host: str | None = None
    port: int = 6379
    db: int = 0
    username: str | None = None
    password_secret_ref: SecretKeyRef | None = None
    url_secret_ref: SecretKeyRef | None = None
    tls: bool = False

    @property
    def queue_label(self) -> str:
        if self.stream_name is not None:
            return f"{self.stream_name}/{self.consumer_group}"
        return self.list_name or ""


def parse(f: Fields, weight: float) -> RedisListSource:
    list_name = f.optional_string("listName", max_length=1024)
    stream_name = f.optional_string("streamName", max_length=1024)
    group = f.optional_string("consumerGroup", max_length=1024)
    stream_count = f.choice("streamCount", ("pending", "pendingAndLag"), "pending")
    for name, value in (("listName", list_name), ("streamName", stream_name), ("consumerGroup", group)):
        if value == "":
            f.error(name, "must not be empty")
    if list_name is None and stream_name is None:
        f.error("", "must set listName or streamName")
    elif list_name is not None and stream_name is not None:
        f.error("streamName", "cannot be combined with listName: a source counts one list or one stream")
    if stream_name is not None and group is None:
        f.error("consumerGroup", "is required with streamName")
    if stream_name is None and group is not None:
        f.error("consumerGroup", "applies only with streamName")
    if stream_name is None and f.has("streamCount"):
        f.error("streamCount", "applies only with streamName")

    host = f.optional_string("host", pattern=_HOST, pattern_help="must be a host name or IP address", max_length=253)
    port = f.integer("port", 6379, minimum=1, maximum=65535)
    db = f.integer("db", 0, minimum=0, maximum=15)
    username = f.optional_string("username", pattern=r"[^\s]+", pattern_help="must have no white space",
                                 max_length=128)
    password = f.secret_ref("passwordSecretRef")
    url = f.secret_ref("urlSecretRef")
    tls = f.boolean("tls", False)
    if url is None and host is None:
        f.error("", "must set host or urlSecretRef")
    if url is not None:
        for name in ("host", "port", "db", "tls"):
            if f.has(name):
                f.error(name, "comes from the URL when urlSecretRef is set (rediss:// for TLS)")

    return RedisListSource(
        type=TYPE,
        weight=weight,
        list_name=list_name,
        stream_name=stream_name,
        consumer_group=group,
        stream_count=stream_count,  # type: ignore[arg-type]
        host=host,
        port=port,
        db=db,
        username=username,
        password_secret_ref=password,
        url_secret_ref=url,
        tls=tls,
    )


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


class RedisListPoller:
    """Polls one Redis list or stream. Secrets are read on every poll; a changed one opens a new connection."""

    def __init__(
        self, spec: RedisListSource, context: SourceContext, *, retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._spec = spec
        self._context = context
        self._retry = retry or RetryPolicy()
        self._rng = rng or random.Random()
        self._client: Redis | None = None
        self._fingerprint = ""
        self.attempts = 0  # attempts made by the last poll (for tests)

    @property
    def spec(self) -> RedisListSource:
        return self._spec

    def __repr__(self) -> str:
        return f"RedisListPoller(key={self._spec.queue_label!r}, host={self._spec.host!r})"

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.aclose()
            except Exception as exc:  # closing must not fail a shutdown
                log.debug("redis-list %s: closing: %s", self._spec.queue_label, type(exc).__name__)

    async def poll(self, budget: float) -> SourceReading:
        """The list's length (or the stream's pending count), or an error reading. Never raises."""
        deadline = deadline_for(budget)
        self.attempts = 0
        try:
            connection = await prepare_with_driver(
                driver="redis.asyncio", kind=TYPE, install_hint=INSTALL_HINT, settings=self._connection,
                invalid=_InvalidUrl, invalid_code="InvalidURL",
            )
            if isinstance(connection, SourceReading):
                return connection
            outcome = await with_retries(lambda timeout: self._attempt(connection, timeout), deadline,
                                         self._retry, self._rng)
            self.attempts = outcome.attempts
            if outcome.error is not None:
                if outcome.error.retryable:
                    await self.aclose()  # a half-broken pool: start afresh next poll
                return SourceReading(count=None, error=outcome.error)
            assert outcome.value is not None
            return SourceReading.of(outcome.value)
        except Exception as exc:  # never raise out of a poll; a driver's text might hold a URL
            log.error("redis-list %s: unexpected %s", self._spec.queue_label, type(exc).__name__)
            return SourceReading.failed("InternalError", f"unexpected {type(exc).__name__} while polling")

    async def _connection(self) -> _Connection:
        spec = self._spec
        password = None
        if spec.password_secret_ref is not None:
            ref = spec.password_secret_ref
            password = await self._context.secrets(ref.name, ref.key)
        if spec.url_secret_ref is not None:
            ref = spec.url_secret_ref
            url = await self._context.secrets(ref.name, ref.key)
            conn = parse_url(url, f"Secret '{ref.name}' key '{ref.key}'")
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

    async def _attempt(self, connection: _Connection, timeout: float) -> int | SourceError:
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
        return f": check the Secret '{ref.name}' key '{ref.key}'" if ref is not None else ""

    def _acl_hint(self) -> str:
        if self._spec.stream_name is None:
            return f"'+llen ~{self._key()}'"
        extra = " +xinfo|groups" if self._spec.stream_count == "pendingAndLag" else ""
        return f"'+xpending{extra} ~{self._key()}'"


def _build(spec: SourceSpec, context: SourceContext) -> RedisListPoller:
    if not isinstance(spec, RedisListSource):
        raise TypeError(f"redis-list factory got a {type(spec).__name__}")
    return RedisListPoller(spec, context)


register_source_kind(TYPE, parse)
register_source_factory(TYPE, _build)
