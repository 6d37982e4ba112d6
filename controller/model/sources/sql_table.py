"""The sql-table source's fields: a table or a SELECT that counts the waiting rows."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal, get_args

from controller.model.fields import Fields, SecretKeyRef
from controller.model.schema import Choice, Duration, KindFields, Rule, SecretRef, Text
from controller.model.sources.base import PASSWORD, SERVER_HOST, SERVER_PORT, SourceKind, SourceSpec

TYPE = "sql-table"


SslMode = Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]
SSL_MODES: tuple[SslMode, ...] = get_args(SslMode)


_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_$]{0,62}"


@dataclass(frozen=True, kw_only=True)
class SqlTableSource(SourceSpec):
    """One job table (or one custom count query) and how to reach its database."""

    engine: Literal["postgresql"] = "postgresql"
    table: str | None = None
    due_column: str | None = None
    claim_column: str | None = None
    unclaimed_value: str | None = None  # None: a row is unclaimed while claim_column IS NULL
    where: str | None = None
    query: str | None = None
    host: str | None = None
    port: int = 5432
    database: str | None = None
    user: str | None = None
    password_secret_ref: SecretKeyRef | None = None
    dsn_secret_ref: SecretKeyRef | None = None
    ssl_mode: SslMode = "prefer"
    statement_timeout: float = 5.0

    @property
    def queue_label(self) -> str:
        return self.table or "query"


def _strip_sql(text: str) -> str | None:
    """`text` with string literals, quoted identifiers and comments blanked; None when one is not closed."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "'" or c == '"':
            end = i + 1
            while True:
                end = text.find(c, end)
                if end < 0:
                    return None
                if end + 1 < n and text[end + 1] == c:  # '' or "" inside
                    end += 2
                    continue
                break
            out.append(" x ")
            i = end + 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return None
            out.append(" ")
            i = end + 2
        elif c == "$" and (match := re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$", text[i:])):
            tag = match.group(0)
            end = text.find(tag, i + len(tag))
            if end < 0:
                return None
            out.append(" x ")
            i = end + len(tag)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def select_problem(query: str) -> str | None:
    """Why `query` is not a single read-only SELECT, or None when it is one."""
    stripped = _strip_sql(query)
    if stripped is None:
        return "has an unclosed quote or comment"
    body = stripped.strip()
    if body.endswith(";"):
        body = body[:-1].rstrip()
    if ";" in body:
        return "must be a single statement (no ';' but at the end)"
    if not re.match(r"(?is)select\b", body):
        return "must be a SELECT"
    if re.search(r"(?is)\bfor\s+(no\s+key\s+)?(update|share|key\s+share)\b", body):
        return "must not lock rows (FOR UPDATE / FOR SHARE): the workers' claims would wait for it"
    if re.search(r"(?is)\binto\b", body):
        return "must not SELECT ... INTO"
    return None


def _where_problem(condition: str) -> str | None:
    stripped = _strip_sql(condition)
    if stripped is None:
        return "has an unclosed quote or comment"
    if ";" in stripped or "--" in condition or "/*" in condition:
        return "must be one condition: no ';' or comments"
    return None


ENGINE: Choice[Literal["postgresql"]] = Choice("engine", choices=("postgresql",), default=SqlTableSource.engine,
                                               doc="the database engine")
TABLE = Text("table", max_length=127, pattern=rf"{_IDENTIFIER}(\.{_IDENTIFIER})?",
             pattern_help="must be a table name, optionally schema-qualified (letters, digits, _)",
             note="one of `table`, `query`; `table` or `schema.table`", doc="the job table")
DUE_COLUMN = Text("dueColumn", max_length=63, pattern=_IDENTIFIER, pattern_help="must be a column name",
                  note="a column name",
                  doc="rows count once this timestamp is `<= now()`; gives the oldest due row's age")
CLAIM_COLUMN = replace(DUE_COLUMN, name="claimColumn", doc="the column a worker sets when it claims a row")
UNCLAIMED_VALUE = Text("unclaimedValue", max_length=256, note="with `claimColumn`",
                       doc="the claim column's value (as text) for an unclaimed row; unset: unclaimed means NULL")
WHERE = Text("where", max_length=1024, note="one SQL condition, no `;` or comments",
             doc="ANDed to the count's conditions")
QUERY = Text("query", max_length=4096, note="a single `SELECT`",
             doc="a whole custom count: first column the count, optional second the oldest age in seconds")
PORT = replace(SERVER_PORT, default=SqlTableSource.port)
DATABASE = Text("database", max_length=63, note="required with `host`", doc="the database")
USER = Text("user", max_length=63, note="required with `host`", doc="the login role; not a secret")
DSN = SecretRef("dsnSecretRef", note="instead of `host`",
                doc="a Secret key holding `postgresql://user:password@host:port/db?sslmode=...`")
SSL_MODE: Choice[SslMode] = Choice("sslMode", choices=SSL_MODES, default=SqlTableSource.ssl_mode, doc="as libpq's")
STATEMENT_TIMEOUT = Duration("statementTimeout", default=SqlTableSource.statement_timeout, minimum=0.001,
                             maximum=60.0,
                             doc="the count's statement timeout (never past the poll's budget)")

DECLARED = KindFields(TYPE, fields=(
    ENGINE, TABLE, DUE_COLUMN, CLAIM_COLUMN, UNCLAIMED_VALUE, WHERE, QUERY, SERVER_HOST, PORT, DATABASE, USER,
    PASSWORD, DSN, SSL_MODE, STATEMENT_TIMEOUT,
), rules=(
    Rule("self.type != 'sql-table' || has(self.table) != has(self.query)", "set exactly one of table or query"),
    Rule("self.type != 'sql-table' || has(self.host) != has(self.dsnSecretRef)",
         "set exactly one of host or dsnSecretRef"),
))


def parse(f: Fields, weight: float) -> SqlTableSource:
    engine = f.choice(ENGINE)
    table = f.optional_string(TABLE)
    due = f.optional_string(DUE_COLUMN)
    claim = f.optional_string(CLAIM_COLUMN)
    unclaimed = f.optional_string(UNCLAIMED_VALUE)
    where = f.optional_string(WHERE)
    query = f.optional_string(QUERY)
    if where is not None and (problem := _where_problem(where)):
        f.error("where", problem)
    if query is not None and (problem := select_problem(query)):
        f.error("query", problem)
    f.one_of(("table", table), ("query", query), "describe the rows, or give the whole query")
    f.only_with(("dueColumn", "claimColumn", "unclaimedValue", "where"), query is None,
                "table (write it into query)")
    f.only_with(("unclaimedValue",), claim is not None, "claimColumn")

    host = f.optional_string(SERVER_HOST)
    port = f.integer(PORT)
    database = f.optional_string(DATABASE)
    user = f.optional_string(USER)
    password = f.secret_ref(PASSWORD)
    dsn = f.secret_ref(DSN)
    ssl_mode = f.choice(SSL_MODE)
    statement_timeout = f.duration(STATEMENT_TIMEOUT)
    if dsn is None:
        if host is None:
            f.error("", "must set host or dsnSecretRef")
        else:
            for name, value in (("database", database), ("user", user)):
                if value is None:
                    f.error(name, "is required with host")
    else:
        for name in ("host", "port", "database", "user", "sslMode"):
            if f.has(name):
                f.error(name, "comes from the DSN when dsnSecretRef is set")

    return SqlTableSource(
        type=TYPE, weight=weight, engine=engine,
        table=table, due_column=due, claim_column=claim, unclaimed_value=unclaimed, where=where, query=query,
        host=host, port=port, database=database, user=user, password_secret_ref=password, dsn_secret_ref=dsn,
        ssl_mode=ssl_mode, statement_timeout=statement_timeout,
    )


KIND = SourceKind(DECLARED, parse)
