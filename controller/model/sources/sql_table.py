"""The sql-table source's fields: a table or a SELECT that counts the waiting rows."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from controller.model.fields import Fields, SecretKeyRef, format_duration
from controller.model.sources.base import SourceSpec

TYPE = "sql-table"


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_$]{0,62}"


_TABLE = rf"{_IDENTIFIER}(\.{_IDENTIFIER})?"


_HOST = r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]"


MAX_STATEMENT_TIMEOUT = 60.0


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
    ssl_mode: str = "prefer"
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


def parse(f: Fields, weight: float) -> SqlTableSource:
    engine = f.choice("engine", ("postgresql",), "postgresql")
    table = f.optional_string("table", pattern=_TABLE, max_length=127,
                              pattern_help="must be a table name, optionally schema-qualified (letters, digits, _)")
    due = f.optional_string("dueColumn", pattern=_IDENTIFIER, pattern_help="must be a column name")
    claim = f.optional_string("claimColumn", pattern=_IDENTIFIER, pattern_help="must be a column name")
    unclaimed = f.optional_string("unclaimedValue", max_length=256)
    where = f.optional_string("where", max_length=1024)
    query = f.optional_string("query", max_length=4096)
    if where is not None and (problem := _where_problem(where)):
        f.error("where", problem)
    if query is not None and (problem := select_problem(query)):
        f.error("query", problem)
    if table is None and query is None:
        f.error("", "must set table or query")
    elif table is not None and query is not None:
        f.error("query", "cannot be combined with table: describe the rows, or give the whole query")
    if query is not None:
        for name in ("dueColumn", "claimColumn", "unclaimedValue", "where"):
            if f.has(name):
                f.error(name, "applies only with table (write it into query)")
    if unclaimed is not None and claim is None:
        f.error("unclaimedValue", "applies only with claimColumn")

    host = f.optional_string("host", pattern=_HOST, pattern_help="must be a host name or IP address", max_length=253)
    port = f.integer("port", 5432, minimum=1, maximum=65535)
    database = f.optional_string("database", max_length=63)
    user = f.optional_string("user", max_length=63)
    password = f.secret_ref("passwordSecretRef")
    dsn = f.secret_ref("dsnSecretRef")
    ssl_mode = f.choice("sslMode", SSL_MODES, "prefer")
    statement_timeout = f.duration("statementTimeout", 5.0, minimum=0.001)
    if statement_timeout > MAX_STATEMENT_TIMEOUT:
        f.error("statementTimeout", f"must be at most {format_duration(MAX_STATEMENT_TIMEOUT)}, got "
                f"{format_duration(statement_timeout)}")
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
        type=TYPE, weight=weight, engine=engine,  # type: ignore[arg-type]
        table=table, due_column=due, claim_column=claim, unclaimed_value=unclaimed, where=where, query=query,
        host=host, port=port, database=database, user=user, password_secret_ref=password, dsn_secret_ref=dsn,
        ssl_mode=ssl_mode, statement_timeout=statement_timeout,
    )
