"""`queuescale check` end to end: a subprocess, a rule file, secrets, and a real Azurite."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from controller.commands.check import secret_env_name
from tests.azurite import ROOT, Azurite
from tests.commandline import rule_file, run_check, write
from tests.helpers import WRONG_KEY, add_traffic, new_queue, unique_queue

# What `check -o wide` says of a rule whose pods are killed on scale-in (controller/kills.py).
ACCOUNT = ("; pods killed on scale-in: where the last hour's scale-ins with the release at hand stop over 0.5% of the "
           "messages completed, a release waits for a poll with at most the hour's mean in flight where it stops no "
           "more than an hour's budget, and keeps the replicas that hold that mean 99% of the time")


def key_source_yaml(azurite: Azurite, queue: str, strategy: str = "approximate") -> str:
    return f"""    - type: azure-queue
      queueName: {queue}
      accountName: {azurite.account}
      endpoint: {azurite.endpoint}
      accountKeySecretRef: {{name: storage, key: account-key}}
      countStrategy: {strategy}
"""


def secrets_yaml(azurite: Azurite, key: str | None = None) -> str:
    encoded = base64.b64encode((key or azurite.key).encode()).decode()
    return f"""
apiVersion: v1
kind: Secret
metadata: {{name: storage, namespace: shop}}
data:
  account-key: {encoded}
---
apiVersion: v1
kind: Secret
metadata: {{name: orders-queue}}
stringData:
  connection-string: "UseDevelopmentStorage=true;QueueEndpoint={azurite.endpoint}"
"""


def test_check_counts_visible_invisible_and_delayed_messages_as_json(azurite: Azurite, tmp_path: Path) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=5, dequeued=3, delayed=2)
    sources = key_source_yaml(azurite, queue.queue_name) + key_source_yaml(azurite, queue.queue_name, "visible")
    rules = write(tmp_path, "rule.yaml", rule_file("orders", sources))
    secrets = write(tmp_path, "secrets.yaml", secrets_yaml(azurite))

    done = run_check(rules, "--secrets", secrets, "--json", "--current-replicas", "1")

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["sources"] == [
        {"type": "azure-queue", "queue": queue.queue_name, "count": 10, "error": None},
        {"type": "azure-queue", "queue": queue.queue_name, "count": 5, "error": None},
    ]
    assert result["count"] == 15
    assert result["decision"]["desired"] == 3  # 15 messages / 5 per replica
    assert result["decision"]["reason"] == "ScaledUp"
    assert "count 15" in result["decision"]["message"]
    assert result["rule"] == "shop/orders"


def test_check_prints_counts_and_the_decision_for_people(azurite: Azurite, tmp_path: Path) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=12)
    rules = write(tmp_path, "rule.yaml", rule_file("orders", key_source_yaml(azurite, queue.queue_name)))
    done = run_check(rules, "--secrets", write(tmp_path, "s.yaml", secrets_yaml(azurite)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"  azure-queue {queue.queue_name}: 12\n" in done.stdout
    assert "  count: 12\n" in done.stdout
    assert "decision: 0 -> 3 replicas (ActivatedFromZero)" in done.stdout


def test_check_says_when_a_cold_start_cannot_meet_the_wait_objective(azurite: Azurite, tmp_path: Path) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=12)
    text = rule_file("orders", key_source_yaml(azurite, queue.queue_name)).replace(
        "policy: {targetPerReplica: 5}", "policy: {targetWaitSeconds: 20, serviceTime: 1s, startupTime: 18s}")
    rules = write(tmp_path, "rule.yaml", text)
    secrets = write(tmp_path, "s.yaml", secrets_yaml(azurite))
    done = run_check(rules, "--secrets", secrets)
    assert done.returncode == 0, done.stdout + done.stderr
    # 5 s poll + 18 s start-up = 23 s: more than the objective (the wait ends when a worker takes the message).
    assert ("  cold start: ColdStartTooSlow: a message that finds no free replica waits for a new one a poll "
            "(5s) and a start-up (18s): 23s, more than targetWaitSeconds 20s") in done.stdout
    as_json = json.loads(run_check(rules, "--secrets", secrets, "--json").stdout)
    assert (as_json["coldStart"]["fits"], as_json["coldStart"]["reason"]) == (False, "ColdStartTooSlow")
    assert as_json["release"] == {"scaleDownDelaySeconds": 120.0, "why": f"the default{ACCOUNT}",
                                  "scaleToZeroDelaySeconds": 300.0}
    assert as_json["readiesRecurringBursts"] is True  # the cold start misses: bursts that recur are readied for
    # -o wide also says when capacity goes: 2 minutes for workers killed on scale-in (onScaleIn unsaid); two 5 s
    # polls for workers that drain, where a cold start fits (the 18 s start-up stated 10 s: 5 + 10 <= 20); the
    # scale to zero keeps its 5 minutes, as the cold start and one job (16 s) do not fit in what the 10 s drain
    # time leaves.
    wide = run_check(rules, "--secrets", secrets, "-o", "wide").stdout
    # Its pods are killed on scale-in (the default): the account of what scale-ins stop is said too.
    assert f"  releases capacity unneeded for 2m (the default{ACCOUNT}); goes to zero after 5m inactive\n" in wide, wide
    assert ("  readies replicas before a burst seen three times in a row at one period (a burst on idle capacity "
            "misses the objective; recurringBursts: ignore turns it off)\n") in wide, wide
    drains = write(tmp_path, "drains.yaml", text.replace("startupTime: 18s}", "startupTime: 10s, onScaleIn: drain}"))
    drained = run_check(drains, "--secrets", secrets, "-o", "wide").stdout
    assert ("  releases capacity unneeded for 10s (two polls: workers drain, and a cold start fits the objective); "
            "goes to zero after 5m inactive\n") in drained
    assert "readies replicas" not in drained  # a burst waits 5 + 10 + 1 <= 20: reacting is enough
    # Killed, with 1 s jobs (shorter than the 5 s poll) and that cold start: a burst's capacity may go sooner.
    killed = write(tmp_path, "killed.yaml", text.replace("startupTime: 18s}", "startupTime: 10s}"))
    assert ("  releases capacity unneeded for 2m (the default; a burst's capacity goes sooner, at a poll where the "
            "replicas removed hold at most one message or no more is in flight than the hour's mean"
            f"{ACCOUNT}); goes to zero") in run_check(killed, "--secrets", secrets, "-o", "wide").stdout
    # Killed, with 15 s jobs against the 10 s the drain time leaves of the objective: held for a job, and told that
    # the holding does not protect the jobs in flight when a replica then goes (a ReplicaSet cannot tell them).
    long_jobs = write(tmp_path, "long.yaml", text.replace("serviceTime: 1s, startupTime: 18s}",
                                                          "serviceTime: 15s, startupTime: 10s}"))
    told = run_check(long_jobs, "--secrets", secrets, "-o", "wide").stdout
    assert ("  releases capacity unneeded for 2m (one serviceTime: a job a scale-in stops would miss the objective; "
            "pods killed on scale-in: each replica released still stops its share of the jobs in flight, each a miss "
            "of the objective (workers that drain, onScaleIn: drain with a grace period longer than a job, stop "
            f"none){ACCOUNT})") in told, told
    # Told the pods' in-flight counts, the ReplicaSet removes the least busy: what they hold is what goes.
    least_busy = write(tmp_path, "least-busy.yaml", text.replace(
        "serviceTime: 1s, startupTime: 18s}", "serviceTime: 15s, startupTime: 10s}\n  inFlight: {port: in-flight}"))
    assert ("pods killed on scale-in: each replica released still stops the jobs the least busy pods hold "
            "(inFlight), each a miss") in run_check(least_busy, "--secrets", secrets, "-o", "wide").stdout
    drained_long = write(tmp_path, "drained-long.yaml", text.replace(
        "serviceTime: 1s, startupTime: 18s}", "serviceTime: 15s, startupTime: 10s, onScaleIn: drain}"))
    assert "pods killed" not in run_check(drained_long, "--secrets", secrets, "-o", "wide").stdout
    # A count-mode rule states no wait: nothing said.
    plain = write(tmp_path, "plain.yaml", rule_file("orders", key_source_yaml(azurite, queue.queue_name)))
    assert "cold start" not in run_check(plain, "--secrets", secrets).stdout


def test_check_reads_a_connection_string_from_the_environment(azurite: Azurite, tmp_path: Path) -> None:
    queue = new_queue(azurite)
    add_traffic(queue, visible=7, delayed=1)
    source = f"""    - type: azure-queue
      queueName: {queue.queue_name}
      connectionSecretRef: {{name: orders-queue, key: connection-string}}
"""
    rules = write(tmp_path, "rule.yaml", rule_file("orders", source))
    env_name = secret_env_name("orders-queue", "connection-string")
    assert env_name == "QUEUESCALE_SECRET_ORDERS_QUEUE_CONNECTION_STRING"
    done = run_check(rules, "--json", env={env_name: azurite.connection_string})
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["sources"][0]["count"] == 8


def test_check_reports_a_wrong_key_and_a_missing_queue_with_their_codes(azurite: Azurite, tmp_path: Path) -> None:
    queue = new_queue(azurite)
    missing = unique_queue()
    wrong_key_rule = rule_file("wrong-key", key_source_yaml(azurite, queue.queue_name))
    missing_rule = rule_file("missing", key_source_yaml(azurite, missing), namespace="other")
    rules = write(tmp_path, "rules.yaml", wrong_key_rule + "---\n" + missing_rule)
    secrets = write(tmp_path, "s.yaml", secrets_yaml(azurite, WRONG_KEY).replace("namespace: shop", "")
                    + "---\n" + secrets_yaml(azurite).replace("namespace: shop", "namespace: other"))
    # Secret 'storage' exists twice: without namespace (wrong key) and in 'other' (right key).

    done = run_check(rules, "--secrets", secrets, "--json")

    assert done.returncode == 1
    first, second = (json.loads(line) for line in done.stdout.strip().splitlines())
    assert first["sources"][0]["count"] is None
    assert first["sources"][0]["error"]["code"] == "AuthenticationFailed"
    assert first["sources"][0]["error"]["message"].startswith(
        "the account key for 'devstoreaccount1' was rejected (AuthenticationFailed): "
        "check the Secret 'storage' key 'account-key'"
    )
    assert first["decision"]["reason"] == "PollFailed"
    assert second["sources"][0]["error"] == {
        "code": "QueueNotFound",
        "message": f"queue '{missing}' not found in account 'devstoreaccount1': create it or fix queueName",
    }
    assert WRONG_KEY not in done.stdout + done.stderr
    assert "2 of 2 rules had a source that did not answer" in done.stderr


def test_check_of_a_bad_rule_file_prints_validate_errors_on_stderr_and_exits_1() -> None:
    done = run_check(str(ROOT / "tests" / "data" / "broken-rules.yaml"))
    assert done.returncode == 1
    assert done.stdout == ""  # nothing was checked: there is no result, only errors
    assert "min-above-max: spec.maxReplicas: must be >= minReplicas (10), got 3" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_check_of_a_missing_file_or_bad_secrets_is_a_clear_error(tmp_path: Path, azurite: Azurite) -> None:
    missing = run_check(str(tmp_path / "nope.yaml"))
    assert missing.returncode == 1
    assert "cannot read" in missing.stderr and missing.stdout == ""

    rules = write(tmp_path, "rule.yaml", rule_file("orders", key_source_yaml(azurite, unique_queue())))
    bad = write(tmp_path, "bad.yaml", "kind: Secret\nmetadata: {name: storage}\ndata: {account-key: '%%%topsecret'}\n")
    done = run_check(rules, "--secrets", bad)
    assert done.returncode == 1
    assert "Secret 'storage' data key 'account-key' is not Base64" in done.stderr
    assert "topsecret" not in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_check_without_the_secret_names_both_ways_to_give_it(azurite: Azurite, tmp_path: Path) -> None:
    rules = write(tmp_path, "rule.yaml", rule_file("orders", key_source_yaml(azurite, unique_queue())))
    done = run_check(rules)
    assert done.returncode == 1
    assert "SecretNotFound" in done.stdout
    assert "QUEUESCALE_SECRET_STORAGE_ACCOUNT_KEY" in done.stdout
