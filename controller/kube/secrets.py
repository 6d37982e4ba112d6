"""Secrets a rule names, read from the rule's namespace only, cached briefly so key rotation takes effect.

Who may create a QueueScaler is not who may read a Secret: a rule author could otherwise name any Secret of the
namespace in any source field and have the operator send it to a host of their choosing. So, by default, a
Secret is used for a rule only when the Secret itself says so, in the annotation `queuescale.io/allowed-rules`
(rule names separated by commas, or `*`), which only someone who may change the Secret can write. The check is
made on every resolution, against the copy cached for at most `ttl` seconds. `access="namespace"` restores the
older behaviour (any rule may use any Secret of its namespace) for clusters that want it.

A rule allowed to use a Secret can still name it in any field of any source kind: the Azure connection string
its owner meant for an azure-queue source (which sends requests only to the endpoint the string names) could be
sent as a rabbitmq password to any `managementURL`. So the owner may also say which source kinds may use it, in
`queuescale.io/allowed-sources` (`azure-queue`, or several separated by commas); that holds in both modes.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable
from typing import Any

from controller.kube.api import KubeApi, core_path
from controller.model.secrets import SECRET_ACCESS_MODES, SecretAccess, SecretResolver, SecretUnavailable

# (namespace, name) -> the Secret object (its `data` of base64 values and its `metadata`); raises an exception
# with .status (404, 403, ...) like KubeError
SecretReader = Callable[[str, str], Awaitable[dict[str, Any]]]



def secret_reader(api: KubeApi) -> SecretReader:
    """Reads one Secret through the API server: a GET by name (the operator never lists Secrets)."""

    async def read(namespace: str, name: str) -> dict[str, Any]:
        return await api.request("GET", core_path("secrets", namespace, name))

    return read


# An annotation, not a label: its value is a list (commas, `*`) and may be longer than a label's 63 characters,
# and nothing needs to select Secrets by it (the operator reads Secrets by name, never lists them).
ALLOWED_RULES_ANNOTATION = "queuescale.io/allowed-rules"
ALLOWED_SOURCES_ANNOTATION = "queuescale.io/allowed-sources"


class _Entry:
    """One Secret as cached: when it was read, its data, the rules and the source kinds its owner allows (None: no
    such annotation)."""

    __slots__ = ("allowed", "data", "read_at", "sources")

    def __init__(self, read_at: float, data: dict[str, Any], allowed: frozenset[str] | None,
                 sources: frozenset[str] | None) -> None:
        self.read_at = read_at
        self.data = data
        self.allowed = allowed
        self.sources = sources

    def __repr__(self) -> str:
        return f"_Entry(keys={sorted(self.data)!r}, allowed={self.allowed!r}, sources={self.sources!r})"


def _listed(secret: dict[str, Any], annotation: str) -> frozenset[str] | None:
    """The comma-separated names in one of a Secret's annotations; None when it has no such annotation."""
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(annotation) if isinstance(annotations, dict) else None
    if not isinstance(value, str):
        return None
    return frozenset(name.strip() for name in value.split(",") if name.strip())


def allowed_rules(secret: dict[str, Any]) -> frozenset[str] | None:
    """The rule names (or `*`) a Secret's annotation allows; None when it has no such annotation."""
    return _listed(secret, ALLOWED_RULES_ANNOTATION)


def allow_command(namespace: str, secret: str, rule: str, allowed: frozenset[str] | None) -> str:
    """The kubectl command with which a Secret's owner lets `rule` use it (keeping the rules already allowed)."""
    names = sorted((allowed or frozenset()) | {rule})
    overwrite = " --overwrite" if allowed is not None else ""
    return f"kubectl annotate secret {secret} -n {namespace}{overwrite} {ALLOWED_RULES_ANNOTATION}={','.join(names)}"


class SecretCache:
    """get(namespace, name, key, rule) with a short TTL; `invalidate` forces a re-read (e.g. after a 403 from Azure).

    Only single Secrets are read (get), never listed: the operator needs no cluster-wide list of Secrets.
    """

    def __init__(self, read: SecretReader, *, ttl: float = 30.0, now: Callable[[], float] = time.monotonic,
                 access: SecretAccess = "annotated") -> None:
        if access not in SECRET_ACCESS_MODES:
            raise ValueError(f"secret access must be one of {', '.join(SECRET_ACCESS_MODES)}, got {access!r}")
        self._read = read
        self.ttl = ttl
        self.access = access
        self._now = now
        self._cache: dict[tuple[str, str], _Entry] = {}
        # One read in flight per Secret: a thousand rules sharing a Secret that expire together read it once.
        self._inflight: dict[tuple[str, str], asyncio.Future[_Entry]] = {}
        self.reads = 0

    def resolver(self, namespace: str, rule: str, source_type: str | None = None) -> SecretResolver:
        """What rule `rule` of `namespace` may read, for a source of kind `source_type`: its namespace's Secrets
        that allow it (and that kind)."""
        return _Resolver(self, namespace, rule, source_type)

    def invalidate(self, namespace: str, name: str | None = None) -> None:
        for cached in [k for k in self._cache if k[0] == namespace and (name is None or k[1] == name)]:
            del self._cache[cached]

    async def get(self, namespace: str, name: str, key: str, rule: str, source_type: str | None = None) -> str:
        """The text of one key, for `rule` (a source of kind `source_type`); raises SecretUnavailable
        (SecretNotAllowed, SecretNotFound, ...)."""
        entry = self._cache.get((namespace, name))
        if entry is None or self._now() - entry.read_at > self.ttl:
            entry = await self._fetch(namespace, name)
        if self.access == "annotated" and not (entry.allowed and ("*" in entry.allowed or rule in entry.allowed)):
            raise SecretUnavailable(
                "SecretNotAllowed",
                f"Secret '{name}' in namespace '{namespace}' does not allow rule '{rule}' to use it: its annotation "
                f"{ALLOWED_RULES_ANNOTATION} must name the rule (or be \"*\"); whoever may change the Secret can "
                f"allow it with: {allow_command(namespace, name, rule, entry.allowed)}",
            )
        if entry.sources is not None and source_type is not None and source_type not in entry.sources:
            kinds = ",".join(sorted(entry.sources)) or "no"
            raise SecretUnavailable(
                "SecretNotAllowed",
                f"Secret '{name}' in namespace '{namespace}' is for {kinds} sources only (annotation "
                f"{ALLOWED_SOURCES_ANNOTATION}), not {source_type}: name another Secret, or, if its owner means it "
                f"for {source_type} too: kubectl annotate secret {name} -n {namespace} --overwrite "
                f"{ALLOWED_SOURCES_ANNOTATION}={','.join(sorted(entry.sources | {source_type}))}",
            )
        data = entry.data
        if key not in data or data[key] is None:
            keys = ", ".join(sorted(data)) or "none"
            raise SecretUnavailable(
                "SecretKeyNotFound", f"Secret '{name}' in namespace '{namespace}' has no key '{key}' (keys: {keys})"
            )
        try:
            return base64.b64decode(str(data[key]), validate=True).decode("utf-8").strip()
        except (ValueError, UnicodeDecodeError):
            raise SecretUnavailable(
                "SecretKeyInvalid", f"Secret '{name}' key '{key}' in namespace '{namespace}' is not UTF-8 text"
            ) from None

    async def _fetch(self, namespace: str, name: str) -> _Entry:
        """Read the Secret, or wait for the read already in flight; failures are not cached."""
        key = (namespace, name)
        pending = self._inflight.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._read_and_store(namespace, name))
            self._inflight[key] = pending
            pending.add_done_callback(lambda done: self._forget_inflight(key, done))
        try:
            return await asyncio.shield(pending)
        except SecretUnavailable:
            raise
        except Exception as exc:
            raise _unavailable(exc, namespace, name) from None

    def _forget_inflight(self, key: tuple[str, str], done: asyncio.Future[Any]) -> None:
        if self._inflight.get(key) is done:
            del self._inflight[key]
        if not done.cancelled():
            done.exception()  # retrieved: a failure nobody waits for any more is not "never retrieved"

    async def _read_and_store(self, namespace: str, name: str) -> _Entry:
        try:
            secret = await self._read(namespace, name)
        except Exception as exc:
            raise _unavailable(exc, namespace, name) from None
        self.reads += 1
        data = secret.get("data") or {}
        entry = _Entry(self._now(), data if isinstance(data, dict) else {}, allowed_rules(secret),
                       _listed(secret, ALLOWED_SOURCES_ANNOTATION))
        self._cache[(namespace, name)] = entry
        return entry


def _unavailable(exc: Exception, namespace: str, name: str) -> SecretUnavailable:
    status = getattr(exc, "status", None)
    if status == 404:
        return SecretUnavailable("SecretNotFound", f"Secret '{name}' not found in namespace '{namespace}'")
    if status == 403:
        return SecretUnavailable(
            "SecretForbidden", f"the operator may not read Secret '{name}' in namespace '{namespace}' (RBAC)"
        )
    what = f"HTTP {status}" if status else type(exc).__name__
    return SecretUnavailable("SecretUnavailable", f"could not read Secret '{name}' in namespace '{namespace}': {what}")


class _Resolver:
    """A source's view of the cache: Secrets of its rule's namespace that allow the rule and the source's kind. (A
    class made once: a closure per source would cost a class object each, some 2 KB.)"""

    __slots__ = ("cache", "namespace", "rule", "source_type")

    def __init__(self, cache: SecretCache, namespace: str, rule: str, source_type: str | None) -> None:
        self.cache = cache
        self.namespace = namespace
        self.rule = rule
        self.source_type = source_type

    async def __call__(self, name: str, key: str) -> str:
        return await self.cache.get(self.namespace, name, key, self.rule, self.source_type)

    def __repr__(self) -> str:
        return f"SecretResolver(namespace={self.namespace!r}, rule={self.rule!r}, source={self.source_type!r})"
