"""`queuescale demo --scenario FILE [--policy RULE.yaml]`: a simulator scenario, run live.

The scenario's arrivals (the simulator's own arrival plan, so both sides see the same arrival times for a seed)
are sent to a queue on Azurite; worker processes (the local process target running `controller.demo.worker`)
take the scenario's service-time distribution, concurrency, start-up delay and scale-in behaviour; the operator's
own `Reconciler` and `policy.decide` scale them from the real azure-queue source's count (through the outage
proxy, controller/demo/outages.py, where the scenario has outages: its polls then fail as the simulator's do). The
run lasts the scenario's duration in real time; then everything is stopped, and the simulator's metrics are
measured from what happened (controller/demo/measure.py). The same scenario and rule are also simulated, so
`demo-summary.json` holds both, key by key.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from controller.demo.harness import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    QUEUE_NAME,
    SECRET,
    SENDERS,
    LiveHarness,
    finish,
)
from controller.demo.measure import Delivery, Lifetime, LiveRecord, SentMessage, measure, service_times
from controller.demo.outages import AZURE_ERRORS, unknown_codes
from controller.model.fields import SecretKeyRef
from controller.model.rule import QueueScaler
from controller.model.sources.azure_queue import AzureQueueSource
from controller.model.textfmt import duration, plural
from controller.reconciler import TickResult
from controller.simulator.run import Metrics, RunResult, rule_contender
from controller.simulator.scenario import ArrivalPlan, Scenario, ServiceTime, plan_arrivals
from controller.targets.local_process import LocalProcessTarget

EXIT_DONE = 0
MAX_LIVE_WORKERS = 64  # processes on one machine
SPREAD_DRAWS = 20  # simulations with other service-time draws, for the simulated spread
KILL_GRACE = 2.0  # scaleIn kill: SIGTERM ends the worker at once; SIGKILL only if it somehow did not
RELEASE_GRACE = 5.0  # scaleIn release: one Update Message per message held, then it exits


@dataclass(frozen=True)
class ScenarioDemoOptions:
    """What `queuescale demo --scenario` was asked for."""

    scenario: str
    policy: str | None = None
    out_dir: Path = Path("queuescale-demo")
    live: bool | None = None


class InputError(Exception):
    """A scenario or rule the live run cannot use: each line names the file and the field."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


def load_inputs(options: ScenarioDemoOptions) -> tuple[Scenario, QueueScaler]:
    """The scenario and the rule (the simulator's default rule for it when none is given), pointed at Azurite."""
    from controller.commands.simulate import InputError as SimInputError
    from controller.commands.simulate import default_rule, load_rules
    from controller.simulator.scenario import ScenarioError, load_scenario

    try:
        scenario = load_scenario(options.scenario)
        rules = load_rules([options.policy]) if options.policy else [default_rule(scenario)]
    except (ScenarioError, SimInputError) as exc:
        raise InputError(exc.lines) from None
    if len(rules) != 1:
        raise InputError([f"{options.policy}: holds {len(rules)} rules; a live run takes one"])
    problems = queue_problems(scenario, options.scenario) or outage_problems(scenario, options.scenario)
    if problems:
        raise InputError(problems)
    return scenario, live_rule(rules[0], options.policy or "the default rule")


def queue_problems(scenario: Scenario, where: str) -> list[str]:
    """Why the live run cannot send the scenario's arrivals as it states them (none: it can). It has one queue on
    Azurite: the arrivals of several queues would go to it together, and what ran would not be the scenario
    simulated beside it, whose pods share out their slots between the queues."""
    queues = scenario.all_queues
    if len(queues) <= 1:
        return []
    return [f"{where}: queues: a live run sends to one queue on Azurite and reads it with one source; "
            f"'{scenario.name}' has {len(queues)} ({', '.join(q.name for q in queues)}): simulate it "
            "(queuescale simulate), or run a scenario of one queue live"]


def outage_problems(scenario: Scenario, where: str) -> list[str]:
    """Why the live run cannot fail the rule's polls as the scenario's outages say (none: it can)."""
    if not scenario.outages:
        return []
    return [f"{where}: outages[].code: a live run answers the rule's polls as Azure does, and knows no answer for "
            f"{code} (it knows {', '.join(AZURE_ERRORS)})" for code in unknown_codes([o for _, o in scenario.outages])]


def live_rule(rule: QueueScaler, where: str) -> QueueScaler:
    """The rule with its one azure-queue source reading the demo's queue on Azurite (its countStrategy kept)."""
    sources = rule.spec.sources
    if len(sources) != 1 or not isinstance(sources[0], AzureQueueSource):
        kinds = ", ".join(s.type for s in sources)
        raise InputError([f"{where}: spec.sources: a live run reads one azure-queue source (Azurite); "
                          f"rule '{rule.name}' has {kinds}"])
    if rule.spec.max_replicas > MAX_LIVE_WORKERS:
        raise InputError([f"{where}: spec.maxReplicas: a live run starts at most {MAX_LIVE_WORKERS} worker "
                          f"processes on this machine, rule '{rule.name}' allows {rule.spec.max_replicas} (lower "
                          "it, or the scenario's workers.maxReplicas for the default rule)"])
    source = AzureQueueSource(type="azure-queue", weight=sources[0].weight, queue_name=QUEUE_NAME,
                              connection_secret_ref=SecretKeyRef(*SECRET),
                              count_strategy=sources[0].count_strategy)
    return replace(rule, spec=replace(rule.spec, sources=(source,)))


def service_time_argument(service: ServiceTime) -> str:
    """The worker's --service-time for the scenario's distribution."""
    if service.distribution == "uniform":
        return f"uniform:{service.minimum!r}:{service.maximum!r}"
    if service.distribution == "lognormal":
        return f"lognormal:{service.mean!r}:{service.stddev!r}"
    return f"{service.distribution}:{service.mean!r}"


def send_schedule(plan: ArrivalPlan) -> list[tuple[float, float]]:
    """(seconds since the start, initial delay) of every message: a second's arrivals spread evenly over it.

    Each message is sent in the middle of its share of the second, never at its very start: the simulator's
    policy acts at the start of a polling second, before that second's arrivals, and a message sent at that
    instant would race the live poll (whose count then depends on which of the two came first)."""
    schedule: list[tuple[float, float]] = []
    for delay, counts in plan.streams:
        for second, n in enumerate(counts):
            schedule.extend((second + (i + 0.5) / n, delay) for i in range(n))
    schedule.sort()
    return schedule


# --------------------------------------------------------------------------------------------------------------


@dataclass
class _Run:
    """What the live run records as it goes."""

    start: float = 0.0
    sent: list[SentMessage] = field(default_factory=list)
    scale_actions: list[tuple[float, int, int]] = field(default_factory=list)
    scale_events: list[dict[str, object]] = field(default_factory=list)
    ready: list[tuple[float, int]] = field(default_factory=list)
    counts: list[tuple[float, int | None]] = field(default_factory=list)  # the queue's count every second
    ticks: list[dict[str, object]] = field(default_factory=list)
    send_lag_max: float = 0.0


class _Reporter:
    """The reconciler's Reporter: records scale actions and prints one line a tick."""

    def __init__(self, run: _Run, out: TextIO) -> None:
        self.run = run
        self.out = out

    async def report(self, result: TickResult) -> None:
        run = self.run
        t = result.time - run.start
        reading = result.observation.readings[0] if result.observation.readings else None
        decision = result.decision
        reason = str(decision.reason) if decision is not None else (
            result.target_error.code if result.target_error is not None else "Unknown")
        state = result.state
        run.ticks.append({"t": round(t, 2), "count": None if reading is None else reading.count,
                          "desired": None if state is None else state.replicas,
                          "ready": None if state is None else state.ready_replicas, "reason": reason,
                          "message": "" if decision is None else decision.message})
        if result.scaled is not None:
            run.scale_actions.append((t, result.scaled.from_replicas, result.scaled.to_replicas))
            run.scale_events.append({"t": round(t, 1), "from": result.scaled.from_replicas,
                                     "to": result.scaled.to_replicas, "reason": reason,
                                     "message": "" if decision is None else decision.message,
                                     **({} if state is None or state.removal is None else {"removal": state.removal})})
        count = "-" if reading is None or reading.count is None else f"{reading.count:g}"
        scaled = f"  {result.scaled.from_replicas} -> {result.scaled.to_replicas}" if result.scaled else ""
        if result.scaled is not None and state is not None and state.removal is not None:
            scaled += f" ({state.removal})"
        desired = "-" if state is None else state.replicas
        ready = "-" if state is None or state.ready_replicas is None else state.ready_replicas
        print(f"+{t:6.1f}s  count {count:>5}  workers {desired} (ready {ready})  sent {len(run.sent)}  "
              f"{reason}{scaled}: {'' if decision is None else decision.message}", file=self.out, flush=True)


def read_worker_logs(folder: Path) -> tuple[list[Delivery], dict[int, float]]:
    """The deliveries the workers logged, and each worker's ready time by pid."""
    received: dict[tuple[int, int, float], dict[str, Any]] = {}
    ended: dict[tuple[int, int, float], tuple[float, bool]] = {}
    released: dict[tuple[int, int, float], float] = {}
    ready: dict[int, float] = {}
    for path in sorted(folder.glob("*.log")) if folder.exists() else []:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a traceback or other noise: the log file keeps it
            if not isinstance(event, dict) or not isinstance(event.get("pid"), int):
                continue
            with contextlib.suppress(TypeError, ValueError, KeyError):
                kind = event.get("event")
                if kind == "ready":
                    ready[event["pid"]] = float(event["ready"])
                    continue
                if kind not in ("received", "done", "lost", "released") or not isinstance(event.get("message"), int):
                    continue
                key = (event["pid"], event["message"], float(event["received"]))
                if kind == "received":
                    received[key] = event
                elif kind == "released":
                    released[key] = float(event["released"])
                else:
                    ended[key] = (float(event["done"]), kind == "done")
    deliveries = []
    for key, event in received.items():
        end = ended.get(key)
        deliveries.append(Delivery(
            message=key[1], pid=key[0], received=key[2], dequeue_count=int(event.get("dequeue_count") or 1),
            ended=None if end is None else end[0], deleted=end is not None and end[1], released=released.get(key),
        ))
    deliveries.sort(key=lambda d: d.received)
    return deliveries, ready


class ScenarioDemo:
    """One live scenario run: `main()` is the async part, run by its harness, which stops everything it started."""

    def __init__(self, options: ScenarioDemoOptions, scenario: Scenario, rule: QueueScaler, out: TextIO,
                 err: TextIO) -> None:
        self.options = options
        self.scenario = scenario
        self.rule = rule
        self.out = out
        self.err = err
        self.harness = LiveHarness(options.out_dir, out, err)

    async def main(self) -> int:
        scenario, rule, options, harness = self.scenario, self.rule, self.options, self.harness
        workers = scenario.workers
        out_dir = options.out_dir
        stop = harness.stop
        harness.clear_worker_logs()
        plan = plan_arrivals(scenario)
        schedule = send_schedule(plan)
        queue = await harness.start_queue()
        if queue is None:
            return EXIT_FAILED
        target = harness.start_workers(
            ["--service-time", service_time_argument(workers.service_time),
             "--concurrency", str(workers.concurrency), "--startup-delay", repr(workers.startup_delay),
             "--scale-in", workers.scale_in,
             "--visibility-timeout", str(math.ceil(scenario.queue.visibility_timeout))],
            {"drain": workers.termination_grace_period, "release": RELEASE_GRACE}.get(workers.scale_in, KILL_GRACE),
            in_flight=rule.spec.in_flight,
        )
        run = _Run()
        print(
            f"scenario {scenario.name}: {duration(scenario.duration)}, {plural(len(schedule), 'message')}; "
            f"workers: start-up {duration(workers.startup_delay)}, concurrency {workers.concurrency}, scale-in "
            f"{workers.scale_in}; rule '{rule.name}': poll every {duration(rule.spec.polling_interval)}, "
            f"{rule.spec.min_replicas} to {plural(rule.spec.max_replicas, 'worker')}; output in {out_dir}/",
            file=self.out, flush=True,
        )
        if workers.initial_replicas:
            await self._start_initial(target, workers.initial_replicas, stop)
        remaining: int | None = None
        outages = [outage for _, outage in scenario.outages]
        async with harness.reconciling(rule, _Reporter(run, self.out), outages) as started:
            run.start = started
            tasks = [
                asyncio.create_task(self._send(queue, schedule, run, stop)),
                asyncio.create_task(self._sample(target, queue, run, stop)),
            ]
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(scenario.duration):
                        await stop.wait()
                if not harness.interrupted:
                    with contextlib.suppress(Exception):
                        remaining = (await asyncio.to_thread(queue.get_queue_properties)).approximate_message_count
            finally:
                end = time.time()
                stop.set()
                await finish(*tasks)
        deliveries, _ = read_worker_logs(harness.workers_dir)
        record = LiveRecord(
            start=run.start, duration=min(scenario.duration, end - run.start),
            concurrency=workers.concurrency, visibility_timeout=scenario.queue.visibility_timeout,
            ttl=scenario.queue.ttl, slo_wait=scenario.slo_wait, initial_replicas=workers.initial_replicas,
            sent=tuple(run.sent), deliveries=tuple(deliveries),
            processes=tuple(Lifetime(p.pid, p.started, p.stopped) for p in target.started),
            scale_actions=tuple(run.scale_actions), ready=tuple(run.ready), remaining=remaining,
        )
        live = measure(record, scenario, plan)
        simulated = await asyncio.to_thread(simulate_rule, scenario, rule)  # it runs its own event loop
        spread = await asyncio.to_thread(simulated_spread, scenario, rule)
        jobs = service_times(record)
        with_live_jobs = (await asyncio.to_thread(simulated_spread, with_service_times(scenario, jobs), rule)
                          if jobs else None)
        assert harness.azurite is not None
        duration_seconds = round(end - run.start, 1)
        processes = harness.processes(run.start)
        summary = {
            "outcome": "interrupted" if harness.interrupted else "completed",
            "scenario": scenario.name,
            "policy": rule.name,
            "duration_seconds": duration_seconds,
            "messages_planned": len(schedule),
            "send_lag_max_seconds": round(run.send_lag_max, 2),
            **live.to_json(),
            "simulated": simulated.metrics.to_json(),
            "simulated_spread": spread,
            "simulated_with_live_jobs": with_live_jobs,
            "azurite": {"pid": harness.azurite.pid, "address": f"127.0.0.1:{harness.azurite.port}"},
            **({} if harness.outage_proxy is None else {"outage_proxy": {
                "address": f"127.0.0.1:{harness.outage_proxy.port}", **asdict(harness.outage_proxy.counts)}}),
            "worker_processes": processes,
            "scale_events": run.scale_events,
        }
        (out_dir / "demo-summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        _write_timeline(out_dir / "demo-timeline.csv", run)
        self._print_comparison(live, simulated.metrics, duration_seconds, len(processes))
        if harness.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_DONE

    async def _start_initial(self, target: LocalProcessTarget, replicas: int, stop: asyncio.Event) -> None:
        """The scenario's initialReplicas, ready before time 0 (the simulator starts with them ready)."""
        state = await target.read()
        await target.scale(replicas, state)
        deadline = time.monotonic() + self.scenario.workers.startup_delay + 60
        while not stop.is_set() and time.monotonic() < deadline:
            if ((await target.read()).ready_replicas or 0) >= replicas:
                return
            await asyncio.sleep(0.1)

    async def _send(self, queue: Any, schedule: list[tuple[float, float]], run: _Run, stop: asyncio.Event) -> None:
        """Each message at its time; a second's arrivals spread over it, several senders when they pile up."""
        loop = asyncio.get_running_loop()
        ttl = -1 if self.scenario.queue.ttl is None else math.ceil(self.scenario.queue.ttl)

        def send(number: int, delay: float) -> None:
            sent = time.time()
            queue.send_message(json.dumps({"n": number, "sent": sent}),
                               visibility_timeout=math.ceil(delay) or None, time_to_live=ttl)
            run.sent.append(SentMessage(number, sent, float(math.ceil(delay))))

        with ThreadPoolExecutor(max_workers=SENDERS, thread_name_prefix="demo-sender") as pool:
            pending: set[asyncio.Future[None]] = set()
            for number, (at, delay) in enumerate(schedule):
                wait = run.start + at - time.time()
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await stop.wait()
                if stop.is_set():
                    break
                run.send_lag_max = max(run.send_lag_max, time.time() - run.start - at)
                future = loop.run_in_executor(pool, send, number, delay)
                pending.add(future)
                future.add_done_callback(pending.discard)
                if len(pending) >= SENDERS * 4:
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    async def _sample(self, target: LocalProcessTarget, queue: Any, run: _Run, stop: asyncio.Event) -> None:
        """Every second: the ready workers (for the bursts' capacity) and the queue's count (for the timeline)."""
        second = 0
        while not stop.is_set():
            state = await target.read()
            t = time.time() - run.start
            run.ready.append((t, state.ready_replicas or 0))
            try:
                props = await asyncio.to_thread(queue.get_queue_properties)
                run.counts.append((t, props.approximate_message_count))
            except Exception:  # a count missed is a gap in the timeline, nothing more
                run.counts.append((t, None))
            second += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, run.start + second - time.time())):
                    await stop.wait()

    def _print_comparison(self, live: Metrics, simulated: Metrics, duration_seconds: float, workers: int) -> None:
        print("", file=self.out)
        if self.harness.interrupted:
            print(f"interrupted after {duration(duration_seconds)}: the live figures cover that "
                  f"much, the simulated ones the whole {duration(self.scenario.duration)}", file=self.out)
        print(f"{'metric':<24}{'live':>10}{'simulated':>11}", file=self.out)
        for key in COMPARED:
            print(f"{key:<24}{_fmt(getattr(live, key)):>10}{_fmt(getattr(simulated, key)):>11}", file=self.out)
        azurite = self.harness.azurite
        print(f"stopped Azurite (pid {azurite.pid if azurite else '-'}) and "
              f"{plural(workers, 'worker process', 'worker processes')}", file=self.out)
        print(f"summary: {self.options.out_dir / 'demo-summary.json'}", file=self.out, flush=True)


COMPARED = (
    "worker_seconds", "busy_worker_seconds", "wait_p50", "wait_p95", "wait_p99", "wait_max", "scale_actions",
    "direction_reversals", "duplicate_deliveries", "scale_in_duplicates", "messages_arrived", "messages_processed",
    "peak_replicas", "oldest_message_age_max", "burst_first_scale_out_mean", "burst_enough_capacity_mean",
)


def _fmt(value: object) -> str:
    return f"{value:g}" if isinstance(value, int | float) else "-" if value is None else str(value)


def simulate_rule(scenario: Scenario, rule: QueueScaler) -> RunResult:
    """The same scenario and rule in the simulator."""
    from controller.simulator.run import simulate

    return simulate(scenario, [rule_contender(rule.name, rule, scenario.start_epoch)])[0]


def simulated_spread(scenario: Scenario, rule: QueueScaler, draws: int = SPREAD_DRAWS) -> dict[str, list[float]]:
    """[min, median, max] of each compared metric over `draws` simulations with the same arrivals and other
    service-time draws: how much one run's own luck moves a figure, against which a live run's can be judged."""
    import statistics

    from controller.simulator.run import run_one

    plan = plan_arrivals(scenario)
    contender = rule_contender(rule.name, rule, scenario.start_epoch)

    async def run_all() -> list[Metrics]:
        # run_one draws service times from the scenario's seed: other seeds, the same arrival plan.
        return [(await run_one(replace(scenario, seed=scenario.seed + 1000 * (k + 1)), plan, contender)).metrics
                for k in range(draws)]

    runs = asyncio.run(run_all())
    spread = {}
    for key in COMPARED:
        found = [getattr(m, key) for m in runs]
        if any(value is None for value in found):  # a burst metric where the scenario has no burst
            continue
        values = sorted(float(value) for value in found)
        spread[key] = [values[0], statistics.median(values), values[-1]]
    return spread


def with_service_times(scenario: Scenario, measured: Sequence[float]) -> Scenario:
    """The scenario given the service times a live run measured, in the order its workers took them: the same
    arrivals (the same seed) and the same jobs in the same order, instead of a draw of the stated distribution. What
    is left to chance is each job's rounding to whole seconds."""
    workers = scenario.workers
    return replace(scenario, workers=replace(workers, service_time=replace(
        workers.service_time, measured=tuple(measured), in_order=True)))


def _write_timeline(path: Path, run: _Run) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["t", "count", "ready"])
        for (t, count), (_, ready) in zip(run.counts, run.ready, strict=False):
            writer.writerow([round(t, 2), count, ready])


def run(options: ScenarioDemoOptions, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """The whole live scenario run; returns the exit status. Every process it started is stopped before it returns."""
    try:
        scenario, rule = load_inputs(options)
    except InputError as exc:
        for line in exc.lines:
            print(f"demo: {line}", file=err)
        return EXIT_USAGE
    demo = ScenarioDemo(options, scenario, rule, out, err)
    return demo.harness.run(demo.main)
