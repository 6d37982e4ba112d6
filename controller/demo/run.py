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
import contextlib
import csv
import json
import math
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from controller.demo.azurite import AzuriteError, AzuriteQueueService
from controller.demo.options import DemoOptions
from controller.demo.view import Frame, LiveView
from controller.demo.worker import CONNECTION_ENV
from controller.model.fields import SpecError, format_duration
from controller.model.rule import QueueScaler, parse_queuescaler
from controller.model.secrets import SecretUnavailable
from controller.model.textfmt import duration, plural
from controller.net.http import polling_client
from controller.reconciler import Reconciler, SystemClock, TickResult
from controller.sources import build_source
from controller.sources.azure_auth import scrub
from controller.sources.base import Source, SourceContext
from controller.targets.local_process import LocalProcessTarget

QUEUE_NAME = "demo-jobs"
RULE_NAME = "demo-worker"
SECRET = ("demo-queue", "connection-string")
EXIT_SETTLED, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130
SENDERS = 16  # threads sending a burst


def demo_rule_document(options: DemoOptions) -> dict[str, Any]:
    """The QueueScaler the demo runs, as YAML would hold it (the connection string is a Secret reference)."""
    return {
        "apiVersion": "queuescale.io/v1alpha1",
        "kind": "QueueScaler",
        "metadata": {"name": RULE_NAME, "namespace": "demo"},
        "spec": {
            "scaleTargetRef": {"name": RULE_NAME},
            "minReplicas": 0,
            "maxReplicas": options.max_workers,
            "pollingInterval": format_duration(options.polling_interval),
            "sources": [{
                "type": "azure-queue",
                "queueName": QUEUE_NAME,
                "connectionSecretRef": {"name": SECRET[0], "key": SECRET[1]},
            }],
            "policy": {
                "targetPerReplica": options.target_per_replica,
                "trendWindow": "20s",
                "scaleToZeroDelay": format_duration(options.scale_to_zero_delay),
                "scaleDown": {"delay": format_duration(options.scale_down_delay)},
            },
        },
    }


class _DemoSecrets:
    """The rule's SecretResolver: the one connection string, never shown."""

    def __init__(self, connection_string: str) -> None:
        self._value = connection_string

    def __repr__(self) -> str:
        return "_DemoSecrets(1 secret)"

    async def __call__(self, name: str, key: str) -> str:
        if (name, key) != SECRET:
            raise SecretUnavailable("SecretNotFound", f"Secret '{name}' key '{key}' is not the demo's")
        return self._value


# --------------------------------------------------------------------------------------------------------------
# What happened


@dataclass(frozen=True)
class Sample:
    """One tick, as the demo saw it."""

    t: float  # seconds since the rule started
    count: int | None
    trend: float | None
    desired: int | None
    ready: int | None
    reason: str
    message: str
    scaled_from: int | None
    scaled_to: int | None
    processed: int
    sent: int


def count_change(earlier: Sequence[Sample], latest: Sample) -> float | None:
    """How fast the queue's count moved (messages/s) from the last poll that read it to `latest`."""
    if latest.count is None:
        return None
    for sample in reversed(earlier):
        if sample.count is not None:
            return (latest.count - sample.count) / (latest.t - sample.t) if latest.t > sample.t else None
    return None


@dataclass(frozen=True)
class Done:
    """One message a worker finished (from its log)."""

    replica: str
    sent: float
    received: float
    done: float


class WorkerLogs:
    """Reads the workers' JSON lines as they are written; keeps the finished messages."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.done: list[Done] = []
        self._offsets: dict[Path, int] = {}

    def refresh(self) -> None:
        if not self.folder.exists():
            return
        for path in sorted(self.folder.glob("*.log")):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
            end = data.rfind(b"\n") + 1  # a line being written waits for the next refresh
            self._offsets[path] = offset + end
            for line in data[:end].splitlines():
                self._parse(line)

    def _parse(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return  # a traceback or other noise: the log file keeps it
        if isinstance(event, dict) and event.get("event") == "done":
            with contextlib.suppress(TypeError, ValueError):
                self.done.append(Done(str(event["replica"]), float(event["sent"]), float(event["received"]),
                                      float(event["done"])))


@dataclass
class DemoRecord:
    """The whole run, for the view, the report and the summary."""

    options: DemoOptions
    rule: QueueScaler
    started: float = 0.0  # wall clock when the rule started
    samples: list[Sample] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    bursts: list[tuple[float, int]] = field(default_factory=list)  # (t sent, messages)
    sent: int = 0
    outcome: str = "running"  # settled | timeout | interrupted | failed
    failure: str = ""
    azurite_pid: int | None = None
    azurite_port: int | None = None
    processes: list[dict[str, object]] = field(default_factory=list)
    done: list[Done] = field(default_factory=list)
    ended: float = 0.0

    def t(self, wall: float | None = None) -> float:
        return (time.time() if wall is None else wall) - self.started

    @property
    def scale_events(self) -> list[Sample]:
        return [s for s in self.samples if s.scaled_to is not None]

    def waits(self) -> list[float]:
        return sorted(max(0.0, d.received - d.sent) for d in self.done)

    def facts(self) -> dict[str, object]:
        """The numbers the summary and the report show."""
        ups = [s for s in self.scale_events if (s.scaled_to or 0) > (s.scaled_from or 0)]
        downs = [s for s in self.scale_events if (s.scaled_to or 0) < (s.scaled_from or 0)]
        waits = self.waits()
        first_burst = self.bursts[0][0] if self.bursts else None
        first_up = ups[0].t if ups else None
        peak = max((s.desired or 0 for s in self.samples), default=0)
        # What the rule last asked for: the clean-up stops every worker anyway, which says nothing of the policy.
        final = next((s.desired for s in reversed(self.samples) if s.desired is not None), None)
        all_ready = next(
            (s.t for s in self.samples if first_up is not None and s.t >= first_up and (s.ready or 0) >= peak), None
        )
        return {
            "outcome": self.outcome,
            "duration_seconds": round(self.ended - self.started, 1) if self.ended else None,
            "messages_sent": self.sent,
            "messages_processed": len(self.done),
            "bursts": [{"t": round(t, 1), "messages": n} for t, n in self.bursts],
            "peak_workers": peak,
            "final_workers": final,
            "scale_ups": len(ups),
            "scale_downs": len(downs),
            "burst_to_first_scale_out_seconds": None if first_up is None or first_burst is None
            else round(first_up - first_burst, 1),
            "burst_to_peak_ready_seconds": None if all_ready is None or first_burst is None
            else round(all_ready - first_burst, 1),
            "wait_p50_seconds": _percentile(waits, 0.5),
            "wait_p95_seconds": _percentile(waits, 0.95),
            "wait_max_seconds": round(waits[-1], 2) if waits else None,
        }

    def summary(self, report: Path | None) -> dict[str, object]:
        return {
            **self.facts(),
            "failure": self.failure or None,
            "rule": self.rule.key,
            "azurite": {"pid": self.azurite_pid, "address": f"127.0.0.1:{self.azurite_port}"},
            "worker_processes": self.processes,
            "scale_events": [
                {"t": round(s.t, 1), "from": s.scaled_from, "to": s.scaled_to, "reason": s.reason,
                 "message": s.message}
                for s in self.scale_events
            ],
            "report": None if report is None else str(report),
        }


def _percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    return round(values[max(0, math.ceil(fraction * len(values)) - 1)], 2)


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
    """One demo run. `main()` is the async part; `close()` is the synchronous last-resort clean-up."""

    def __init__(self, options: DemoOptions, out: TextIO, err: TextIO) -> None:
        self.options = options
        self.out = out
        self.err = err
        self.azurite: AzuriteQueueService | None = None
        self.target: LocalProcessTarget | None = None
        self.interrupted = False
        self._main: asyncio.Task[Any] | None = None

    def close(self) -> None:
        """Stop every process still running, whatever happened before. Idempotent."""
        if self.target is not None:
            self.target.close()
        if self.azurite is not None:
            self.azurite.stop()

    async def main(self) -> int:
        options = self.options
        try:
            from azure.storage.queue import QueueServiceClient
        except ImportError:
            print("the demo's workers need the Azure Storage Queue SDK: pip install 'queuescale[demo]' "
                  "(or run `bash scripts/bootstrap`)", file=self.err)
            return EXIT_FAILED
        rule = parse_queuescaler(demo_rule_document(options))
        options.out_dir.mkdir(parents=True, exist_ok=True)
        (options.out_dir / "demo-rule.yaml").write_text(
            yaml.safe_dump(demo_rule_document(options), sort_keys=False), encoding="utf-8")
        workers_dir = options.out_dir / "workers"
        for old in workers_dir.glob("*.log") if workers_dir.exists() else []:
            old.unlink()
        record = DemoRecord(options=options, rule=rule)
        live = self.out.isatty() if options.live is None else options.live
        view = LiveView(self.out, live=live, title=f"queuescale demo: rule {rule.name}")
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        self._main = asyncio.current_task()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._on_signal, stop)
        try:
            return await self._run(rule, record, view, stop, QueueServiceClient)
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            view.close()

    def _on_signal(self, stop: asyncio.Event) -> None:
        if self.interrupted and self._main is not None:
            self._main.cancel()  # a second Ctrl-C: stop waiting for graceful ends (clean-up still runs)
        self.interrupted = True
        stop.set()

    async def _run(self, rule: QueueScaler, record: DemoRecord, view: LiveView, stop: asyncio.Event,
                   service_client: Any) -> int:
        options = self.options
        self.azurite = AzuriteQueueService()
        print(f"starting Azurite on 127.0.0.1:{self.azurite.port} ...", file=self.out, flush=True)
        try:
            await asyncio.to_thread(self.azurite.start)
        except AzuriteError as exc:
            print(f"demo: {exc}", file=self.err)
            return EXIT_FAILED
        record.azurite_pid, record.azurite_port = self.azurite.pid, self.azurite.port
        connection = self.azurite.connection_string
        service = service_client.from_connection_string(connection)
        queue = await asyncio.to_thread(service.create_queue, QUEUE_NAME)
        self.target = LocalProcessTarget(
            [sys.executable, "-m", "controller.demo.worker", "--queue", QUEUE_NAME,
             "--work-time", str(options.work_time)],
            env={**_worker_environ(), CONNECTION_ENV: connection},
            ready_file=True,
            grace_period=options.work_time + 5.0,
            log_dir=options.out_dir / "workers",
        )
        logs = WorkerLogs(options.out_dir / "workers")
        settled = asyncio.Event()
        bursts = [(options.burst_at, options.burst)]
        if options.second_burst:
            bursts.append((options.second_burst_at, options.second_burst))
        recorder = _Recorder(record, view, logs, self.target, settled, lambda: record.sent == sum(n for _, n in bursts))
        print(
            f"queue '{QUEUE_NAME}' created; rule '{rule.name}': poll every {duration(options.polling_interval)}, "
            f"{plural(options.target_per_replica, 'message')} per worker, 0 to {plural(options.max_workers, 'worker')} "
            f"({duration(options.work_time)} of work per message); bursts: "
            + ", ".join(f"{plural(n, 'message')} at +{duration(at)}" for at, n in bursts)
            + f"; output in {options.out_dir}/", file=self.out, flush=True,
        )
        async with polling_client(timeout=5.0) as http:
            source: Source = build_source(rule.spec.sources[0], SourceContext(http=http, secrets=_DemoSecrets(
                connection), namespace=rule.namespace))
            reconciler = Reconciler(rule, [source], self.target, SystemClock(), reporter=recorder)
            record.started = time.time()
            loop_task = asyncio.create_task(reconciler.run(stop))
            sender = asyncio.create_task(self._send_bursts(queue, bursts, record, recorder))
            ended = asyncio.create_task(self._wait_for_end(settled, stop))
            try:
                await ended
            finally:
                stop.set()
                sender.cancel()
                for task in (loop_task, sender, ended):
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                await source.aclose()
                await self.target.aclose()
                record.ended = time.time()
                self.azurite.stop()
                record.processes = [
                    {"pid": p.pid, "replica": p.replica, "started": round(record.t(p.started), 2),
                     "stopped": None if p.stopped is None else round(record.t(p.stopped), 2),
                     "exit_code": p.exit_code, "killed": p.killed}
                    for p in self.target.started
                ]
                logs.refresh()
                record.done = list(logs.done)
        if self.interrupted:
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
        from controller.demo.report import write_report

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


def _worker_environ() -> dict[str, str]:
    """The workers' environment: ours, minus any other connection strings or queuescale secrets."""
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("QUEUESCALE_SECRET_", "AZURE_STORAGE_"))}


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
        return 2
    demo = Demo(options, out, err)
    try:
        return asyncio.run(demo.main())
    except KeyboardInterrupt:
        print("demo: interrupted", file=err)
        return EXIT_INTERRUPTED
    except SpecError as exc:  # the demo's own rule, from bad options
        print(f"demo: the demo rule is not valid: {exc}", file=err)
        return 2
    except BrokenPipeError:
        raise  # the reader of our output went away (`| head`): the command line ends quietly; clean-up still runs
    except Exception as exc:  # e.g. Azurite died under us; everything started is still stopped below
        first_line = (str(exc).splitlines() or [""])[0]
        print(f"demo: failed: {type(exc).__name__}: {scrub(first_line)[:300]}", file=err)
        return EXIT_FAILED
    finally:
        demo.close()

