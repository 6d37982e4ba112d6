"""`queuescale check`: poll every source of every rule in a file once and say what the policy would decide.

Touches no cluster. Secrets come from Kubernetes Secret manifests (the `--secrets` file, or Secrets in the rule
file itself) and, outside Kubernetes, from environment variables named

    QUEUESCALE_SECRET_<NAME>_<KEY>

with the Secret's name and key uppercased and every character other than A-Z and 0-9 turned into `_`
(Secret `orders-queue`, key `connection-string` -> `QUEUESCALE_SECRET_ORDERS_QUEUE_CONNECTION_STRING`).
A manifest wins over the environment when both give the same key.

Output: per rule, each source's count or error, the aggregated count, and the decision for `--current-replicas`.
With `-o json` (or `--json`), one JSON object per rule, one per line (JSON Lines): a file with one rule prints one
object; `-o yaml` the same objects as YAML documents; `-o name` one `queuescaler.queuescale.io/NAME` per rule;
`-o wide` the table with each rule's replica bounds and polling interval. Results go to stdout, errors that keep a
rule from being checked (an invalid rule file, an unreadable secrets file) to stderr.
Exit status: 0 when every source answered, 1 otherwise (or when the rule file is not valid).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TextIO

import yaml

from controller import kills
from controller.model.loading import load_files, read_input, shown_path
from controller.model.readings import Observation, ScalingMemory, SourceReading
from controller.model.rule import API_GROUP, KIND, QueueScaler
from controller.model.secrets import SecretUnavailable
from controller.model.textfmt import duration, plural
from controller.net.http import Fetch, polling_client
from controller.policy import (
    Decision,
    cold_start_condition,
    decide,
    readies_bursts,
    releases_when_quiet,
    scale_down_delay_why,
    scale_to_zero_delay,
    sizing,
    stopped_jobs_miss,
)
from controller.sources import build_source
from controller.sources.base import SourceContext, guarded_poll

ENV_PREFIX = "QUEUESCALE_SECRET_"
REQUEST_TIMEOUT = 10.0


class CheckInputError(Exception):
    """A secrets file that cannot be used; the message names the file and the problem, never a value."""


def secret_env_name(name: str, key: str) -> str:
    """`QUEUESCALE_SECRET_<NAME>_<KEY>`: uppercased, every non-alphanumeric as `_`."""
    return ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", f"{name}_{key}".upper())


# --------------------------------------------------------------------------------------------------------------
# Secrets


@dataclass
class SecretStore:
    """Secrets read from manifests: `(namespace or None, name) -> {key: value}`, plus the environment."""

    secrets: dict[tuple[str | None, str], dict[str, str]] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"SecretStore({len(self.secrets)} secrets)"

    def add_manifests(self, documents: Iterable[tuple[str, Mapping[str, object]]]) -> None:
        """Every `kind: Secret` among `(file, document)`; other kinds are ignored. Raises CheckInputError."""
        for file, doc in documents:
            if doc.get("kind") != "Secret":
                continue
            meta = doc.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            if not isinstance(name, str) or not name:
                raise CheckInputError(f"{file}: a Secret has no metadata.name")
            namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
            values: dict[str, str] = {}
            data = doc.get("data") or {}
            string_data = doc.get("stringData") or {}
            if not isinstance(data, Mapping) or not isinstance(string_data, Mapping):
                raise CheckInputError(f"{file}: Secret '{name}': data and stringData must be maps")
            for key, encoded in data.items():
                try:
                    values[str(key)] = base64.b64decode(str(encoded), validate=True).decode("utf-8")
                except (binascii.Error, ValueError):
                    raise CheckInputError(
                        f"{file}: Secret '{name}' data key '{key}' is not Base64 of UTF-8 text "
                        "(use stringData for plain text)"
                    ) from None
            for key, text in string_data.items():  # as in Kubernetes, stringData wins over data
                values[str(key)] = str(text)
            self.secrets[(namespace if isinstance(namespace, str) else None, name)] = values

    def resolver(self, namespace: str) -> NamespaceSecrets:
        return NamespaceSecrets(self, namespace)


@dataclass(frozen=True)
class NamespaceSecrets:
    """The SecretResolver for one rule: its namespace's Secrets (or ones with no namespace), then the env."""

    store: SecretStore
    namespace: str

    def __repr__(self) -> str:
        return f"NamespaceSecrets(namespace={self.namespace!r})"

    async def __call__(self, name: str, key: str) -> str:
        values = self.store.secrets.get((self.namespace, name)) or self.store.secrets.get((None, name))
        if values is not None and key in values:
            return values[key]
        env_name = secret_env_name(name, key)
        if env_name in self.store.environ:
            return self.store.environ[env_name]
        if values is not None:
            raise SecretUnavailable(
                "KeyNotFound",
                f"Secret '{name}' has no key '{key}' (nor is {env_name} set)",
            )
        raise SecretUnavailable(
            "SecretNotFound",
            f"Secret '{name}' not found in namespace '{self.namespace}': pass its manifest with --secrets or set "
            f"{env_name}",
        )


def load_secrets(path: str) -> list[tuple[str, Mapping[str, object]]]:
    """The documents of a secrets file (`-`: standard input); raises CheckInputError for a file that is not YAML
    objects."""
    try:
        text = read_input(path)
    except OSError as exc:
        raise CheckInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CheckInputError(f"{path}: cannot read: not UTF-8 text") from None
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        raise CheckInputError(f"{path}: invalid YAML") from None  # the parser's excerpt could quote a secret
    documents = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise CheckInputError(f"{path}: document {index + 1} is not an object")
        documents.append((path, doc))
    return documents


# --------------------------------------------------------------------------------------------------------------
# Polling and deciding


@dataclass(frozen=True)
class RuleCheck:
    """What `check` found for one rule."""

    rule: QueueScaler
    readings: tuple[SourceReading, ...]
    decision: Decision

    @property
    def answered(self) -> bool:
        return all(r.error is None for r in self.readings)

    def to_json(self) -> dict[str, object]:
        return {
            "rule": self.rule.key,
            "sources": [
                {
                    "type": spec.type,
                    "queue": spec.queue_label,
                    "count": reading.count,
                    "error": None if reading.error is None
                    else {"code": reading.error.code, "message": reading.error.message},
                    **({"note": reading.note} if reading.note else {}),
                }
                for spec, reading in zip(self.rule.spec.sources, self.readings, strict=True)
            ],
            "count": _number(self.decision.count),
            "decision": {
                "desired": self.decision.desired,
                "reason": str(self.decision.reason),
                "message": self.decision.message,
            },
            **({"coldStart": {"fits": o[0], "reason": o[1], "message": o[2]}}
               if (o := self.cold_start) is not None else {}),
            "release": dict(zip(("scaleDownDelaySeconds", "why", "scaleToZeroDelaySeconds"), self.release,
                                strict=True)),
            "readiesRecurringBursts": readies_bursts(self.rule.spec),
        }

    @property
    def cold_start(self) -> tuple[bool, str, str] | None:
        """The rule's ColdStart condition as the operator would write it (start-up as stated: nothing measured)."""
        return cold_start_condition(self.rule.spec, None, self.decision.bounds.minimum)

    @property
    def release(self) -> tuple[float, str, float | None]:
        """When capacity goes, as the operator would derive it (start-up as stated: nothing measured): the
        scale-down delay, why, and the scale-to-zero delay (None when minReplicas keeps replicas)."""
        spec = self.rule.spec
        size = sizing(spec)
        delay, why = scale_down_delay_why(spec, size)
        if releases_when_quiet(spec, size):
            why += ("; a burst's capacity goes sooner, at a poll where the replicas removed hold at most one message "
                    "or no more is in flight than the hour's mean")
        if spec.policy.on_scale_in == "kill" and stopped_jobs_miss(spec, size):
            # A ReplicaSet removes pods without knowing which are busy: holding capacity for a job protects only
            # the jobs running when the need fell (docs/benchmarks.md, Kills counted at their share).
            held = ("the jobs the least busy pods hold (inFlight)" if spec.in_flight is not None
                    else "its share of the jobs in flight")
            why += (f"; pods killed on scale-in: each replica released still stops {held}, "
                    "each a miss of the objective (workers that drain, onScaleIn: drain with a grace period longer "
                    "than a job, stop none)")
        if kills.counts_stops(spec) and size.throughput is not None:
            why += (f"; pods killed on scale-in: where the last hour's scale-ins with the release at hand stop over "
                    f"{kills.STOP_BUDGET:.1%} of the messages completed, a release waits for a poll with at most the "
                    f"hour's mean in flight where it stops no more than an hour's budget, and keeps the replicas "
                    f"that hold that mean {kills.FLOOR_QUANTILE:.0%} of the time")
        return delay, why, scale_to_zero_delay(spec) if spec.min_replicas == 0 else None

    def lines(self, wide: bool = False) -> list[str]:
        out = [f"{self.rule.key}:"]
        if wide:
            rule_spec = self.rule.spec
            out.append(f"  replicas: {rule_spec.min_replicas} to {rule_spec.max_replicas}, polled every "
                       f"{duration(rule_spec.polling_interval)}")
            delay, why, to_zero = self.release
            out.append(f"  releases capacity unneeded for {duration(delay)} ({why})"
                       + ("" if to_zero is None else f"; goes to zero after {duration(to_zero)} inactive"))
            if readies_bursts(rule_spec):
                out.append("  readies replicas before a burst seen three times in a row at one period (a burst on "
                           "idle capacity misses the objective; recurringBursts: ignore turns it off)")
        for spec, reading in zip(self.rule.spec.sources, self.readings, strict=True):
            what = f"  {spec.type} {spec.queue_label}: "
            if reading.error is not None:
                out.append(f"{what}error {reading.error.code}: {reading.error.message}")
            else:
                out.append(f"{what}{reading.count}{f' ({reading.note})' if reading.note else ''}")
        count = _number(self.decision.count)
        out.append(f"  count: {'unknown' if count is None else count}")
        decision = self.decision
        out.append(
            f"  decision: {decision.current} -> {plural(decision.desired, 'replica')} ({decision.reason}): "
            f"{decision.message}"
        )
        if (outlook := self.cold_start) is not None:
            out.append(f"  cold start: {outlook[1]}: {outlook[2]}")
        return out


def _number(value: float | None) -> float | int | None:
    if value is None:
        return None
    return int(value) if float(value).is_integer() else value


async def check_rule(rule: QueueScaler, store: SecretStore, http: Fetch, current: int) -> RuleCheck:
    context = SourceContext(http=http, secrets=store.resolver(rule.namespace), namespace=rule.namespace)
    sources = [build_source(spec, context) for spec in rule.spec.sources]
    started = time.time()
    try:
        readings = await asyncio.gather(*(guarded_poll(s, rule.spec.polling_interval) for s in sources))
    finally:
        for source in sources:
            await source.aclose()
    observation = Observation(time=started, readings=tuple(readings))
    decision = decide(rule.spec, observation, [], current, ScalingMemory(), time.time(), paused=rule.paused)
    return RuleCheck(rule, tuple(readings), decision)


async def check_rules(rules: Iterable[QueueScaler], store: SecretStore, current: int) -> list[RuleCheck]:
    async with polling_client(timeout=REQUEST_TIMEOUT) as http:
        return [await check_rule(rule, store, http, current) for rule in rules]


def run(
    rule_file: str,
    *,
    secrets_file: str | None,
    current_replicas: int,
    output: str,
    environ: Mapping[str, str],
    out: TextIO,
    err: TextIO,
) -> int:
    """The whole command; returns the exit status. `output`: table, wide, json, yaml or name."""
    loaded = load_files([rule_file])
    if not loaded.ok:
        for line in loaded.error_lines():
            print(line, file=err)
        return 1
    rules = [r.rule for r in loaded.rules if r.rule is not None]
    if not rules:
        print(f"{shown_path(rule_file)}: no QueueScaler in this file", file=err)
        return 1
    store = SecretStore(environ=environ)
    try:
        store.add_manifests(loaded.documents)  # Secrets may sit next to the rules
        if secrets_file is not None:
            store.add_manifests(load_secrets(secrets_file))
    except CheckInputError as exc:
        print(str(exc), file=err)
        return 1
    results = asyncio.run(check_rules(rules, store, current_replicas))
    for index, result in enumerate(results):
        if output == "json":
            print(json.dumps(result.to_json()), file=out)
        elif output == "yaml":
            print(("---\n" if index else "") + yaml.safe_dump(result.to_json(), sort_keys=False), end="", file=out)
        elif output == "name":
            print(f"{KIND.lower()}.{API_GROUP}/{result.rule.name}", file=out)
        else:
            print("\n".join(result.lines(wide=output == "wide")), file=out)
    failed = sum(1 for r in results if not r.answered)
    if failed:
        print(f"{failed} of {plural(len(results), 'rule')} had a source that did not answer", file=err)
        return 1
    return 0
