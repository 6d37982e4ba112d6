"""Running a scenario against each policy, and the metrics that compare them.

One asyncio event loop runs the whole simulation; at each polling time of the virtual clock the policy's
controller is awaited once (for our rules, `Reconciler.tick()`), and the world advances second by second.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import multiprocessing.pool
import signal
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol, cast

from controller.model.rule import QueueScaler
from controller.simulator.adapters import RuleAutoscaler, TickRecord
from controller.simulator.scenario import ArrivalPlan, Burst, Scenario, plan_arrivals
from controller.simulator.world import MultiQueueWorld, Sample, SimWorld, World

MAX_SAMPLES = 4000


class Autoscaler(Protocol):
    """Anything that scales the simulated Deployment: our rules, and the baselines."""

    label: str
    next_at: float

    async def act(self, t: int) -> None:
        """Look at the world at second `t` and maybe scale it; set `next_at` to when to act again."""
        ...


@dataclass(frozen=True)
class Contender:
    """A policy to compare: its label and how to build its autoscaler on a fresh world."""

    label: str
    # A scenario with several queues hands it a MultiQueueWorld, which answers all an autoscaler reads of a World
    # (counts, replicas, set_desired, queue_world): kept as World so that builders written for one queue still fit.
    build: Callable[[World], Autoscaler]
    initial_replicas: int | None = None  # None: the scenario's workers.initialReplicas


def rule_contender(label: str, rule: QueueScaler, start_epoch: float) -> Contender:
    """A rule as a contender: the operator's reconciler for it, on each fresh world, its clock at `start_epoch`."""

    def build(world: World) -> RuleAutoscaler:
        return RuleAutoscaler(label, rule, world, start_epoch)

    return Contender(label, build)


@dataclass(frozen=True)
class BurstReaction:
    """For one burst: seconds from its start to the first scale-out and to enough capacity (None: never).

    The first scale-out must come before the next burst starts (None when capacity was already there).

    Enough capacity is `needed_replicas` ready: the replicas that process the burst's messages within the
    longer of its spread and the SLO wait, at most workers.maxReplicas. It depends on the scenario, not the policy.
    """

    start: float
    needed_replicas: int
    first_scale_out: float | None
    enough_capacity: float | None


@dataclass(frozen=True)
class OutageReport:
    """What a policy did while a queue's polls failed: the Deployment's replicas (as set) over the window."""

    queue: str
    start: float
    end: float
    failure: str  # "error" (with its code) or "timeout"
    replicas_at_start: int  # just before the window
    replicas_min: int
    replicas_max: int
    replicas_at_end: int  # in the window's last second
    first_scale: float | None  # seconds from the start to the first scale during the window; None: none


@dataclass(frozen=True)
class Metrics:
    worker_seconds: float
    busy_worker_seconds: float
    efficiency: float
    wait_p50: float
    wait_p95: float
    wait_p99: float
    wait_max: float
    wait_mean: float
    oldest_message_age_max: float
    slo_violation_seconds: int
    scale_actions: int
    direction_reversals: int
    duplicate_deliveries: int
    scale_in_duplicates: int  # of duplicate_deliveries, those whose previous delivery a scale-in stopped
    expired_messages: int
    messages_arrived: int
    messages_processed: int
    messages_remaining: int
    peak_replicas: int
    mean_replicas: float
    burst_first_scale_out_mean: float | None
    burst_enough_capacity_mean: float | None
    bursts_short_of_capacity: int  # bursts during which the needed replicas were never ready
    bursts: tuple[BurstReaction, ...] = ()
    outage_replicas_min: int | None = None  # over every outage window; None: the scenario has none
    outage_replicas_max: int | None = None
    outages: tuple[OutageReport, ...] = ()

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["bursts"] = [asdict(b) for b in self.bursts]
        data["outages"] = [asdict(o) for o in self.outages]
        return data


@dataclass
class RunResult:
    label: str
    metrics: Metrics
    timeline: list[Sample] = field(default_factory=list)
    scale_actions: list[tuple[int, int, int]] = field(default_factory=list)
    wait_histogram: dict[int, int] = field(default_factory=dict)
    ticks: list[TickRecord] = field(default_factory=list)


def needed_replicas(scenario: Scenario, burst: Burst) -> int:
    """Replicas that process a burst within the longer of its spread and the SLO wait, capped at the maximum."""
    workers = scenario.workers
    work = burst.messages * workers.service_time.average / workers.concurrency
    return max(1, min(workers.max_replicas, math.ceil(work / max(burst.spread, scenario.slo_wait, 1.0))))


def percentile(histogram: dict[int, int], fraction: float) -> float:
    """Nearest-rank percentile of a histogram of whole seconds; 0 when empty."""
    total = sum(histogram.values())
    if not total:
        return 0.0
    rank = max(1, math.ceil(fraction * total))
    seen = 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= rank:
            return float(value)
    return float(max(histogram))


def outage_reports(scenario: Scenario, initial: int, scale_actions: Sequence[tuple[int, int, int]],
                   ) -> tuple[OutageReport, ...]:
    """Each outage window with the replicas the policy set during it (from the scale actions)."""
    reports = []
    for queue, outage in scenario.outages:
        start, end = math.ceil(outage.start), math.ceil(min(outage.end, scenario.duration))
        # The replicas just before the window, then each scale within it (a scale in the window's first second
        # already answers a failed poll: the policies act before the world steps).
        at_start = initial
        seen: list[int] = []
        first: float | None = None
        for t, _, to in scale_actions:
            if t < start:
                at_start = to
            elif t < end:
                seen.append(to)
                if first is None:
                    first = float(t - outage.start)
        values = [at_start, *seen]
        reports.append(OutageReport(
            queue=queue, start=outage.start, end=outage.end,
            failure=outage.failure if outage.failure == "timeout" else f"error {outage.code}",
            replicas_at_start=at_start, replicas_min=min(values), replicas_max=max(values),
            replicas_at_end=values[-1], first_scale=first,
        ))
    return tuple(reports)


def build_world(scenario: Scenario, initial_replicas: int) -> SimWorld:
    """A fresh world for the scenario: one queue, or several sharing the workers."""
    workers = scenario.workers
    queues = scenario.all_queues
    world: SimWorld
    if len(queues) == 1:
        world = World(
            scenario.queue, workers, workers.service_time.table(), scenario.seed,
            slo_wait=scenario.slo_wait, initial_replicas=initial_replicas, name=queues[0].name,
        )
    else:
        world = MultiQueueWorld(
            [(q.name, q.params) for q in queues], workers, workers.service_time.table(), scenario.seed,
            slo_wait=scenario.slo_wait, initial_replicas=initial_replicas,
        )
    for index, queue in enumerate(queues):
        world.queue_world(index).outages = queue.outages
    return world


async def run_one(
    scenario: Scenario,
    plan: ArrivalPlan,
    contender: Contender,
    *,
    record_timeline: bool = False,
    progress: Callable[[int], None] | None = None,
) -> RunResult:
    """Simulate one policy over the whole scenario."""
    workers = scenario.workers
    initial = workers.initial_replicas if contender.initial_replicas is None else contender.initial_replicas
    world = build_world(scenario, initial)
    autoscaler = contender.build(cast(World, world))
    steps = scenario.steps
    streams = [
        (math.ceil(delay), counts, index)
        for index in range(len(scenario.all_queues)) for delay, counts in plan.streams_of(index)
    ]
    single = streams[0][1] if len(streams) == 1 and streams[0][0] == 0 else None
    every = max(1, math.ceil(steps / MAX_SAMPLES)) if record_timeline else 0
    timeline: list[Sample] = []
    sampled_arrivals = 0
    bursts = list(plan.burst_starts)
    needed = {b.start: needed_replicas(scenario, b) for b in plan.bursts}
    burst_index = 0
    enough: dict[float, float] = {}
    peak = world.desired
    report_every = max(1, steps // 100)
    put = world.put
    step = world.step

    # The loop runs once per simulated second: what it tests is kept in locals, each the next second it matters.
    act = autoscaler.act
    next_act = autoscaler.next_at
    inf = math.inf
    next_burst = bursts[0] if bursts else inf
    next_report = 0 if progress is not None else steps
    for t in range(steps):
        if t >= next_act:
            await act(t)
            next_act = autoscaler.next_at
            if world.desired > peak:
                peak = world.desired
        if single is not None:
            n = single[t]
            if n:
                put(t, n)
        else:
            n = 0
            for delay, counts, queue in streams:
                if counts[t]:
                    put(t, counts[t], delay, queue)
                    n += counts[t]
        step(t)
        if t >= next_burst:
            if world.ready >= needed[next_burst]:
                enough[next_burst] = t - next_burst
                burst_index += 1
            elif burst_index + 1 < len(bursts) and t >= bursts[burst_index + 1]:
                burst_index += 1  # the next burst began before this one was absorbed
            next_burst = bursts[burst_index] if burst_index < len(bursts) else inf
        if every:
            sampled_arrivals += n
            if (t + 1) % every == 0 or t == steps - 1:  # arrivals since the previous row, through t
                timeline.append(world.sample(t, sampled_arrivals))
                sampled_arrivals = 0
        if t >= next_report:
            assert progress is not None
            progress(t)
            next_report += report_every

    world.count_unserved(steps)
    tally = world.totals()
    reactions = []
    starts = plan.burst_starts
    for index, start in enumerate(starts):
        # A scale-out after the next burst began answers that burst, not this one.
        until = starts[index + 1] if index + 1 < len(starts) else math.inf
        first_out = next((a for a, b, c in tally.scale_actions if start <= a < until and c > b), None)
        reactions.append(BurstReaction(
            start=start,
            needed_replicas=needed[start],
            first_scale_out=None if first_out is None else first_out - start,
            enough_capacity=enough.get(start),
        ))
    outs = [r.first_scale_out for r in reactions if r.first_scale_out is not None]
    caps = [r.enough_capacity for r in reactions if r.enough_capacity is not None]
    outages = outage_reports(scenario, initial, tally.scale_actions)
    histogram = tally.wait_histogram
    delivered = sum(histogram.values())
    busy = tally.busy_slot_seconds / workers.concurrency
    metrics = Metrics(
        worker_seconds=float(tally.worker_seconds),
        busy_worker_seconds=round(busy, 3),
        efficiency=round(busy / tally.worker_seconds, 4) if tally.worker_seconds else 0.0,
        wait_p50=percentile(histogram, 0.50),
        wait_p95=percentile(histogram, 0.95),
        wait_p99=percentile(histogram, 0.99),
        wait_max=float(max(histogram, default=0)),
        wait_mean=round(sum(w * c for w, c in histogram.items()) / delivered, 3) if delivered else 0.0,
        oldest_message_age_max=float(tally.oldest_age_max),
        slo_violation_seconds=tally.slo_violation_seconds,
        scale_actions=len(tally.scale_actions),
        direction_reversals=world.reversals,
        duplicate_deliveries=tally.duplicates,
        scale_in_duplicates=tally.scale_in_duplicates,
        expired_messages=tally.expired,
        messages_arrived=tally.arrived,
        messages_processed=tally.processed,
        messages_remaining=world.remaining,
        peak_replicas=max(peak, max((c for _, _, c in tally.scale_actions), default=0)),
        mean_replicas=round(tally.worker_seconds / steps, 3),
        burst_first_scale_out_mean=round(sum(outs) / len(outs), 1) if outs else None,
        burst_enough_capacity_mean=round(sum(caps) / len(caps), 1) if caps else None,
        bursts_short_of_capacity=sum(1 for r in reactions if r.enough_capacity is None),
        bursts=tuple(reactions),
        outage_replicas_min=min((o.replicas_min for o in outages), default=None),
        outage_replicas_max=max((o.replicas_max for o in outages), default=None),
        outages=outages,
    )
    ticks: list[TickRecord] = list(getattr(getattr(autoscaler, "recorder", None), "ticks", []))
    return RunResult(
        label=contender.label, metrics=metrics, timeline=timeline, scale_actions=list(tally.scale_actions),
        wait_histogram=dict(histogram), ticks=ticks,
    )


# What the forked workers of a parallel run read: set just before the pool forks, so closures (the contenders'
# builders) need no pickling; only the results travel back.
_FORKED: tuple[Scenario, ArrivalPlan, Sequence[Contender], bool] | None = None


# The signals a forked worker takes its own way (see `worker_pool`).
_WORKER_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def _worker_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _WORKER_SIGNALS)


def worker_pool(jobs: int) -> multiprocessing.pool.Pool:
    """The forked pool of a parallel run. Its workers die on SIGTERM and ignore SIGINT (Ctrl-C reaches the parent,
    which stops the pool). A fork inherits the parent's Python handlers: under one that raises on SIGTERM (the test
    runner's does), `Pool.terminate()` raised an exception wherever a finishing worker had got to, and now and then
    left it waiting for good on a lock it had been holding, with the parent waiting on it. The two signals stay
    blocked from the fork until the worker has set its own handlers, so none lands in between."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _WORKER_SIGNALS)
    try:
        return multiprocessing.get_context("fork").Pool(jobs, initializer=_worker_signals)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _run_forked(index: int) -> tuple[int, RunResult]:
    assert _FORKED is not None
    scenario, plan, contenders, record = _FORKED
    return index, asyncio.run(run_one(scenario, plan, contenders[index], record_timeline=record))


def simulate(
    scenario: Scenario,
    contenders: Sequence[Contender],
    *,
    record_timeline: bool = False,
    progress: Callable[[float], None] | None = None,
    jobs: int = 1,
) -> list[RunResult]:
    """Every contender on the same arrivals (one plan, one seed): in one event loop, or with `jobs` > 1 in that
    many processes (each contender's run is independent, so the results are the same either way)."""
    plan = plan_arrivals(scenario)
    jobs = min(jobs, len(contenders))
    if jobs > 1 and "fork" in multiprocessing.get_all_start_methods():
        return _simulate_in_processes(scenario, plan, contenders, record_timeline, progress, jobs)

    async def run_all() -> list[RunResult]:
        results = []
        for index, contender in enumerate(contenders):
            report: Callable[[int], None] | None = None
            if progress is not None:
                def report(t: int, index: int = index) -> None:
                    progress((index + t / scenario.steps) / len(contenders))
            results.append(await run_one(scenario, plan, contender, record_timeline=record_timeline,
                                         progress=report))
        if progress is not None:
            progress(1.0)
        return results

    return asyncio.run(run_all())


def _simulate_in_processes(
    scenario: Scenario, plan: ArrivalPlan, contenders: Sequence[Contender], record_timeline: bool,
    progress: Callable[[float], None] | None, jobs: int,
) -> list[RunResult]:
    global _FORKED
    _FORKED = (scenario, plan, contenders, record_timeline)
    results: list[RunResult | None] = [None] * len(contenders)
    try:
        with worker_pool(jobs) as pool:
            for done, (index, result) in enumerate(pool.imap_unordered(_run_forked, range(len(contenders))), 1):
                results[index] = result
                if progress is not None:
                    progress(done / len(contenders))
    finally:
        _FORKED = None
    return [r for r in results if r is not None]
