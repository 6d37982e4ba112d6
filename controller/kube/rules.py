"""The rule watch: list, then watch from the list's version; relist on 410 Gone and after errors.

Failures are handled as client-go's Reflector does (staging/src/k8s.io/client-go/tools/cache/reflector.go,
`isWatchErrorRetriable` and the loop around it): when the API server cannot be reached, or answers 429, the watch
is started again from the last version seen, after a back-off; a stream that ends is resumed at once; any other
failure (an HTTP error, an event that cannot be read, a failing handler) relists after a back-off. Whatever fails,
the loop goes on, says so in the log and counts it (`on_error`): a watch that died would leave every rule scaling
on what it last saw, for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import time
from collections.abc import Callable
from typing import Any, Protocol

from controller.kube.api import KubeApi, rules_path
from controller.kube.errors import KubeError, error_from_status

log = logging.getLogger(__name__)

FIRST_BACKOFF = 0.5  # seconds; doubled on each failure in a row, up to max_backoff


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
        on_error: Callable[[str], None] | None = None,
        path: str | None = None,
        resource: str = "QueueScalers",
    ) -> None:
        """`on_error(reason)` is called for every failure the loop recovers from (for a metric)."""
        self.api = api
        self.path = path or rules_path(namespace)
        self.resource = resource  # what the log lines call the watched kind
        self.handler = handler
        self.namespace = namespace
        self.selector = selector
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        self.on_error = on_error or (lambda _: None)
        self.lists = 0
        self.watches = 0
        self._backoff = FIRST_BACKOFF

    @property
    def scope(self) -> str:
        return self.namespace or "all namespaces"

    def _query(self) -> dict[str, str]:
        return {"labelSelector": self.selector} if self.selector else {}

    async def run(self) -> None:
        """Runs until cancelled."""
        path = self.path
        while True:
            try:
                version = await self._list(path)
                await self._watch_from(path, version)
            except Exception as exc:  # never a dead watch; cancellation is not an Exception and ends the loop
                self._failed(exc, "relisting")
                if not isinstance(exc, KubeError):
                    log.debug("rule watch in %s: the failure", self.scope, exc_info=True)
                await self._back_off()

    async def _list(self, path: str) -> str:
        """List the scope and hand the handler the complete set; the list's resourceVersion. (A function of its
        own so that the parsed list, some 100 MB at 10,000 rules, is not kept while watching.)"""
        started = time.monotonic()
        try:
            listing = await self.api.request_with_retries("GET", path, query=self._query())
        except KubeError as exc:
            if exc.status == 404:
                # The kind is not served: its CRD was deleted (on a real server its objects went first, each with
                # a DELETED event, which a dropped watch may have missed) or is not installed yet. Either way no
                # rule exists: none may go on scaling from what was cached.
                await self.handler.sync(self.namespace, [])
            raise
        self.lists += 1
        metadata = listing.get("metadata")
        version = str((metadata if isinstance(metadata, dict) else {}).get("resourceVersion") or "0")
        items = [i for i in listing.get("items") or [] if isinstance(i, dict)]
        listed = time.monotonic()
        await self.handler.sync(self.namespace, items)
        # What a slow start-up (or relist) spent its time on: the list, or handling what it brought.
        log.info("listed %d %s in %s in %.1fs, handled in %.1fs", len(items), self.resource, self.scope,
                 listed - started, time.monotonic() - listed)
        self._backoff = FIRST_BACKOFF
        return version

    async def _watch_from(self, path: str, version: str) -> None:
        """Watch until the version expires (410) or the kind is not served (404): return to relist. A stream that
        just ends is resumed at once; one that broke off, or could not be started (no answer, 429), after a
        back-off; anything else is raised (relist after a back-off)."""
        while True:
            self.watches += 1
            try:
                # Closed on the way out, whatever ends the loop: the stream's connection goes back at once.
                async with contextlib.aclosing(self.api.watch(
                        path, resource_version=version, timeout_seconds=self.watch_timeout,
                        query=self._query())) as events:
                    async for event in events:
                        if event.type == "ERROR":  # the object is a Status
                            raise error_from_status(event.object)
                        meta = event.object.get("metadata") or {}
                        if event.type != "BOOKMARK":
                            self._backoff = FIRST_BACKOFF  # a working watch: a failure starts the back-off anew
                            if event.type in ("ADDED", "MODIFIED"):
                                await self.handler.upsert(event.object)
                            elif event.type == "DELETED":
                                await self.handler.delete(event.object)
                        # Only once handled: a watch started again after a failure sends this event again.
                        version = str(meta.get("resourceVersion") or version)
            except KubeError as exc:
                if exc.status in (404, 410):
                    # Expired: the relist is the way on. Not served: the list says so at once (and is counted).
                    log.info("%s watch in %s ended with %s %s; relisting", self.resource, self.scope, exc.status,
                             exc.reason)
                    return
                if exc.status not in (0, 429):
                    raise
                self._failed(exc, f"watching again from version {version}")
                await self._back_off()

    def _failed(self, exc: Exception, then: str) -> None:
        reason = _reason(exc)
        self.on_error(reason)
        if isinstance(exc, KubeError) and exc.status == 404:
            what = (f"{self.resource} are not served in {self.scope} (404 {exc.reason}: is its CRD or API installed?): "
                    f"none there until they are")
        elif isinstance(exc, KubeError):
            what = f"{self.resource} watch in {self.scope} failed ({exc.status} {exc.reason}: {exc.message})"
        else:
            what = f"{self.resource} watch in {self.scope} failed unexpectedly ({type(exc).__name__}: {exc})"
        log.warning("%s; %s in %.1fs", what, then, self._backoff)

    async def _back_off(self) -> None:
        await asyncio.sleep(self._backoff * (0.5 + random.random()))
        self._backoff = min(self.max_backoff, self._backoff * 2)


def _reason(exc: Exception) -> str:
    """A label for a failure: the Status reason (`NotFound`, `TooManyRequests`, `Unreachable`, ...) or the
    exception's class; never a message, whose text has no bound."""
    if isinstance(exc, KubeError):
        return exc.reason if re.fullmatch(r"[A-Za-z]{1,64}", exc.reason) else str(exc.status)
    return type(exc).__name__


async def until_listable(api: KubeApi, path: str, *, recheck: float,
                         refused: Callable[[KubeError, bool], None]) -> bool:
    """Wait until the operator may list `path`: a list of one object is enough to learn it. On 401, 403 or 404 (no
    RBAC, or the API is not served) `refused(error, first)` is called and it asks again every `recheck` seconds;
    other failures are retried after 2 s. True when it was refused at least once (the caller may say it recovered)."""
    was_refused = False
    while True:
        try:
            await api.request("GET", path, query={"limit": "1"})
            return was_refused
        except KubeError as exc:
            if exc.status not in (401, 403, 404):
                await asyncio.sleep(2.0)
                continue
            refused(exc, not was_refused)
            was_refused = True
            await asyncio.sleep(recheck)
