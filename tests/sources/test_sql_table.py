"""sql-table: spec and SQL validation, and polls against a real PostgreSQL (tests/servers.py) whose workers claim
rows with SELECT ... FOR UPDATE SKIP LOCKED."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from controller.model.fields import SecretKeyRef, SpecError
from controller.model.readings import SourceReading
from controller.model.rule import parse_queuescaler
from controller.model.sources.sql_table import SqlTableSource, select_problem
from controller.sources.base import SourceContext
from controller.sources.retries import RetryPolicy
from controller.sources.sql_table import SqlTablePoller, count_query
from tests.helpers import DictSecrets
from tests.servers import PG_SCALER_PASSWORD, PG_SUPERUSER_PASSWORD, PostgresServer
from tests.transports import http_client

FAST = RetryPolicy(request_timeout=1.0, first_delay=0.02, max_delay=0.1, max_attempts=10)
PASSWORD = SecretKeyRef("pg", "password")


def rule(**source: Any) -> dict[str, Any]:
    return {"apiVersion": "queuescale.io/v1alpha1", "kind": "QueueScaler", "metadata": {"name": "r"},
            "spec": {"scaleTargetRef": {"name": "w"}, "maxReplicas": 5, "sources": [{"type": "sql-table", **source}]}}


def errors_of(**source: Any) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_queuescaler(rule(**source))
    return [str(e) for e in info.value.errors]


CONNECTION = {"host": "db.shop.svc", "database": "shop", "user": "queuescale",
              "passwordSecretRef": {"name": "pg", "key": "password"}}


# ---------------------------------------------------------------------------------------------- the spec


def test_a_declarative_rule_parses_with_its_defaults() -> None:
    source = parse_queuescaler(rule(table="jobs.queue", dueColumn="run_at", claimColumn="status",
                                    unclaimedValue="pending", **CONNECTION)).spec.sources[0]
    assert isinstance(source, SqlTableSource)
    assert (source.port, source.ssl_mode, source.statement_timeout, source.queue_label) == (
        5432, "prefer", 5.0, "jobs.queue")
    sql, params = count_query(source)
    assert sql == ('SELECT count(*)::bigint, EXTRACT(EPOCH FROM now() - min("run_at"))::float8 FROM "jobs"."queue" '
                   'WHERE "run_at" <= now() AND "status"::text = $1')
    assert params == ("pending",)


def test_bad_fields_are_named_by_their_path() -> None:
    assert errors_of(**CONNECTION) == ["spec.sources[0]: must set table or query"]
    assert errors_of(table="jobs; drop table jobs", **CONNECTION) == [
        'spec.sources[0].table: must be a table name, optionally schema-qualified (letters, digits, _), '
        'got "jobs; drop table jobs"']
    assert errors_of(table="jobs", query="select 1", **CONNECTION) == [
        "spec.sources[0].query: cannot be combined with table: describe the rows, or give the whole query"]
    assert errors_of(query="select count(*) from jobs", where="x", **CONNECTION) == [
        "spec.sources[0].where: applies only with table (write it into query)"]
    assert errors_of(table="jobs", unclaimedValue="new", **CONNECTION) == [
        "spec.sources[0].unclaimedValue: applies only with claimColumn"]
    assert errors_of(table="jobs", host="db") == [
        "spec.sources[0].database: is required with host", "spec.sources[0].user: is required with host"]
    assert errors_of(table="jobs") == ["spec.sources[0]: must set host or dsnSecretRef"]
    assert errors_of(table="jobs", dsnSecretRef={"name": "pg", "key": "dsn"}, host="db", sslMode="require") == [
        "spec.sources[0].host: comes from the DSN when dsnSecretRef is set",
        "spec.sources[0].sslMode: comes from the DSN when dsnSecretRef is set"]
    assert errors_of(table="jobs", sslMode="on", statementTimeout="2m", **CONNECTION) == [
        'spec.sources[0].sslMode: must be one of disable, allow, prefer, require, verify-ca, verify-full, got "on"',
        "spec.sources[0].statementTimeout: must be at most 1m, got 2m"]
    assert errors_of(table="jobs", where="true; delete from jobs", **CONNECTION) == [
        "spec.sources[0].where: must be one condition: no ';' or comments"]
    assert errors_of(query="delete from jobs returning 1", **CONNECTION) == ["spec.sources[0].query: must be a SELECT"]


@pytest.mark.parametrize(("query", "problem"), [
    ("SELECT count(*) FROM jobs", None),
    ("select count(*) from jobs where note = 'a;b' and \"we;ird\" > 0;", None),
    ("SELECT count(*) FROM jobs -- ; drop table jobs\n", None),
    ("SELECT $$;$$, count(*) FROM jobs", None),
    ("SELECT 1; DELETE FROM jobs", "must be a single statement (no ';' but at the end)"),
    ("WITH d AS (DELETE FROM jobs RETURNING 1) SELECT count(*) FROM d", "must be a SELECT"),
    ("UPDATE jobs SET x = 1", "must be a SELECT"),
    ("SELECT count(*) FROM jobs FOR UPDATE", "must not lock rows (FOR UPDATE / FOR SHARE): the workers' claims would "
                                             "wait for it"),
    ("SELECT * INTO copy FROM jobs", "must not SELECT ... INTO"),
    ("SELECT 'unclosed", "has an unclosed quote or comment"),
    ("/* SELECT */ DELETE FROM jobs", "must be a SELECT"),
])
def test_a_custom_query_must_be_one_select(query: str, problem: str | None) -> None:
    assert select_problem(query) == problem


# ---------------------------------------------------------------------------------------------- real PostgreSQL


async def admin(server: PostgresServer) -> asyncpg.Connection:
    return await asyncpg.connect(server.dsn())


@pytest.fixture
async def jobs(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """A job table of its own: 10 due rows, 5 due later; and a least-privilege `scaler` role that may count it."""
    table = f"jobs_{uuid.uuid4().hex[:10]}"
    conn = await admin(postgres_server)
    try:
        await conn.execute(f"""
            CREATE TABLE {table} (id serial PRIMARY KEY, run_at timestamptz NOT NULL, claimed_by text,
                                  status text NOT NULL DEFAULT 'pending', payload text);
            INSERT INTO {table} (run_at) SELECT now() - make_interval(secs => 30 + g) FROM generate_series(1, 10) g;
            INSERT INTO {table} (run_at) SELECT now() + interval '1 hour' FROM generate_series(1, 5);
        """)
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = 'scaler'"):
            await conn.execute(f"CREATE ROLE scaler LOGIN PASSWORD '{PG_SCALER_PASSWORD}'")
        # The least privilege the docs recommend: SELECT on the columns the count reads, nothing else.
        await conn.execute(f"GRANT SELECT (run_at, claimed_by, status) ON {table} TO scaler")
        yield table
    finally:
        await conn.close()


def source(server: PostgresServer, table: str, **fields: Any) -> SqlTableSource:
    values: dict[str, Any] = {"due_column": "run_at", "claim_column": "claimed_by"}
    values.update(fields)
    return SqlTableSource(type="sql-table", table=table, host="127.0.0.1", port=server.port, database="postgres",
                          user="scaler", password_secret_ref=PASSWORD, ssl_mode="disable", **values)


def secrets(password: str = PG_SCALER_PASSWORD, **more: str) -> DictSecrets:
    values = {("pg", "password"): password}
    values.update({(name, "value"): value for name, value in more.items()})
    return DictSecrets(values)


async def poll(spec: SqlTableSource, values: DictSecrets | None = None, *, budget: float = 5.0,
               retry: RetryPolicy = FAST) -> tuple[SourceReading, SqlTablePoller]:
    async with http_client() as http:
        poller = SqlTablePoller(spec, SourceContext(http=http, secrets=values or secrets()), retry=retry)
        try:
            return await poller.poll(budget), poller
        finally:
            await poller.aclose()


async def claim(conn: asyncpg.Connection, table: str, n: int, worker: str) -> list[int]:
    """What a worker does: take up to n due, unclaimed rows without waiting for other workers' locks."""
    rows = await conn.fetch(f"""
        UPDATE {table} SET claimed_by = $2, status = 'running' WHERE id IN (
            SELECT id FROM {table} WHERE run_at <= now() AND claimed_by IS NULL
            ORDER BY run_at LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id""", n, worker)
    return [r["id"] for r in rows]


async def test_counts_due_unclaimed_rows_and_the_oldest_ones_age(postgres_server: PostgresServer, jobs: str) -> None:
    reading, _ = await poll(source(postgres_server, jobs))
    assert reading.count == 10  # the 5 rows due in an hour are not counted
    assert reading.oldest_age is not None and 39 <= reading.oldest_age < 60
    assert reading.note.startswith("oldest due row waited 4")

    worker = await admin(postgres_server)
    try:
        assert len(await claim(worker, jobs, 3, "w1")) == 3
    finally:
        await worker.close()
    assert (await poll(source(postgres_server, jobs)))[0].count == 7


async def test_with_no_row_due_none_has_waited(postgres_server: PostgresServer, jobs: str) -> None:
    worker = await admin(postgres_server)
    try:
        assert len(await claim(worker, jobs, 10, "w1")) == 10  # every due row taken; 5 are due in an hour
    finally:
        await worker.close()
    reading, _ = await poll(source(postgres_server, jobs))
    assert (reading.count, reading.oldest_age, reading.note) == (0, 0.0, "")


async def test_a_status_column_with_an_unclaimed_value(postgres_server: PostgresServer, jobs: str) -> None:
    conn = await admin(postgres_server)
    try:
        await conn.execute(f"UPDATE {jobs} SET status = 'done' WHERE id <= 4")
    finally:
        await conn.close()
    spec = source(postgres_server, jobs, claim_column="status", unclaimed_value="pending", due_column=None)
    reading, _ = await poll(spec)
    assert (reading.count, reading.oldest_age, reading.note) == (11, None, "")  # 15 rows, 4 done; no due column
    extra = source(postgres_server, jobs, claim_column="status", unclaimed_value="pending", where="run_at <= now()")
    assert (await poll(extra))[0].count == 6


async def test_the_count_does_not_wait_for_rows_workers_hold_locked(postgres_server: PostgresServer, jobs: str) -> None:
    worker = await admin(postgres_server)
    try:
        transaction = worker.transaction()
        await transaction.start()
        locked = await worker.fetch(f"SELECT id FROM {jobs} WHERE claimed_by IS NULL ORDER BY id LIMIT 4 "
                                    "FOR UPDATE SKIP LOCKED")
        assert len(locked) == 4
        started = time.monotonic()
        reading, _ = await poll(source(postgres_server, jobs))
        assert time.monotonic() - started < 2.0
        assert reading.count == 10  # locked, not yet claimed: still waiting for a worker to finish the claim
        await transaction.rollback()
    finally:
        await worker.close()


async def test_a_custom_select_runs_read_only(postgres_server: PostgresServer, jobs: str) -> None:
    spec = SqlTableSource(type="sql-table", query=f"SELECT count(*), 12.5 FROM {jobs} WHERE claimed_by IS NULL;",
                          host="127.0.0.1", port=postgres_server.port, database="postgres", user="postgres",
                          password_secret_ref=PASSWORD, ssl_mode="disable")
    reading, _ = await poll(spec, secrets(PG_SUPERUSER_PASSWORD))
    assert (reading.count, reading.oldest_age) == (15, 12.5)
    # Even a query that gets past validation cannot write: the transaction is READ ONLY.
    writer = SqlTableSource(type="sql-table", query=f"SELECT count(*) FROM (SELECT nextval('{jobs}_id_seq')) s",
                            host="127.0.0.1", port=postgres_server.port, database="postgres", user="postgres",
                            password_secret_ref=PASSWORD, ssl_mode="disable")
    reading, _ = await poll(writer, secrets(PG_SUPERUSER_PASSWORD))
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("ReadOnlyTransaction", False)


async def test_a_slow_count_hits_the_statement_timeout(postgres_server: PostgresServer) -> None:
    spec = SqlTableSource(type="sql-table", query="SELECT count(*) FROM pg_sleep(3)", host="127.0.0.1",
                          port=postgres_server.port, database="postgres", user="postgres",
                          password_secret_ref=PASSWORD, ssl_mode="disable", statement_timeout=0.3)
    started = time.monotonic()
    reading, _ = await poll(spec, secrets(PG_SUPERUSER_PASSWORD), budget=1.0,
                            retry=RetryPolicy(request_timeout=1.0, first_delay=0.05, max_attempts=2))
    assert time.monotonic() - started <= 1.2
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("StatementTimeout", True)
    assert "took longer than 300ms" in reading.error.message


async def test_wrong_password_missing_table_and_no_privilege_fail_at_once(
    postgres_server: PostgresServer, jobs: str
) -> None:
    reading, poller = await poll(source(postgres_server, jobs), secrets("wrong"))
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable, poller.attempts) == ("AuthenticationFailed", False, 1)
    assert "refused user 'scaler'" in reading.error.message
    assert "check the Secret 'pg' key 'password'" in reading.error.message

    reading, poller = await poll(source(postgres_server, "no_such_table"))
    assert reading.error is not None
    assert (reading.error.code, poller.attempts) == ("TableNotFound", 1)

    reading, _ = await poll(source(postgres_server, jobs, where="payload IS NULL"))  # payload is not granted
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("PermissionDenied", False)
    assert "GRANT SELECT" in reading.error.message


async def test_a_dsn_secret_carries_the_connection(postgres_server: PostgresServer, jobs: str) -> None:
    spec = SqlTableSource(type="sql-table", table=jobs, claim_column="claimed_by",
                          dsn_secret_ref=SecretKeyRef("dsn", "value"))
    dsn = postgres_server.dsn("scaler", PG_SCALER_PASSWORD) + "?sslmode=disable"
    assert (await poll(spec, secrets(dsn=dsn)))[0].count == 15
    reading, _ = await poll(spec, secrets(dsn="mysql://u:p@h/db"))
    assert reading.error is not None
    assert (reading.error.code, reading.error.message) == (
        "InvalidDSN", "Secret 'dsn' key 'value' must be a postgresql:// URL")


async def test_a_server_that_is_down_is_retried_within_the_budget() -> None:
    server = PostgresServer()  # never started
    started = time.monotonic()
    reading, poller = await poll(source(server, "jobs"), budget=1.0,
                                 retry=RetryPolicy(request_timeout=0.5, first_delay=0.1, max_delay=0.4))
    assert time.monotonic() - started <= 1.2
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("ConnectionFailed", True)
    assert poller.attempts >= 3
    assert f"gave up after {poller.attempts} attempts" in reading.error.message


async def test_polls_reuse_one_connection_and_survive_it_being_killed(
    postgres_server: PostgresServer, jobs: str
) -> None:
    async with http_client() as http:
        poller = SqlTablePoller(source(postgres_server, jobs), SourceContext(http=http, secrets=secrets()),
                                retry=FAST)
        try:
            assert (await poller.poll(5.0)).count == 10
            assert (await poller.poll(5.0)).count == 10
            conn = await admin(postgres_server)
            try:
                killed = await conn.fetchval("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                             "WHERE usename = 'scaler' AND application_name = 'queuescale'")
            finally:
                await conn.close()
            assert killed == 1  # one connection for both polls
            await asyncio.sleep(0.1)
            assert (await poller.poll(5.0)).count == 10  # reconnected within the poll
        finally:
            await poller.aclose()


async def test_without_the_driver_a_poll_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    reading, _ = await poll(SqlTableSource(type="sql-table", table="jobs", host="h", database="d", user="u"))
    assert reading.error is not None
    assert (reading.error.code, reading.error.retryable) == ("DriverNotInstalled", False)
    assert "pip install 'queuescale[postgres]'" in reading.error.message


async def test_no_password_or_dsn_in_readings_reprs_or_logs(
    postgres_server: PostgresServer, jobs: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    dsn = postgres_server.dsn("scaler", PG_SCALER_PASSWORD)
    dsn_ref = SqlTableSource(type="sql-table", table=jobs, dsn_secret_ref=SecretKeyRef("dsn", "value"))
    cases = [
        (source(postgres_server, jobs), secrets("x" + PG_SCALER_PASSWORD)),
        (dsn_ref, secrets(dsn=dsn.replace(PG_SCALER_PASSWORD, "x" + PG_SCALER_PASSWORD))),
        (dsn_ref, secrets(dsn=dsn.replace("postgresql", "pgsql"))),
        (dsn_ref, secrets(dsn=dsn.replace(str(postgres_server.port), "9"))),
        (source(postgres_server, "missing"), secrets()),
    ]
    texts: list[str] = []
    for spec, values in cases:
        reading, poller = await poll(spec, values, budget=1.0)
        assert reading.error is not None
        texts += [repr(reading), repr(poller), repr(spec), reading.error.message]
    texts += [r.getMessage() for r in caplog.records] + [caplog.text]
    for text in texts:
        assert PG_SCALER_PASSWORD not in text
        assert PG_SUPERUSER_PASSWORD not in text
