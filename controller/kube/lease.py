"""Leader election on a coordination.k8s.io/v1 Lease, the way client-go does it.

Take the lease when it is empty, ours, or expired (not renewed for leaseDurationSeconds as observed by *our* clock:
we never compare the other holder's timestamps with our clock); write with the resourceVersion read, so a 409
means another replica won. Renew every retry period; when renewal has failed for longer than the renew deadline,
stop leading at once. The renew deadline counts from when the winning write was *sent*, not from when its answer
was read: the server may have stored it at any moment in between, and another replica's lease duration runs from
when it saw that write, so an answer read late (a busy event loop, a slow network) must not stretch our lead.
Release (empty holder) on shutdown so the next leader need not wait for expiry.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from controller.kube.api import KubeApi, lease_path
from controller.kube.errors import KubeError

log = logging.getLogger(__name__)


def micro_time(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started: Callable[[], Awaitable[None]] | None = None,
        on_stopped: Callable[[], Awaitable[None]] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started = on_started
        self.on_stopped = on_stopped
        self._monotonic = monotonic
        self._wall = wall
        self.is_leader = False
        self.transitions = 0
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) as last seen
        self._observed_at = 0.0
        self._last_renew = 0.0

    def holds_lease(self) -> bool:
        """Leader, and renewed within the renew deadline by our clock. A process that was frozen (SIGSTOP, a long
        pause) wakes up still `is_leader` while another replica may already lead: this turns False at once."""
        return self.is_leader and self._monotonic() - self._last_renew <= self.renew_deadline

    async def run(self) -> None:
        """Try to lead, and keep leading, until cancelled. Cancelling leaves the lease held: call `release()`
        once the work it guards has stopped."""
        while True:
            await self.step()
            await asyncio.sleep(self.retry_period)

    async def step(self) -> None:
        """One attempt to take or renew the lease, and what follows from it (leading begins or ends)."""
        # While leading, an API call may not outlast the renew deadline: a hung renewal must end leadership
        # before another replica can see the lease expire.
        budget = self.renew_deadline
        if self.is_leader:
            budget = max(0.05, self.renew_deadline - (self._monotonic() - self._last_renew))
        try:
            sent = await asyncio.wait_for(self._try_acquire_or_renew(), budget)
        except TimeoutError:
            sent = None
        now = self._monotonic()
        if sent is not None:
            self._last_renew = sent
            if not self.is_leader:
                self.is_leader = True
                self.transitions += 1
                log.info("became the leader (lease %s/%s, identity %s)", self.namespace, self.name,
                         self.identity)
                if self.on_started:
                    await self.on_started()
        elif self.is_leader and now - self._last_renew > self.renew_deadline:
            await self._lose("could not renew the lease within the renew deadline")

    async def _lose(self, why: str) -> None:
        log.warning("stopped leading: %s", why)
        self.is_leader = False
        if self.on_stopped:
            await self.on_stopped()

    async def _try_acquire_or_renew(self) -> float | None:
        """When (by our monotonic clock) the write that took or renewed the lease was sent; None: not ours."""
        path = lease_path(self.namespace, self.name)
        now_wall = self._wall()
        try:
            lease = await self.api.request("GET", path, timeout=self.renew_deadline / 2, limit="none")
        except KubeError as exc:
            if exc.status != 404:
                log.info("could not read the lease: %s %s", exc.status, exc.reason)
                return None
            return await self._create(now_wall)
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        observed = (holder, str(spec.get("renewTime") or ""))
        now = self._monotonic()
        if observed != self._observed:
            self._observed, self._observed_at = observed, now
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        held_by_other = holder not in ("", self.identity)
        if held_by_other and self._observed_at + duration > now:
            if self.is_leader:
                await self._lose(f"the lease is held by {holder}")
            return None
        transitions = int(spec.get("leaseTransitions") or 0)
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": spec.get("acquireTime") if holder == self.identity else micro_time(now_wall),
            "renewTime": micro_time(now_wall),
            "leaseTransitions": transitions if holder == self.identity else transitions + 1,
        }
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": lease.get("metadata", {}),
                "spec": new_spec}
        sent = self._monotonic()
        try:
            updated = await self.api.request("PUT", path, body=body, timeout=self.renew_deadline / 2, limit="none")
        except KubeError as exc:
            if exc.status != 409:
                log.info("could not write the lease: %s %s", exc.status, exc.reason)
            return None
        updated_spec = updated.get("spec") or {}
        self._observed = (self.identity, str(updated_spec.get("renewTime") or ""))
        self._observed_at = self._monotonic()
        return sent

    async def _create(self, now_wall: float) -> float | None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "acquireTime": micro_time(now_wall),
                "renewTime": micro_time(now_wall),
                "leaseTransitions": 0,
            },
        }
        sent = self._monotonic()
        try:
            await self.api.request("POST", lease_path(self.namespace), body=body, timeout=self.renew_deadline / 2,
                                   limit="none")
        except KubeError as exc:
            if exc.status != 409:
                log.info("could not create the lease: %s %s", exc.status, exc.reason)
            return None
        return sent

    async def release(self) -> None:
        """Give the lease up (empty holder) if we hold it, so another replica can take it at once."""
        if not self.is_leader:
            return
        path = lease_path(self.namespace, self.name)
        try:
            lease = await self.api.request("GET", path, timeout=5, limit="none")
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time(self._wall())})
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": lease.get("metadata", {}),
                    "spec": spec}
            await self.api.request("PUT", path, body=body, timeout=5, limit="none")
            log.info("released the lease %s/%s", self.namespace, self.name)
        except KubeError as exc:
            log.warning("could not release the lease: %s %s", exc.status, exc.reason)
        finally:
            self.is_leader = False
