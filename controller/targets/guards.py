"""Targets that refuse: the wrappers the operator puts around every rule's target before its reconciler gets it.

Both answer a read or a scale with a retryable TargetError instead of passing it on, so the reconciler reports it
(Ready=False, an event) and tries again on the next tick, when the reason may be gone.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.kube.ownership import Ownership, TargetKey
from controller.model.rule import QueueScaler, ScaleTargetRef
from controller.targets.base import ScaleState, Target, TargetError


class OwnedTarget:
    """A target that answers only to its owner (see controller/kube/ownership.py): not while another rule owns it
    or an HPA scales it. Refusing the read (not only the write) makes every tick of a rule that does not own its
    target say so (Ready=False), even when it would not have scaled."""

    def __init__(self, inner: Target, ownership: Ownership, rule: QueueScaler) -> None:
        self.inner = inner
        self.ownership = ownership
        self.rule_key = f"{rule.namespace}/{rule.name}"
        self.key = TargetKey.of_rule(rule)

    @property
    def ref(self) -> ScaleTargetRef:
        return self.inner.ref

    async def _check(self) -> None:
        if not self.ownership.hpas.settled.is_set():
            await self.ownership.await_hpas()
        conflict = self.ownership.conflict(self.rule_key, self.key)
        if conflict is not None:
            raise TargetError(conflict.code, conflict.message, retryable=True)

    async def read(self) -> ScaleState:
        await self._check()
        return await self.inner.read()

    async def scale(self, replicas: int, read: ScaleState) -> ScaleState:
        await self._check()
        return await self.inner.scale(replicas, read)


class LeaderGuardedTarget:
    """A target that refuses to scale unless this replica may write at that very moment (see Operator.may_write):
    with leader election, whether its lease is still fresh, which a replica that was frozen past its lease is not,
    whatever it last heard."""

    def __init__(self, inner: Target, may_write: Callable[[], bool]) -> None:
        self.inner = inner
        self.may_write = may_write

    @property
    def ref(self) -> ScaleTargetRef:
        return self.inner.ref

    async def read(self) -> ScaleState:
        return await self.inner.read()

    async def scale(self, replicas: int, read: ScaleState) -> ScaleState:
        if not self.may_write():
            raise TargetError("NotLeader", "this replica no longer holds the leader lease: not scaling",
                              retryable=True)
        return await self.inner.scale(replicas, read)
