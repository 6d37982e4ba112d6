"""What the default demo ran and saw: its rule, each tick, each message the workers finished, the whole run.

Kept apart from the run (controller/demo/run.py) so the report reads the record without importing the run.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.demo.harness import QUEUE_NAME, SECRET
from controller.demo.measure import percentile
from controller.demo.options import DemoOptions
from controller.model.fields import format_duration
from controller.model.rule import API_GROUP, API_VERSION, KIND, QueueScaler

RULE_NAME = "demo-worker"


def demo_rule_document(options: DemoOptions) -> dict[str, Any]:
    """The QueueScaler the demo runs, as YAML would hold it (the connection string is a Secret reference)."""
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
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
    """The summary's nearest-rank percentile, to the hundredth; None when nothing was processed."""
    return round(percentile(values, fraction), 2) if values else None
