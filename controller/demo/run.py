"""`queuescale demo`: a burst on a real (emulated) Azure queue, real workers, the operator's own reconciler.

One command, no cluster: start Azurite on 127.0.0.1, create a queue, send a burst (and a smaller one later),
and let the very `Reconciler` and `policy.decide` the operator runs scale worker processes (the local process
target) from the queue's count, polled by the real azure-queue source. The workers receive, "work" and delete
messages with the Azure SDK. The demo ends by itself once the bursts have drained and the workers have scaled
back to zero (or after `max_duration`), stops everything it started (also on Ctrl-C, SIGTERM or an error), and
writes an HTML report, a timeline CSV and a JSON summary (with every PID it started) to the output folder.
"""

from __future__ import annotations

import asyncio
import csv
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

import yaml

from controller.demo.harness import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, QUEUE_NAME, SENDERS, LiveHarness, finish
from controller.demo.options import DemoOptions
from controller.demo.record import DemoRecord, Sample, WorkerLogs, count_change, demo_rule_document
from controller.demo.report import write_report
from controller.demo.view import Frame, LiveView
from controller.model.fields import SpecError
from controller.model.rule import QueueScaler, parse_queuescaler
from controller.model.textfmt import duration, plural
from controller.reconciler import TickResult
from controller.targets.local_process import LocalProcessTarget

EXIT_SETTLED = 0


# --------------------------------------------------------------------------------------------------------------
# The run


class _Recorder:
    """The reconciler's Reporter: records each tick, updates the view, and notices when the demo is over."""

    def __init__(self, record: DemoRecord, view: LiveView, logs: WorkerLogs, target: LocalProcessTarget,
                 settled: asyncio.Event, all_sent: Callable[[], bool]) -> None:
        self.record = record
        self.view = view
        self.logs = logs
        self.target = target
        self.settled = settled
        self.all_sent = all_sent

    async def report(self, result: TickResult) -> None:
        record = self.record
        self.logs.refresh()
        reading = result.observation.readings[0] if result.observation.readings else None
        decision = result.decision
        if result.target_error is not None:  # the workers could not be read or scaled: say so, not the plan
            reason, message = result.target_error.code, result.target_error.message
        elif decision is not None:
            reason, message = str(decision.reason), decision.message
        else:
            reason, message = "Unknown", ""
        sample = Sample(
            t=record.t(result.time),
            count=None if reading is None else reading.count,
            trend=None if decision is None else decision.trend,
            desired=None if result.state is None else result.state.replicas,
            ready=None if result.state is None else result.state.ready_replicas,
            reason=reason,
            message=message,
            scaled_from=None if result.scaled is None else result.scaled.from_replicas,
            scaled_to=None if result.scaled is None else result.scaled.to_replicas,
            processed=len(self.logs.done),
            sent=record.sent,
        )
        change = count_change(record.samples, sample)
        record.samples.append(sample)
        if result.scaled is not None:
            self.event(f"{result.scaled.from_replicas} -> {result.scaled.to_replicas} workers ({reason})",
                        sample.t)
        self.view.frame(Frame(
            elapsed=sample.t, count=sample.count, change=change, desired=sample.desired, ready=sample.ready,
            reason=reason, message=message, processed=sample.processed, sent=sample.sent,
            counts=[s.count or 0 for s in record.samples], events=[text for _, text in record.events],
        ))
        if (self.all_sent() and sample.count == 0 and sample.desired == 0 and sample.ready == 0
                and not self.target.pids):
            self.settled.set()

    def event(self, text: str, t: float | None = None) -> None:
        when = self.record.t() if t is None else t
        self.record.events.append((when, f"+{duration(round(when))} {text}"))
        self.view.event(when, text)


class Demo:
    """One demo run: `main()` is the async part, run by its harness, which stops everything it started."""

    def __init__(self, options: DemoOptions, rule: QueueScaler, out: TextIO, err: TextIO) -> None:
        self.options = options
        self.rule = rule
        self.out = out
        self.err = err
        self.harness = LiveHarness(options.out_dir, out, err)

    async def main(self) -> int:
        options, rule, harness = self.options, self.rule, self.harness
        harness.clear_worker_logs()
        (options.out_dir / "demo-rule.yaml").write_text(
            yaml.safe_dump(demo_rule_document(options), sort_keys=False), encoding="utf-8")
        record = DemoRecord(options=options, rule=rule)
        live = self.out.isatty() if options.live is None else options.live
        view = LiveView(self.out, live=live, title=f"queuescale demo: rule {rule.name}")
        try:
            return await self._run(record, view)
        finally:
            view.close()

    async def _run(self, record: DemoRecord, view: LiveView) -> int:
        options, rule, harness = self.options, self.rule, self.harness
        queue = await harness.start_queue()
        if queue is None:
            return EXIT_FAILED
        assert harness.azurite is not None
        record.azurite_pid, record.azurite_port = harness.azurite.pid, harness.azurite.port
        target = harness.start_workers(["--work-time", str(options.work_time)], options.work_time + 5.0)
        logs = WorkerLogs(harness.workers_dir)
        settled = asyncio.Event()
        bursts = [(options.burst_at, options.burst)]
        if options.second_burst:
            bursts.append((options.second_burst_at, options.second_burst))
        recorder = _Recorder(record, view, logs, target, settled, lambda: record.sent == sum(n for _, n in bursts))
        print(
            f"queue '{QUEUE_NAME}' created; rule '{rule.name}': poll every {duration(options.polling_interval)}, "
            f"{plural(options.target_per_replica, 'message')} per worker, 0 to {plural(options.max_workers, 'worker')} "
            f"({duration(options.work_time)} of work per message); bursts: "
            + ", ".join(f"{plural(n, 'message')} at +{duration(at)}" for at, n in bursts)
            + f"; output in {options.out_dir}/", file=self.out, flush=True,
        )
        async with harness.reconciling(rule, recorder) as started:
            record.started = started
            sender = asyncio.create_task(self._send_bursts(queue, bursts, record, recorder))
            ended = asyncio.create_task(self._wait_for_end(settled, harness.stop))
            try:
                await ended
            finally:
                harness.stop.set()
                sender.cancel()
                await finish(sender, ended)
        record.ended = time.time()
        record.processes = harness.processes(record.started)
        logs.refresh()
        record.done = list(logs.done)
        if harness.interrupted:
            record.outcome = "interrupted"
        elif settled.is_set():
            record.outcome = "settled"
        else:
            record.outcome = "timeout"
            record.failure = (f"the demo did not settle within {duration(options.max_duration)} "
                              "(queue empty and workers at zero); see the report")
        return self._finish(record)

    async def _send_bursts(self, queue: Any, bursts: list[tuple[float, int]], record: DemoRecord,
                           recorder: _Recorder) -> None:
        next_number = 0
        loop = asyncio.get_running_loop()
        # A burst is sent as fast as the emulator takes it, so the rule sees it whole, not as a ramp.
        with ThreadPoolExecutor(max_workers=SENDERS, thread_name_prefix="demo-sender") as pool:
            for at, messages in bursts:
                await asyncio.sleep(max(0.0, record.started + at - time.time()))
                started = time.time()
                record.bursts.append((record.t(started), messages))
                recorder.event(f"burst of {plural(messages, 'message')} starts", record.t(started))

                def send(n: int) -> None:
                    queue.send_message(json.dumps({"n": n, "sent": time.time()}))

                def counted(_future: asyncio.Future[None]) -> None:
                    record.sent += 1

                sends = []
                for n in range(next_number, next_number + messages):
                    future = loop.run_in_executor(pool, send, n)
                    future.add_done_callback(counted)
                    sends.append(future)
                next_number += messages
                await asyncio.gather(*sends)
                recorder.event(f"burst: all {messages} sent ({duration(time.time() - started)})")

    async def _wait_for_end(self, settled: asyncio.Event, stop: asyncio.Event) -> None:
        waiters = [asyncio.create_task(settled.wait()), asyncio.create_task(stop.wait())]
        try:
            await asyncio.wait(waiters, timeout=self.options.max_duration, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def _finish(self, record: DemoRecord) -> int:
        options = self.options
        report = options.out_dir / "demo-report.html"
        write_report(report, record)
        _write_timeline(options.out_dir / "demo-timeline.csv", record)
        summary = record.summary(report)
        (options.out_dir / "demo-summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        facts = record.facts()
        pids = [p["pid"] for p in record.processes]
        print("", file=self.out)
        print(
            f"{record.outcome}: {facts['messages_processed']} of {plural(record.sent, 'message')} processed in "
            f"{_seconds(facts['duration_seconds'])}; workers {_workers_path(facts)} "
            f"({plural(_count(facts['scale_ups']), 'scale-up')}, "
            f"{plural(_count(facts['scale_downs']), 'scale-down')}); "
            f"first scale-out {_seconds(facts['burst_to_first_scale_out_seconds'])} after the burst; wait p50 "
            f"{_seconds(facts['wait_p50_seconds'])}, p95 {_seconds(facts['wait_p95_seconds'])}",
            file=self.out,
        )
        workers = plural(len(pids), "worker process", "worker processes")
        print(f"stopped Azurite (pid {record.azurite_pid}) and {workers} "
              f"(pids {', '.join(str(p) for p in pids) or 'none'})", file=self.out)
        print(f"report: {report}", file=self.out)
        print(f"summary: {options.out_dir / 'demo-summary.json'}", file=self.out, flush=True)
        if record.failure:
            print(f"demo: {record.failure}", file=self.err)
        if record.outcome == "interrupted":
            return EXIT_INTERRUPTED
        return EXIT_SETTLED if record.outcome == "settled" else EXIT_FAILED


def _workers_path(facts: dict[str, object]) -> str:
    """`0 -> peak -> last`, as the rule scaled them; workers the clean-up stopped are said apart."""
    final = facts.get("final_workers")
    text = f"0 -> {facts['peak_workers']} -> {final if final is not None else '?'}"
    if isinstance(final, int) and final > 0:
        text += f" when the demo ended (the clean-up stopped the {final} still running)"
    return text


def _write_timeline(path: Path, record: DemoRecord) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["t", "count", "trend", "desired", "ready", "processed", "sent", "reason", "message"])
        for s in record.samples:
            writer.writerow([round(s.t, 2), s.count, None if s.trend is None else round(s.trend, 3), s.desired,
                             s.ready, s.processed, s.sent, s.reason, s.message])


def _seconds(value: object) -> str:
    """A figure of the summary in seconds, printed as every duration is; `-` when there is none."""
    return duration(float(value)) if isinstance(value, int | float) else "-"


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


def run(options: DemoOptions, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """The whole demo; returns the exit status. Every process it started is stopped before it returns."""
    problems = options.problems()
    if problems:
        for line in problems:
            print(f"demo: {line}", file=err)
        return EXIT_USAGE
    try:
        rule = parse_queuescaler(demo_rule_document(options))
    except SpecError as exc:  # the demo's own rule, from bad options
        print(f"demo: the demo rule is not valid: {exc}", file=err)
        return EXIT_USAGE
    demo = Demo(options, rule, out, err)
    return demo.harness.run(demo.main)
