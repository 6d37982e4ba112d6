"""The rule watch: list, then watch from the list's version; relist on 410 Gone and after errors."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, Protocol

from controller.kube.api import KubeApi, KubeError, rules_path

log = logging.getLogger(__name__)


class RuleHandler(Protocol):
    async def sync(self, scope: str | None, objects: list[dict[str, Any]]) -> None:
        """The complete set of rules in `scope` (a namespace, or None for all): anything else there is gone."""
        ...

    async def upsert(self, obj: dict[str, Any]) -> None: ...

    async def delete(self, obj: dict[str, Any]) -> None: ...


class RuleWatcher:
    """Keeps a handler in step with the QueueScalers of one scope (all namespaces, or one).

    `path` watches another kind the same way (the HorizontalPodAutoscalers of the scope, say): the handler then
    gets those objects."""

    def __init__(
        self,
        api: KubeApi,
        handler: RuleHandler,
        *,
        namespace: str | None = None,
        selector: str | None = None,
        watch_timeout: int = 300,
        max_backoff: float = 30.0,
        path: str | None = None,
    ) -> None:
        self.api = api
        self.path = path or rules_path(namespace)
        self.handler = handler
        self.namespace = namespace
        self.selector = selector
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        self.lists = 0
        self.watches = 0

    def _query(self) -> dict[str, str]:
        return {"labelSelector": self.selector} if self.selector else {}

    async def run(self) -> None:
        """Runs until cancelled."""
        backoff = 0.5
        path = self.path
        while True:
            try:
                listing = await self.api.request_with_retries("GET", path, query=self._query())
                self.lists += 1
                version = str((listing.get("metadata") or {}).get("resourceVersion") or "0")
                items = [i for i in listing.get("items") or [] if isinstance(i, dict)]
                await self.handler.sync(self.namespace, items)
                # Not kept while watching: at 10,000 rules the parsed list is some 100 MB.
                del listing, items
                backoff = 0.5
                await self._watch_from(path, version)
            except KubeError as exc:
                if exc.status != 410:
                    log.warning("rule watch in %s failed (%s %s); relisting in %.1fs",
                                self.namespace or "all namespaces", exc.status, exc.reason, backoff)
                    await asyncio.sleep(backoff * (0.5 + random.random()))
                    backoff = min(self.max_backoff, backoff * 2)

    async def _watch_from(self, path: str, version: str) -> None:
        """Watch until the version expires (410: return to relist); a stream that just ends is resumed."""
        while True:
            self.watches += 1
            async for event in self.api.watch(path, resource_version=version, timeout_seconds=self.watch_timeout,
                                              query=self._query()):
                if event.type == "ERROR":
                    code = event.object.get("code")
                    log.info("rule watch ended with %s %s; relisting", code, event.object.get("reason"))
                    return
                meta = event.object.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                if event.type == "BOOKMARK":
                    continue
                if event.type in ("ADDED", "MODIFIED"):
                    await self.handler.upsert(event.object)
                elif event.type == "DELETED":
                    await self.handler.delete(event.object)
