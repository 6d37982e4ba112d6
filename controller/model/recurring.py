"""Bursts that recur at a steady period: remembered as the count shows them, and expected again.

Pure functions on the (time, messages) pairs `ScalingMemory.bursts` keeps; the policy decides where they apply
(rules whose cold start misses the objective) and how many replicas to ready (docs/policy.md, *Bursts that
recur*). Nothing here reads a clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

# How many bursts are remembered: enough for three beats of each of a few periods, small enough for the status.
BURSTS_KEPT = 24
# A period is trusted once this many bursts in a row kept it.
BEATS = 3

Burst = tuple[float, float]  # (when it began, by how many messages the count rose)


@dataclass(frozen=True)
class ExpectedBurst:
    """The next beat of a series of bursts seen at a steady period."""

    at: float
    period: float
    messages: float  # the largest of the beats seen


def remember(
    bursts: tuple[Burst, ...], now: float, rise: float, previous_rise: float | None, threshold: float
) -> tuple[Burst, ...]:
    """`bursts` after a poll whose count rose by `rise` since the poll before (which rose by `previous_rise`).

    A burst is a run of polls, each rising by `threshold` or more: it began at the first, and its size is what
    the whole run added. The oldest are forgotten past `BURSTS_KEPT`.
    """
    if rise < threshold:
        return bursts
    if bursts and previous_rise is not None and previous_rise >= threshold:
        began, messages = bursts[-1]
        return (*bursts[:-1], (began, messages + rise))
    return (*bursts, (now, rise))[-BURSTS_KEPT:]


def expected(bursts: Sequence[Burst], now: float, tolerance: float) -> list[ExpectedBurst]:
    """The next beat of every series of `BEATS` bursts in a row at one period (each beat within `tolerance` of
    its time), where that beat is not yet more than `tolerance` past. A series whose next beat came and went
    without a burst has ended, and expects nothing.
    """
    times = [t for t, _ in bursts]
    found: list[ExpectedBurst] = []
    for newest in range(len(bursts) - 1, -1, -1):
        for before in range(newest - 1, -1, -1):
            period = times[newest] - times[before]
            at = times[newest] + period
            if period <= 2 * tolerance or at < now - tolerance:
                continue
            beats = [newest, before]
            while len(beats) < BEATS:
                beat = _near(times, times[beats[-1]] - period, tolerance)
                if beat is None:
                    break
                beats.append(beat)
            if len(beats) == BEATS:
                found.append(ExpectedBurst(at, period, max(bursts[b][1] for b in beats)))
    return found


def _near(times: Sequence[float], t: float, tolerance: float) -> int | None:
    """The index of a time within `tolerance` of `t` (`times` ascending), or None."""
    i = bisect.bisect_left(times, t - tolerance)
    return i if i < len(times) and times[i] <= t + tolerance else None
