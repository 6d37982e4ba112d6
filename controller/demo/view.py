"""The demo's live terminal view: redrawn in place on a terminal, one plain line per tick otherwise."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from controller.model.textfmt import duration, offset

SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 40


@dataclass(frozen=True)
class Frame:
    """Everything the view shows at one moment."""

    elapsed: float
    count: int | None
    # How fast the count moved since the previous poll (messages/s). Not the policy's trend: that is a fit over the
    # trend window, which a burst inside the window keeps positive while the queue sits flat; the decision line
    # quotes it where it is used.
    change: float | None
    desired: int | None
    ready: int | None
    reason: str
    message: str
    processed: int
    sent: int
    counts: Sequence[int]  # recent queue counts, oldest first, for the sparkline
    events: Sequence[str]  # recent events, oldest first


def sparkline(values: Sequence[int], width: int = SPARK_WIDTH) -> str:
    recent = list(values)[-width:]
    top = max(recent, default=0)
    if top <= 0:
        return SPARKS[0] * len(recent)
    return "".join(SPARKS[min(len(SPARKS) - 1, round(v / top * (len(SPARKS) - 1)))] for v in recent)


def _number(value: int | None) -> str:
    return "?" if value is None else str(value)


def _change(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}/s"


class LiveView:
    """Shows frames and events on `out`; `live` redraws a block in place (ANSI), else prints lines."""

    def __init__(self, out: TextIO, *, live: bool, title: str) -> None:
        self.out = out
        self.live = live
        self.title = title
        self._drawn = 0

    def event(self, elapsed: float, text: str) -> None:
        """Something that happened (a burst sent, a scale); on a terminal it shows in the next frame."""
        if not self.live:
            print(f"{offset(elapsed)}  {text}", file=self.out, flush=True)

    def frame(self, frame: Frame) -> None:
        if not self.live:
            print(
                f"{offset(frame.elapsed)}  queue {_number(frame.count):>4}  change {_change(frame.change):>9}  "
                f"desired {_number(frame.desired):>2}  ready {_number(frame.ready):>2}  "
                f"processed {frame.processed:>4}/{frame.sent:<4}  {frame.reason}: {frame.message}",
                file=self.out, flush=True,
            )
            return
        width = max(40, shutil.get_terminal_size((100, 24)).columns - 1)
        desired = frame.desired or 0
        ready = min(frame.ready or 0, desired)
        lines = [
            f"{self.title}  +{duration(round(frame.elapsed))}",
            f"queue      {_number(frame.count):>5} messages  change {_change(frame.change):>9}  "
            f"{sparkline(frame.counts)}",
            f"workers    desired {desired:>2}  ready {_number(frame.ready):>2}  "
            f"{'■' * ready}{'□' * (desired - ready)}",
            f"processed  {frame.processed} of {frame.sent} sent",
            f"decision   {frame.reason}: {frame.message}",
            "events     " + (" | ".join(frame.events[-4:]) or "-"),
            "Ctrl-C stops the demo and everything it started.",
        ]
        self._erase()
        for line in lines:
            print(line[:width], file=self.out)
        self.out.flush()
        self._drawn = len(lines)

    def close(self) -> None:
        """Leave the last frame on screen and move below it."""
        self._drawn = 0

    def _erase(self) -> None:
        if self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
