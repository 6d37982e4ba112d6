"""`queuescale check` in a subprocess for the redis-list and sql-table kinds, against their real servers."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import asyncpg

from tests.commandline import rule_file, run_check, write
from tests.servers import PG_SUPERUSER_PASSWORD, REDIS_PASSWORD, PostgresServer, RedisServer


def test_check_counts_a_redis_list_and_a_stream(redis_server: RedisServer, tmp_path: Path) -> None:
    jobs, events = f"jobs:{uuid.uuid4().hex[:8]}", f"events:{uuid.uuid4().hex[:8]}"
    redis_server.cli("RPUSH", jobs, *[str(i) for i in range(12)])
    redis_server.cli("XGROUP", "CREATE", events, "workers", "$", "MKSTREAM")
    for i in range(3):
        redis_server.cli("XADD", events, "*", "n", str(i))
    redis_server.cli("XREADGROUP", "GROUP", "workers", "w", "COUNT", "2", "STREAMS", events, ">")
    sources = f"""    - {{type: redis-list, listName: "{jobs}", host: 127.0.0.1, port: {redis_server.port},
        passwordSecretRef: {{name: redis, key: password}}}}
    - {{type: redis-list, streamName: "{events}", consumerGroup: workers, urlSecretRef: {{name: redis, key: url}}}}
"""
    rules = write(tmp_path, "rule.yaml", rule_file("thumbs", sources))
    secrets = write(tmp_path, "secrets.yaml", f"""
apiVersion: v1
kind: Secret
metadata: {{name: redis, namespace: shop}}
stringData: {{password: "{REDIS_PASSWORD}", url: "{redis_server.url}"}}
""")

    done = run_check(rules, "--secrets", secrets, "--json")

    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["sources"] == [
        {"type": "redis-list", "queue": jobs, "count": 12, "error": None},
        {"type": "redis-list", "queue": f"{events}/workers", "count": 2, "error": None},
    ]
    assert result["count"] == 14
    assert result["decision"]["desired"] == 3  # 14 at 5 per replica
    assert REDIS_PASSWORD not in done.stdout + done.stderr


def test_check_reports_a_wrong_redis_password_with_its_code(redis_server: RedisServer, tmp_path: Path) -> None:
    sources = f"""    - {{type: redis-list, listName: jobs, host: 127.0.0.1, port: {redis_server.port},
        passwordSecretRef: {{name: redis, key: password}}}}
"""
    rules = write(tmp_path, "rule.yaml", rule_file("thumbs", sources))
    done = run_check(rules, env={"QUEUESCALE_SECRET_REDIS_PASSWORD": "wrong-" + REDIS_PASSWORD})
    assert done.returncode == 1
    assert "redis-list jobs: error AuthenticationFailed: Redis at 127.0.0.1:" in done.stdout
    assert REDIS_PASSWORD not in done.stdout + done.stderr


async def test_check_counts_due_unclaimed_rows_with_their_age(postgres_server: PostgresServer, tmp_path: Path) -> None:
    table = f"jobs_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(postgres_server.dsn())
    try:
        await conn.execute(f"""
            CREATE TABLE {table} (id serial, run_at timestamptz NOT NULL, status text NOT NULL);
            INSERT INTO {table} (run_at, status) SELECT now() - interval '90 seconds', 'pending'
                FROM generate_series(1, 8);
            INSERT INTO {table} (run_at, status) SELECT now() - interval '1 hour', 'running'
                FROM generate_series(1, 3);""")
    finally:
        await conn.close()
    sources = f"""    - type: sql-table
      table: {table}
      dueColumn: run_at
      claimColumn: status
      unclaimedValue: pending
      host: 127.0.0.1
      port: {postgres_server.port}
      database: postgres
      user: postgres
      sslMode: disable
      passwordSecretRef: {{name: shop-db, key: password}}
"""
    rules = write(tmp_path, "rule.yaml", rule_file("reports", sources))

    done = run_check(rules, "--json", env={"QUEUESCALE_SECRET_SHOP_DB_PASSWORD": PG_SUPERUSER_PASSWORD})

    assert done.returncode == 0, done.stdout + done.stderr
    source = json.loads(done.stdout)["sources"][0]
    assert (source["queue"], source["count"], source["error"]) == (table, 8, None)
    assert source["note"].startswith("oldest due row waited 1m3")

    done = run_check(rules, env={"QUEUESCALE_SECRET_SHOP_DB_PASSWORD": "nope"})
    assert done.returncode == 1
    assert f"sql-table {table}: error AuthenticationFailed: PostgreSQL at 127.0.0.1:{postgres_server.port}/postgres " \
           "refused user 'postgres'" in done.stdout
    assert PG_SUPERUSER_PASSWORD not in done.stdout + done.stderr
