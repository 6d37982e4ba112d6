"""SQL job tables: the `sql-table` kind's poller (PostgreSQL).

The count is the number of due, unclaimed rows of a table that workers claim with `SELECT ... FOR UPDATE SKIP
LOCKED`. The rule describes the rows declaratively (table, due-time column, claim column and the value that means
"unclaimed", an optional extra condition), or gives its own single `SELECT count(*) ...`. Either way the query
runs in a READ ONLY transaction with a statement timeout no longer than the poll's budget, so a rule can neither
write nor hold a connection for long. A plain count takes no row locks, so it never waits for the workers' locks.

With a due-time column the reading also says how long the oldest due row has waited (`oldest_age`, 0 when none is
due, and in its note); a custom query may give that age as its second column.

The driver is asyncpg, an optional extra (`pip install 'queuescale[postgres]'`); without it a poll fails with the
code `DriverNotInstalled`. Messages name the host, database, user, table and Secret, never a password or a DSN.
"""

from __future__ import annotations

import asyncio
import decimal
import hashlib
import logging
import random
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from controller.model.fields import format_duration
from controller.model.readings import SourceError, SourceReading
from controller.model.sources.base import SourceSpec
from controller.model.sources.sql_table import (
    TYPE,
    SqlTableSource,
)
from controller.model.textfmt import duration
from controller.sources.base import Poller, SourceContext
from controller.sources.retries import RetryPolicy, prepare_with_driver

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'queuescale[postgres]'"




# --------------------------------------------------------------------------------------------------------------
# Validating SQL text










def _quote(identifier: str) -> str:
    return ".".join(f'"{part}"' for part in identifier.split("."))


def count_query(spec: SqlTableSource) -> tuple[str, tuple[str, ...]]:
    """The SQL a poll runs and its parameters: one row of (count, age of the oldest due row in seconds or NULL)."""
    if spec.query is not None:
        return spec.query.strip().rstrip(";"), ()
    assert spec.table is not None
    conditions: list[str] = []
    params: tuple[str, ...] = ()
    age = "NULL::float8"
    if spec.due_column is not None:
        conditions.append(f"{_quote(spec.due_column)} <= now()")
        age = f"EXTRACT(EPOCH FROM now() - min({_quote(spec.due_column)}))::float8"
    if spec.claim_column is not None:
        if spec.unclaimed_value is None:
            conditions.append(f"{_quote(spec.claim_column)} IS NULL")
        else:
            conditions.append(f"{_quote(spec.claim_column)}::text = $1")
            params = (spec.unclaimed_value,)
    if spec.where is not None:
        conditions.append(f"({spec.where})")
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return f"SELECT count(*)::bigint, {age} FROM {_quote(spec.table)}{where}", params


# --------------------------------------------------------------------------------------------------------------
# The poller


class _InvalidDsn(Exception):
    """The DSN Secret is not a postgresql:// URL; the message names the Secret, never the value."""


@dataclass(frozen=True)
class _Connection:
    """Connection settings of this poll. Holds a password or a DSN: no repr of them."""

    where: str  # "host:port/database" for messages
    user: str
    dsn: str | None = None
    host: str | None = None
    port: int = 5432
    database: str | None = None
    password: str | None = None
    ssl_mode: str = "prefer"

    def __repr__(self) -> str:
        return f"_Connection({self.where!r}, user={self.user!r})"

    def fingerprint(self) -> str:
        text = "\0".join(str(p) for p in (self.dsn, self.host, self.port, self.database, self.user, self.password,
                                            self.ssl_mode))
        return hashlib.sha256(text.encode()).hexdigest()


def parse_dsn(dsn: str, where: str) -> tuple[str, str]:
    """`(host:port/database, user)` of a postgresql:// DSN, for messages; raises _InvalidDsn naming `where`."""
    try:
        parts = urlsplit(dsn.strip())
        port = parts.port or 5432
    except ValueError:
        raise _InvalidDsn(f"{where} is not a valid postgresql:// URL") from None
    if parts.scheme not in ("postgres", "postgresql"):
        raise _InvalidDsn(f"{where} must be a postgresql:// URL")
    if not parts.hostname:
        raise _InvalidDsn(f"{where} has no host")
    return f"{parts.hostname}:{port}/{parts.path.strip('/') or '?'}", unquote(parts.username or "?")


# SQLSTATEs a poll may hit, and whether a later attempt may succeed.
_PERMANENT = {
    "28P01": "AuthenticationFailed",  # invalid_password
    "28000": "AuthenticationFailed",  # invalid_authorization_specification (no such role, pg_hba)
    "3D000": "DatabaseNotFound",
    "42501": "PermissionDenied",
    "42P01": "TableNotFound",
    "42703": "ColumnNotFound",
    "42601": "InvalidQuery",
    "42883": "InvalidQuery",  # undefined_function
    "42804": "InvalidQuery",  # datatype_mismatch
    "22P02": "InvalidQuery",  # invalid_text_representation
    "25006": "ReadOnlyTransaction",
}
_TRANSIENT = {
    "57014": "StatementTimeout",  # query_canceled
    "57P01": "ServerShuttingDown",
    "57P02": "ServerShuttingDown",
    "57P03": "ServerStarting",
    "53300": "TooManyConnections",
    "40001": "SerializationFailure",
    "40P01": "Deadlock",
    "08006": "ConnectionFailed",
    "08001": "ConnectionFailed",
    "08004": "ConnectionFailed",
}


class SqlTablePoller(Poller[SqlTableSource, _Connection, tuple[int, float | None]]):
    """Polls one job table. Secrets are read on every poll; changed ones open a new connection."""

    kind = TYPE

    def __init__(
        self, spec: SqlTableSource, context: SourceContext, *, retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(spec, context, retry=retry, rng=rng)
        self._connection: Any = None  # an asyncpg.Connection
        self._fingerprint = ""

    def __repr__(self) -> str:
        return f"SqlTablePoller(table={self._spec.queue_label!r}, host={self._spec.host!r})"

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                await asyncio.wait_for(connection.close(), 2.0)
            except Exception:
                connection.terminate()

    async def prepare(self, deadline: float) -> _Connection | SourceReading:  # noqa: ARG002
        return await prepare_with_driver(driver="asyncpg", kind=TYPE, install_hint=INSTALL_HINT,
                                         settings=self._settings, invalid=_InvalidDsn, invalid_code="InvalidDSN")

    async def reading(self, settings: _Connection, value: tuple[int, float | None],  # noqa: ARG002
                      deadline: float) -> SourceReading:  # noqa: ARG002
        count, age = value
        note = f"oldest due row waited {duration(age)}" if age is not None else ""
        if age is None and self._spec.due_column is not None and self._spec.query is None:
            age = 0.0  # no row is due (min() over none is NULL): none waits
        return SourceReading.of(count, note, oldest_age=age)

    async def _settings(self) -> _Connection:
        spec = self._spec
        password = await self.secret(spec.password_secret_ref)
        dsn = await self.secret(spec.dsn_secret_ref)
        if dsn is not None:
            where, user = parse_dsn(dsn, str(spec.dsn_secret_ref))
            return _Connection(where=where, user=user, dsn=dsn.strip(), password=password)
        assert spec.host is not None and spec.database is not None and spec.user is not None
        return _Connection(where=f"{spec.host}:{spec.port}/{spec.database}", user=spec.user, host=spec.host,
                           port=spec.port, database=spec.database, password=password, ssl_mode=spec.ssl_mode)

    async def _connect(self, settings: _Connection, timeout: float) -> Any:
        import asyncpg

        fingerprint = settings.fingerprint()
        if self._connection is not None and (fingerprint != self._fingerprint or self._connection.is_closed()):
            await self.aclose()
        if self._connection is None:
            server_settings = {"application_name": "queuescale", "default_transaction_read_only": "on"}
            if settings.dsn is not None:
                self._connection = await asyncpg.connect(dsn=settings.dsn, password=settings.password,
                                                         timeout=timeout, server_settings=server_settings,
                                                         statement_cache_size=0)
            else:
                self._connection = await asyncpg.connect(
                    host=settings.host, port=settings.port, database=settings.database, user=settings.user,
                    password=settings.password, ssl=settings.ssl_mode, timeout=timeout,
                    server_settings=server_settings, statement_cache_size=0,
                )
            self._fingerprint = fingerprint
        return self._connection

    async def attempt(self, settings: _Connection, timeout: float) -> tuple[int, float | None] | SourceError:
        import asyncpg

        sql, params = count_query(self._spec)
        # The server gives up a little before our own timeout, so a slow count is reported as what it is.
        statement_ms = max(1, int(min(self._spec.statement_timeout, timeout * 0.9) * 1000))
        try:
            connection = await self._connect(settings, timeout)
            async with connection.transaction(readonly=True):
                await connection.execute(f"SET LOCAL statement_timeout = {statement_ms}")
                row = await connection.fetchrow(sql, *params)
        except asyncpg.PostgresError as exc:
            return self._postgres_error(exc, settings, statement_ms)
        except (asyncpg.InterfaceError, asyncpg.exceptions.ClientConfigurationError) as exc:
            await self.aclose()
            return SourceError("ConnectionFailed", f"cannot use the connection to {settings.where} "
                               f"({type(exc).__name__})")
        except (OSError, ConnectionError) as exc:
            await self.aclose()
            return SourceError("ConnectionFailed", f"cannot connect to PostgreSQL at {settings.where} "
                               f"({type(exc).__name__})")
        return self._read_row(row, settings)

    def _read_row(self, row: Any, settings: _Connection) -> tuple[int, float | None] | SourceError:
        what = "the query" if self._spec.query is not None else f"the count of table '{self._spec.table}'"
        if row is None or len(row) == 0 or isinstance(row[0], bool) or not isinstance(row[0], int):
            return SourceError("InvalidResponse", f"{what} on {settings.where} did not return a count in its first "
                               "column", retryable=False)
        age = row[1] if len(row) > 1 else None
        if isinstance(age, bool) or not isinstance(age, int | float | decimal.Decimal):  # numeric: Decimal
            age = None
        return int(row[0]), (max(0.0, float(age)) if age is not None else None)

    def _postgres_error(self, exc: Any, settings: _Connection, statement_ms: int) -> SourceError:
        state = str(getattr(exc, "sqlstate", "") or "")
        server_message = str(getattr(exc, "message", "") or "")[:300]
        spec = self._spec
        table = f"table '{spec.table}'" if spec.table else "the query"
        if state in ("28P01", "28000"):
            ref = spec.password_secret_ref or spec.dsn_secret_ref
            check = f": check the {ref}" if ref is not None else ""
            return SourceError("AuthenticationFailed", f"PostgreSQL at {settings.where} refused user "
                               f"'{settings.user}' ({server_message}){check}", retryable=False)
        if state == "42501":
            return SourceError("PermissionDenied", f"user '{settings.user}' may not read {table} on "
                               f"{settings.where} ({server_message}): GRANT SELECT on the columns the count uses "
                               "(see docs/sources/sql-table.md)", retryable=False)
        if state == "42P01":
            return SourceError("TableNotFound", f"{table} does not exist on {settings.where} ({server_message})",
                               retryable=False)
        if state == "57014":
            return SourceError("StatementTimeout", f"counting {table} on {settings.where} took longer than "
                               f"{format_duration(statement_ms / 1000)}: add an index on the due/claim columns or "
                               "raise statementTimeout")
        code = _PERMANENT.get(state) or _TRANSIENT.get(state)
        if code is None:
            code = "DatabaseError"
        return SourceError(code, f"PostgreSQL at {settings.where} answered SQLSTATE {state} for {table}: "
                           f"{server_message}", retryable=state in _TRANSIENT or state.startswith("08"))


def build(spec: SourceSpec, context: SourceContext) -> SqlTablePoller:
    if not isinstance(spec, SqlTableSource):
        raise TypeError(f"sql-table factory got a {type(spec).__name__}")
    return SqlTablePoller(spec, context)


