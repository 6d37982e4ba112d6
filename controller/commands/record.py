"""`queuescale record`: poll a rule's queues for a while and write what arrived as a simulator trace.

    queuescale record RULE.yaml --duration 1h --out trace.csv [--secrets S.yaml] [--counts counts.csv]
        [--scenario scenario.yaml] [--completion-rate R] [--interval T]

Every polling interval (the rule's, or `--interval`) it reads every source once, as `check` does (secrets from
Secret manifests or `QUEUESCALE_SECRET_<NAME>_<KEY>`), and adds the counts up (the simulator models one queue).

**The estimate.** A queue's approximate count changes by arrivals minus deletions (completions), so for each
interval `arrivals = max(0, Δcount + completions)`. The count alone cannot see completions:

- without `--completion-rate`, completions are taken as 0, so arrivals are the count's growth: a lower bound.
  Traffic the workers keep up with (the queue stays near zero) mostly disappears from the trace;
- with `--completion-rate R` (messages per second the workers complete while they have work: replicas x
  per-replica throughput), completions are `R × Δt` while the queue held messages at the start of the interval,
  at most what was there when it drained to 0, and 0 when it was empty at both polls. Right when the fleet was
  saturated at that rate; wrong when the number of workers changed a lot during the recording.

Messages that arrive and are processed between two polls while the queue looks empty at both are invisible to any
count-based recording; poll more often (`--interval`) to see more of them. The first poll is the baseline: the
messages already waiting did not arrive during the recording, so they are not in the trace nor in the arrivals;
the scenario replays them as a burst at 0 s (the backlog the replay starts with). Expired messages and messages put
with a visibility delay count as they do in Azure (the count includes them).

Output: `t,arrivals` (t = seconds since the start of the interval; its arrivals spread over it; a last row with 0
closes the trace), written as it goes so an interrupted recording is still a valid trace. `--counts` also writes
the raw readings (`t,total,<queue>...,error`). `--scenario` writes a scenario that replays the trace, starting at
the recording's wall-clock time, to run with `queuescale simulate --scenario`.
"""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import math
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import yaml

from controller.commands.check import CheckInputError, SecretStore, load_secrets
from controller.commands.terminal import ProgressLine, progress_bar, wants_progress
from controller.model.fields import format_duration
from controller.model.loading import load_files
from controller.model.readings import SourceReading
from controller.model.rule import QueueScaler
from controller.model.textfmt import duration, offset, plural
from controller.net.http import polling_client
from controller.sources import build_source
from controller.sources.base import Source, SourceContext, guarded_poll

REQUEST_TIMEOUT = 10.0


@dataclass(frozen=True)
class RecordOptions:
    rule_file: str
    duration: float
    out: Path
    secrets_file: str | None = None
    counts_out: Path | None = None
    scenario_out: Path | None = None
    completion_rate: float | None = None  # messages/s the workers complete while they have work
    interval: float | None = None  # None: the rule's pollingInterval
    rule_name: str | None = None
    quiet: bool = False  # only the closing summary


class RecordError(Exception):
    """Input that cannot be used; the message names the file, option or field."""


def estimate_arrivals(previous: float, current: float, seconds: float, completion_rate: float | None) -> float:
    """Messages that arrived between two counts `seconds` apart: max(0, Δcount + estimated completions)."""
    completions = 0.0
    if completion_rate is not None and previous > 0:
        completions = completion_rate * seconds
        if current == 0:
            completions = min(completions, previous)  # it drained: the workers ran out of work
    return max(0.0, current - previous + completions)


# --------------------------------------------------------------------------------------------------------------
# Choosing the rule and its secrets


def load_rule(options: RecordOptions, environ: Mapping[str, str]) -> tuple[QueueScaler, SecretStore]:
    loaded = load_files([options.rule_file])
    if not loaded.ok:
        raise RecordError("\n".join(loaded.error_lines()))
    rules = [r.rule for r in loaded.rules if r.rule is not None]
    if options.rule_name is not None:
        rules = [r for r in rules if r.name == options.rule_name]
        if not rules:
            raise RecordError(f"{options.rule_file}: no QueueScaler named '{options.rule_name}'")
    if not rules:
        raise RecordError(f"{options.rule_file}: no QueueScaler in this file")
    if len(rules) > 1:
        names = ", ".join(r.name for r in rules)
        raise RecordError(f"{options.rule_file}: {len(rules)} rules ({names}): pick one with --rule NAME")
    store = SecretStore(environ=environ)
    try:
        store.add_manifests(loaded.documents)
        if options.secrets_file is not None:
            store.add_manifests(load_secrets(options.secrets_file))
    except CheckInputError as exc:
        raise RecordError(str(exc)) from None
    return rules[0], store


def check_options(options: RecordOptions) -> list[str]:
    problems = []
    if options.duration <= 0:
        problems.append(f"--duration: must be > 0, got {options.duration:g}")
    if options.interval is not None and options.interval < 1:
        problems.append(f"--interval: must be >= 1s, got {options.interval:g}")
    if options.completion_rate is not None and not (options.completion_rate >= 0 and
                                                   math.isfinite(options.completion_rate)):
        problems.append(f"--completion-rate: must be >= 0, got {options.completion_rate:g}")
    return problems


# --------------------------------------------------------------------------------------------------------------
# Recording


@dataclass
class Recording:
    """What was recorded, for the summary."""

    polls: int = 0
    failed_polls: int = 0
    arrivals: float = 0.0  # during the recording: the backlog found by the first poll is not among them
    backlog: int = 0  # messages waiting at the first good poll
    started: float = 0.0
    seconds: float = 0.0
    interrupted: bool = False


class _Narrator:
    """The line per poll: above the progress bar on a terminal, as plain lines otherwise, none with --quiet."""

    def __init__(self, err: TextIO, bar: ProgressLine, quiet: bool) -> None:
        self.err = err
        self.bar = bar
        self.quiet = quiet

    def say(self, line: str) -> None:
        if self.quiet:
            return
        if self.bar.shown:
            self.bar.say(line)
        else:
            print(line, file=self.err, flush=True)

    def polled(self, t: float, status: str) -> None:
        self.bar.advance_to(t, status)


class _Writers:
    """The trace (and counts) files, written and flushed row by row."""

    def __init__(self, options: RecordOptions, rule: QueueScaler) -> None:
        options.out.parent.mkdir(parents=True, exist_ok=True)
        self.trace_file = options.out.open("w", newline="", encoding="utf-8")
        self.trace = csv.writer(self.trace_file)
        self.trace.writerow(["t", "arrivals"])
        self.last_t: float | None = None
        self.counts_file: TextIO | None = None
        if options.counts_out is not None:
            options.counts_out.parent.mkdir(parents=True, exist_ok=True)
            self.counts_file = options.counts_out.open("w", newline="", encoding="utf-8")
            self.counts = csv.writer(self.counts_file)
            self.counts.writerow(["t", "total", *(s.queue_label for s in rule.spec.sources), "error"])

    def arrival(self, t: float, arrivals: float) -> None:
        self.last_t = round(t, 3)
        self.trace.writerow([_number(self.last_t), _number(round(arrivals, 3))])
        self.trace_file.flush()

    def reading(self, t: float, total: int | None, readings: Sequence[SourceReading]) -> None:
        if self.counts_file is None:
            return
        errors = "; ".join(f"{r.error.code}" for r in readings if r.error is not None)
        self.counts.writerow([_number(round(t, 3)), "" if total is None else total,
                              *("" if r.count is None else r.count for r in readings), errors])
        self.counts_file.flush()

    def close(self) -> None:
        self.trace_file.close()
        if self.counts_file is not None:
            self.counts_file.close()


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


async def record(rule: QueueScaler, store: SecretStore, options: RecordOptions, err: _Narrator,
                 stop: asyncio.Event | None = None) -> Recording:
    """Poll for `options.duration`, writing the trace as it goes. Raises RecordError if the first poll fails."""
    stop = stop or asyncio.Event()
    interval = options.interval or rule.spec.polling_interval
    budget = min(interval, REQUEST_TIMEOUT)
    result = Recording()
    writers = _Writers(options, rule)
    try:
        async with polling_client(timeout=REQUEST_TIMEOUT) as http:
            context = SourceContext(http=http, secrets=store.resolver(rule.namespace), namespace=rule.namespace)
            sources = [build_source(spec, context) for spec in rule.spec.sources]
            try:
                await _record(rule, sources, options, interval, budget, writers, result, err, stop)
            finally:
                for source in sources:
                    await source.aclose()
    finally:
        writers.close()
    return result


async def _record(rule: QueueScaler, sources: list[Source], options: RecordOptions, interval: float,
                  budget: float, writers: _Writers, result: Recording, err: _Narrator, stop: asyncio.Event) -> None:
    started = time.time()
    result.started = started
    previous: tuple[float, int] | None = None  # (t, total) of the last good poll
    next_poll = time.monotonic()
    origin = time.monotonic()
    while True:
        t = time.monotonic() - origin
        readings = await asyncio.gather(*(guarded_poll(s, budget) for s in sources))
        result.polls += 1
        failed = [r for r in readings if r.error is not None]
        total = None if failed else sum(r.count or 0 for r in readings)
        writers.reading(t, total, readings)
        if failed:
            result.failed_polls += 1
            what = "; ".join(f"{s.spec.queue_label}: {r.error.code}: {r.error.message}"
                             for s, r in zip(sources, readings, strict=True) if r.error is not None)
            if previous is None and result.polls == 1:
                raise RecordError(f"{rule.key}: the first poll failed ({what})")
            err.say(f"{offset(t)}  poll failed ({what}); the next good poll covers this interval")
            err.polled(t, "last poll failed")
        elif total is not None:
            if previous is None:
                # A baseline, not arrivals: these messages were put before the recording began.
                result.backlog = total
                err.say(f"{offset(t)}  count {total} (the baseline: waiting before the recording, not arrivals)")
            else:
                last_t, last_total = previous
                arrivals = estimate_arrivals(last_total, total, t - last_t, options.completion_rate)
                writers.arrival(last_t, arrivals)
                result.arrivals += arrivals
                err.say(f"{offset(t)}  count {total}  arrivals since the last poll ~{arrivals:g}")
            previous = (t, total)
            err.polled(t, f"count {total}, ~{result.arrivals:g} arrived")
        if t >= options.duration or stop.is_set():
            break
        next_poll += interval
        if next_poll < time.monotonic():
            next_poll = time.monotonic()
        wait = min(next_poll, origin + options.duration) - time.monotonic()
        with_stop = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({with_stop}, timeout=max(0.0, wait))
        finally:
            with_stop.cancel()
    end = time.monotonic() - origin
    if previous is not None:
        # A closing row, so the last interval keeps its length (the simulator gives a last row one second).
        last = writers.last_t if writers.last_t is not None else -1.0
        writers.arrival(max(previous[0], last + 1.0), 0.0)
    result.seconds = end
    result.interrupted = stop.is_set()


def write_scenario(path: Path, trace: Path, rule: QueueScaler, recording: Recording,
                   options: RecordOptions) -> None:
    """A scenario that replays the trace from the recording's start time (workers: edit to match yours)."""
    interval = options.interval or rule.spec.polling_interval
    relative = os.path.relpath(trace.resolve(), path.resolve().parent)
    start = dt.datetime.fromtimestamp(recording.started, dt.UTC).replace(microsecond=0)
    estimate = ("count growth only (a lower bound: no --completion-rate)" if options.completion_rate is None
                else f"count change + {options.completion_rate:g} completions/s while the queue had messages")
    document = {
        "name": f"recorded-{rule.name}",
        "description": f"Arrivals on {', '.join(s.queue_label for s in rule.spec.sources)} recorded by queuescale "
                       f"record from rule {rule.key}, polled every {duration(interval)}; estimate: "
                       f"{estimate}",
        "duration": format_duration(max(1.0, math.ceil(recording.seconds))),
        "start": start.isoformat().replace("+00:00", "Z"),
        "arrivals": [{"type": "trace", "file": relative},
                     # The messages already waiting when the recording began: the backlog the replay starts with.
                     *([{"type": "burst", "at": 0, "messages": recording.backlog}] if recording.backlog else [])],
        "workers": {"startupDelay": "30s", "serviceTime": "1s", "maxReplicas": rule.spec.max_replicas},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Edit workers to match yours (start-up delay, service time, concurrency) before comparing policies.\n"
        + yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def run(options: RecordOptions, *, environ: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    """The whole command; returns the exit status."""
    problems = check_options(options)
    if problems:
        for line in problems:
            print(f"record: {line}", file=err)
        return 2
    try:
        rule, store = load_rule(options, environ)
    except RecordError as exc:
        print(str(exc), file=err)
        return 1

    async def main(narrator: _Narrator) -> Recording:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        try:
            return await record(rule, store, options, narrator, stop)
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)

    interval = options.interval or rule.spec.polling_interval
    if not options.quiet:
        print(f"recording {rule.key} ({', '.join(s.queue_label for s in rule.spec.sources)}) every "
              f"{duration(interval)} for {duration(options.duration)} into {options.out}; Ctrl-C stops "
              "early and keeps what was recorded", file=err, flush=True)
    try:
        with progress_bar(err, "recording", options.duration, shown=wants_progress(err, options.quiet),
                          timed=True) as bar:
            recording = asyncio.run(main(_Narrator(err, bar, options.quiet)))
    except RecordError as exc:
        print(str(exc), file=err)
        return 1
    except OSError as exc:
        print(f"record: cannot write: {exc.strerror or exc}", file=err)
        return 1
    if options.scenario_out is not None:
        write_scenario(options.scenario_out, options.out, rule, recording, options)
    note = " (stopped early)" if recording.interrupted else ""
    print(f"recorded {duration(recording.seconds)}{note}: {plural(recording.polls, 'poll')} "
          f"({recording.failed_polls} failed), ~{plural(round(recording.arrivals, 3), 'message')} arrived "
          f"({recording.backlog} already waiting at the start); trace written to {options.out}"
          + (f"; counts written to {options.counts_out}" if options.counts_out else "")
          + (f"; scenario written to {options.scenario_out}, replay it with queuescale simulate --scenario "
             f"{options.scenario_out}" if options.scenario_out else ""),
          file=out)
    return 0
