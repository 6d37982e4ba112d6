"""The per-rule loop: poll -> decide -> scale -> report, driven by a clock it is given.

The operator and the simulator both run this very code: they differ only in the sources, target, reporter and
clock they hand in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from controller import kills
from controller.model.readings import Observation, ScaleEvent, ScalingMemory, SourceReading
from controller.model.rule import QueueScaler
from controller.net.slots import Slots
from controller.policy import Decision, decide, polls_to_keep
from controller.sources.base import Source, guarded_poll
from controller.targets.base import ScaleState, Target, TargetConflict, TargetError

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 3
# A tick that starts and polls within this of its due time decides as of its due time (see tick()).
ON_TIME = 1.0


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (virtual in the simulator)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


@dataclass(frozen=True)
class TickResult:
    """Everything one tick saw and did, for whoever reports it (status, events, metrics, a timeline)."""

    rule: QueueScaler
    time: float
    observation: Observation
    decision: Decision | None  # None when the target could not be read
    state: ScaleState | None  # the target after the tick, when known
    scaled: ScaleEvent | None  # the scale this tick made, if any
    target_error: TargetError | None
    memory: ScalingMemory
    poll_seconds: float = 0.0  # by the given clock (0 in the simulator)
    lateness: float = 0.0  # how late the tick started after its scheduled time, when run() drives it


class Reporter(Protocol):
    async def report(self, result: TickResult) -> None: ...


class Reconciler:
    """One rule's loop. Not reentrant: a tick never overlaps the previous one."""

    def __init__(
        self,
        rule: QueueScaler,
        sources: Sequence[Source],
        target: Target,
        clock: Clock,
        reporter: Reporter | None = None,
        memory: ScalingMemory | None = None,
        *,
        target_refresh: float = 0.0,
    ) -> None:
        """`target_refresh`: how long the target's last known scale is trusted for a tick that changes nothing.
        0 reads the target on every tick. A tick that would scale always reads it first, so a write is never
        based on a stale count (and a scale made by someone else is seen at the latest after `target_refresh`).
        A target whose state a watch keeps current (ScaleState.watched) is read on every tick whatever this says:
        that read costs no request, and a scale made by someone else is seen by the next tick."""
        self.rule = rule
        self.sources = tuple(sources)
        self._target = target
        self.clock = clock
        self.reporter = reporter
        self.memory = memory or ScalingMemory()
        self.history: list[Observation] = []
        self.target_refresh = target_refresh
        self._known: ScaleState | None = None  # the target's scale as last read or written
        self._known_at = 0.0
        self._left: int | None = None  # the replicas last read or written (at `_known_at`), kept through errors

    @property
    def target(self) -> Target:
        return self._target

    @target.setter
    def target(self, target: Target) -> None:
        self._target = target
        self._known = None

    def update(self, rule: QueueScaler, sources: Sequence[Source] | None = None) -> None:
        """A changed rule takes effect on the next tick; the memory and history are kept."""
        self.rule = rule
        if sources is not None:
            self.sources = tuple(sources)

    async def poll(self) -> Observation:
        """Every source's reading, polled concurrently, each within the polling interval."""
        started = self.clock.now()
        budget = self.rule.spec.polling_interval
        if len(self.sources) == 1:
            readings: Sequence[SourceReading] = [await guarded_poll(self.sources[0], budget)]
        else:
            readings = await asyncio.gather(*(guarded_poll(s, budget) for s in self.sources))
        return Observation(time=started, readings=tuple(readings))

    async def tick(self, scheduled: float | None = None) -> TickResult:
        """Poll, decide, scale (re-reading and deciding again on a conflict) and report once."""
        rule = self.rule
        started = self.clock.now()
        lateness = max(0.0, started - scheduled) if scheduled is not None else 0.0
        observation = await self.poll()
        now = self.clock.now()
        poll_seconds = now - started
        if scheduled is not None and 0.0 <= now - scheduled < min(ON_TIME, rule.spec.polling_interval / 2):
            # On time: decide as of the due time. The few milliseconds a poll takes otherwise put each tick's
            # time a little after its due time, by a different amount each time, and a window that is a multiple
            # of the polling interval (scaleDown.delay 15s polled every 5s) then keeps or drops the
            # recommendation on its edge at random: the scale-down came one poll late about half the time.
            now = scheduled
            observation = replace(observation, time=scheduled)
        decision: Decision | None = None
        state: ScaleState | None = None
        scaled: ScaleEvent | None = None
        target_error: TargetError | None = None
        memory = seen = self.memory
        conflicts = 0
        trust_known = True
        while True:
            state = self._known_state(now) if trust_known else None
            known = state is not None
            if state is None:
                try:
                    state = await self._target.read()
                except TargetError as exc:
                    target_error = exc
                    self._known = None
                    break
                seen = memory = self._noticed(seen, state.replicas, now)
                self._keep(state, now)
            decision = decide(
                rule.spec, observation, self.history, state.replicas, seen, now, paused=rule.paused,
                measured_startup=state.startup_seconds,
            )
            memory = decision.memory
            if decision.desired == state.replicas:
                target_error = None
                break
            if known:
                trust_known = False  # about to write: read what the target says now, and decide on that
                continue
            try:
                state = await self._target.scale(decision.desired, state)
            except TargetConflict as exc:
                target_error = exc
                self._known = None
                conflicts += 1
                if conflicts >= CONFLICT_RETRIES:
                    break
                continue
            except TargetError as exc:
                target_error = exc
                self._known = None
                break
            self._keep(state, now)
            if state.removal_blind:
                # The pods removed were not the least busy of all, as the account assumed: it counts their share.
                memory = kills.add_stops(memory, now, decision.unchosen_stops)
            scaled = ScaleEvent(now, decision.current, decision.desired)
            memory = memory.with_scale(now, decision.current, decision.desired)
            target_error = None
            break
        self.memory = memory
        self._remember(observation)
        result = TickResult(
            rule=rule, time=now, observation=observation, decision=decision, state=state, scaled=scaled,
            target_error=target_error, memory=memory, poll_seconds=poll_seconds, lateness=lateness,
        )
        if self.reporter is not None:
            await self.reporter.report(result)
        return result

    def forget_target_state(self) -> None:
        """Read the target on the next tick (say, after another replica led for a while)."""
        self._known = None
        self._left = None  # what another leader did, its memory says

    def _noticed(self, memory: ScalingMemory, replicas: int, now: float) -> ScalingMemory:
        """The memory with a scale someone else made since the target was last read or written: a removal as of
        then, an addition as of now, so that the replica-seconds the readings of drains and waits count are never
        more than there were (docs/policy.md, *A wrong serviceTime*)."""
        was = self._left
        if was is None or was == replicas:
            return memory
        return memory.with_hand_scale(self._known_at if replicas < was else now, was, replicas)

    def _known_state(self, now: float) -> ScaleState | None:
        if self._known is None or self._known.watched or now - self._known_at >= self.target_refresh:
            return None
        return self._known

    def _keep(self, state: ScaleState, now: float) -> None:
        self._known, self._known_at, self._left = state, now, state.replicas

    def _remember(self, observation: Observation) -> None:
        self.history = polls_to_keep(self.rule.spec, [*self.history, observation])

    async def run(
        self, stop: asyncio.Event, *, first_delay: float = 0.0, slots: Slots | None = None
    ) -> None:
        """Tick every polling interval until `stop` is set. A late tick starts at once; missed ones are skipped.

        `first_delay` puts off the first tick: an operator starting thousands of rules at once spreads them over
        one interval, instead of polling every queue and reading every target in the same instant.

        `slots`, shared by all the rules of a process, bounds the ticks in progress. A tick waits for a slot
        before it starts, and that wait counts as lateness. Without a bound, a process with more due ticks than
        it has CPU for starts them all: each then waits behind all the others for every step, its poll outlasts
        its timeout, is retried and warned about, and the extra work keeps the process saturated. With one, the
        same overload makes ticks start late, and every tick that starts finishes in time."""
        next_tick = self.clock.now() + max(0.0, first_delay)
        if first_delay > 0:
            await _sleep_or_stop(self.clock, first_delay, stop)
        while not stop.is_set():
            if slots is None:
                await self.tick(scheduled=next_tick)
            else:
                async with slots:
                    if stop.is_set():
                        break
                    await self.tick(scheduled=next_tick)
            interval = self.rule.spec.polling_interval
            next_tick += interval
            now = self.clock.now()
            if next_tick < now:
                next_tick = now
            await _sleep_or_stop(self.clock, next_tick - now, stop)


async def _sleep_or_stop(clock: Clock, seconds: float, stop: asyncio.Event) -> None:
    if isinstance(clock, SystemClock):
        # The real clock needs no task per sleep: a timeout on the stop event costs one timer handle.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, seconds)):
                await stop.wait()
        return
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sleeper, stopper):
            task.cancel()
