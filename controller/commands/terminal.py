"""Progress on a terminal: one bar drawn by rich, nothing at all when the stream is not a terminal.

A bar is for a person watching; a log file or a pipe gets no carriage returns nor escape codes. Elapsed and
remaining time are printed with `textfmt.duration`, the style of every other duration the commands print.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TaskProgressColumn, TextColumn
from rich.text import Text

from controller.model.textfmt import duration


def wants_progress(stream: TextIO, quiet: bool) -> bool:
    """A bar only for a person: not with --quiet, not into a file or a pipe."""
    if quiet:
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


class _Elapsed(ProgressColumn):
    """`12s of 1m` in the commands' duration style (rich's own columns print 0:00:12)."""

    def render(self, task: Task) -> Text:
        elapsed = duration(int(task.elapsed or 0.0))  # whole seconds: a clock, not a measurement
        return Text(f"{elapsed} of {duration(task.total)}" if task.fields.get("timed") and task.total
                    else elapsed, style="progress.elapsed")


class ProgressLine:
    """One task on a bar: `advance_to` a fraction or an amount of `total`; `say` prints a line above the bar."""

    def __init__(self, progress: Progress | None, console: Console | None, task: TaskID | None) -> None:
        self._progress = progress
        self._console = console
        self._task = task

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def advance_to(self, completed: float, status: str | None = None) -> None:
        if self._progress is not None and self._task is not None:
            if status is None:
                self._progress.update(self._task, completed=completed)
            else:
                self._progress.update(self._task, completed=completed, status=status)

    def say(self, line: str) -> None:
        if self._console is not None:
            self._console.print(line, markup=False, highlight=False, soft_wrap=True)


@contextmanager
def progress_bar(stream: TextIO, label: str, total: float, *, shown: bool,
                 timed: bool = False) -> Iterator[ProgressLine]:
    """A bar on `stream` while the block runs (when `shown`), left drawn at its end; a no-op bar otherwise."""
    if not shown:
        yield ProgressLine(None, None, None)
        return
    console = Console(file=stream, force_terminal=True, highlight=False)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), _Elapsed(),
                        TextColumn("{task.fields[status]}"), console=console, transient=False)
    with progress:
        task = progress.add_task(label, total=total, status="", timed=timed)
        yield ProgressLine(progress, console, task)
        progress.update(task, completed=total)
