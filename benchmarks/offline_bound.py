"""The fewest worker-seconds any policy meeting a scenario's objective could spend, even one that knew every
arrival in advance: a referee for the cost and efficiency targets, where neither ours nor a constant shows
whether some policy could do better (docs/benchmarks.md, *An offline lower bound*).

    .venv/bin/python -m benchmarks.offline_bound SCENARIO [SCENARIO ...]

Two bounds, each a relaxation of every schedule that meets the objective; the larger is the bound.
- *Capacity with start-ups* (a linear programme): over cells of a few seconds, pods ready, pods started, and the
  slot-seconds of service done by each cell's end. A message due at `d` starts by `d + objective`, so by time `t`
  its job has had min(job, t - d - objective) of service at least, and at most min(job, t - d); ready pods give
  `concurrency` slot-seconds a second; a pod is ready only a start-up after it was asked for, and is billed from
  then. Pods may be fractions: this is a lower bound, not a schedule.
- *One pod when any is needed* (a dynamic programme): pods come whole. A message needs a pod ready within the
  objective and busy for its shortest job, so some pod is billed from its start (a start-up before it is taken)
  to that job's end; messages served by one stretch of billing form a run of due times, and the cheapest cover
  of the due times by such stretches is exact for one pod and a lower bound for any number.
Jobs are drawn when a pod takes them, so both use a job's expected service: the bound is on the expected cost of
a policy (the programmes' optimum is convex in these sums, so the expectation of the bound is at least the bound
of the expectation). The objective is a 99th percentile: up to 1 % of the messages may wait longer. A policy
chooses them before their jobs are drawn, so each saves at most a mean job of service in the first bound; the
second prices them (a Lagrangian relaxation). Duplicate deliveries are ignored: they only add work, though they
also add entries to the percentile (a policy making many would be allowed a few more late messages).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix, vstack

from controller.simulator.scenario import Scenario, ScenarioError, plan_arrivals
from controller.simulator.world import service_outcomes

MAX_CELLS = 12_000  # the programme's cells: a run's length over this many, a second at least
LATE_SHARE = 0.01  # the objective is a 99th percentile
PRICE_SEARCH_STEPS = 30  # of the price of a late message, in the one-pod bound


@dataclass(frozen=True)
class Bound:
    worker_seconds: float  # no policy meeting the objective spends fewer, in expectation; inf: none can meet it
    capacity: float  # the capacity-with-start-ups bound
    one_pod: float  # the one-pod bound
    late_messages: int  # how many may wait longer than the objective
    busy_worker_seconds: float  # the expected service time of every message put, over concurrency
    noise: float  # two standard deviations of that service time over a run's draws of the jobs

    @property
    def at_least(self) -> float:
        """The bound less what a lucky run's jobs could save: the capacity bound rests on the jobs' sum."""
        return max(self.capacity - self.noise, self.one_pod)

    @property
    def efficiency_at_most(self) -> float:
        """The busiest any policy meeting the objective can keep its pods, luck in the draws allowed for."""
        return min(1.0, (self.busy_worker_seconds + self.noise) / self.at_least) if self.at_least > 0 else 1.0


@dataclass(frozen=True)
class _Jobs:
    lengths: np.ndarray  # whole seconds a job holds its slot
    odds: np.ndarray

    @property
    def mean(self) -> float:
        return float(self.lengths @ self.odds)

    @property
    def variance(self) -> float:
        return float((self.lengths - self.mean) ** 2 @ self.odds)

    def spent(self) -> np.ndarray:
        """spent[x]: a job's expected slot-seconds in its first x seconds, x = 0 .. the longest job."""
        return np.array([float(np.minimum(self.lengths, x) @ self.odds) for x in range(int(self.lengths[-1]) + 1)])


def _jobs(scenario: Scenario) -> _Jobs:
    """A job's whole seconds in its slot and their odds, as the simulator draws them (`service_outcomes`)."""
    table = scenario.workers.service_time.table()
    outcomes, odds = service_outcomes(table, math.ceil(scenario.queue.visibility_timeout))
    by_length: dict[int, float] = {}
    for (length, _, _), p in zip(outcomes, odds.tolist(), strict=True):
        by_length[length] = by_length.get(length, 0.0) + p
    lengths = np.array(sorted(by_length), dtype=np.int64)
    return _Jobs(lengths, np.array([by_length[n] for n in lengths.tolist()]))


def _dues(scenario: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """Messages due (visible) in each second: all of them, and those that must be taken within the objective."""
    steps = scenario.steps
    objective = math.floor(scenario.slo_wait)
    every = np.zeros(steps)
    bound = np.zeros(steps)
    plan = plan_arrivals(scenario)
    for index, queue in enumerate(scenario.all_queues):
        ttl = queue.params.ttl
        for delay, counts in plan.streams_of(index):
            shift = math.ceil(delay)
            if shift >= steps:
                continue
            shifted = np.asarray(counts, dtype=np.float64)[:steps - shift]
            every[shift:] += shifted
            if ttl is None or ttl - shift > objective:  # else it expires, untaken, before it is late
                bound[shift:] += shifted
    # One still queued at the end counts its wait so far: late only if due more than the objective before it.
    bound[max(0, steps - objective):] = 0
    return every, bound


def _served_by(due: np.ndarray, spent: np.ndarray, lag: int) -> np.ndarray:
    """For each second t = 1 .. len(due): sum over dues d < t - lag of due[d] x spent[min(t - lag - d, longest)]."""
    longest = len(spent) - 1
    steps = len(due)
    if not longest:
        return np.zeros(steps)  # no job holds a slot a whole second
    recent = np.convolve(due, spent[:longest])  # [m]: sum over x < longest of due[m - x] x spent[x]
    before = np.concatenate(([0.0], np.cumsum(due)))  # [m]: dues before m
    t = np.arange(1, steps + 1)
    m = t - lag
    out = np.zeros(steps)
    ok = m > 0
    mm = m[ok]
    out[ok] = recent[np.minimum(mm, len(recent) - 1)] * (mm < len(recent)) + \
        before[np.clip(mm - longest + 1, 0, steps)] * spent[longest]
    return out


def _capacity(scenario: Scenario, jobs: _Jobs, every: np.ndarray, bound: np.ndarray, late: int) -> float:
    workers = scenario.workers
    steps = scenario.steps
    objective = math.floor(scenario.slo_wait)
    startup = math.ceil(workers.startup_delay)
    spent = jobs.spent()
    need = np.maximum(_served_by(bound, spent, objective) - late * jobs.mean, 0.0)  # slot-seconds done by t
    can = _served_by(every, spent, 0)
    width = max(1, math.ceil(steps / MAX_CELLS))
    ends = np.minimum(np.arange(1, math.ceil(steps / width) + 1) * width, steps)
    cells = len(ends)
    lengths = np.diff(np.concatenate(([0], ends))).astype(np.float64)
    # Variables by cell: ready pods (the cell's mean), pods becoming ready in it (each billed a start-up before),
    # pods stopped in it, pods ready at its end, slot-seconds of service done by its end.
    y, new, stop, alive, done = (i * cells for i in range(5))
    k = np.arange(cells)
    first = np.zeros(cells)
    first[0] = float(workers.initial_replicas)  # ready from the start, before any cell

    def block(terms: list[tuple[int, np.ndarray | float, int]]) -> coo_matrix:
        """One row a cell: each term a variable's offset, its coefficients, and which cell (0: this, -1: the one
        before, absent in the first)."""
        rows, cols, vals = [], [], []
        for offset, coef, shift in terms:
            cells_used = k[k + shift >= 0]
            rows.append(cells_used)
            cols.append(offset + cells_used + shift)
            vals.append(np.broadcast_to(np.asarray(coef, dtype=np.float64), (cells,))[cells_used])
        return coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=(cells, 5 * cells))

    # Ready at a cell's end: those ready at the end of the one before, and those new, less those stopped.
    equal = block([(alive, 1.0, 0), (alive, -1.0, -1), (new, -1.0, 0), (stop, 1.0, 0)])
    upper = vstack([
        # No more ready in a cell than were at its start and came.
        block([(y, 1.0, 0), (alive, -1.0, -1), (new, -1.0, 0)]),
        # At least those ready at its end that were ready before it (a pod stopped does not come back).
        block([(alive, 1.0, 0), (new, -1.0, 0), (y, -1.0, 0)]),
        # Service done in a cell: no more than its ready pods' slots, and never less than none.
        block([(done, 1.0, 0), (done, -1.0, -1), (y, -workers.concurrency * lengths, 0)]),
        block([(done, -1.0, 0), (done, 1.0, -1)]),
    ]).tocsr()
    upper_rhs = np.concatenate((first, np.zeros(3 * cells)))
    cost = np.concatenate((lengths, np.full(cells, float(startup)), np.zeros(3 * cells)))
    at = ends - 1
    earliest = ends - 1 >= startup  # a pod asked for at the first second is ready a start-up later
    bounds = ([(0.0, float(workers.max_replicas))] * cells
              + [(0.0, None if ok else 0.0) for ok in earliest.tolist()]
              + [(0.0, None)] * cells + [(0.0, float(workers.max_replicas))] * cells
              + list(zip(need[at].tolist(), np.maximum(can[at], need[at]).tolist(), strict=True)))
    # HiGHS takes sparse matrices; SciPy's stubs know only dense ones.
    result = linprog(cost, A_ub=cast(Any, upper), b_ub=upper_rhs, A_eq=cast(Any, equal.tocsr()), b_eq=first,
                     bounds=bounds, method="highs")
    if result.status == 2:  # infeasible: maxReplicas cannot do the work in time
        return math.inf
    if result.status != 0:
        raise RuntimeError(f"{scenario.name}: the capacity programme did not solve: {result.message}")
    assert result.fun is not None
    return float(result.fun)


def _one_pod(scenario: Scenario, jobs: _Jobs, bound: np.ndarray, late: int, beside: float) -> float:
    """The one-pod bound; searched to the end only where it could be more than `beside`."""
    steps = scenario.steps
    objective = math.floor(scenario.slo_wait)
    startup = math.ceil(scenario.workers.startup_delay)
    shortest = int(jobs.lengths[0])
    initial = scenario.workers.initial_replicas > 0
    seconds = np.flatnonzero(bound).tolist()
    counts = bound[seconds].tolist()

    def cheapest(price: float) -> float:
        """Cover every due second by billed stretches, or leave its messages late at `price` each. A stretch
        serving dues d_a .. d_b starts by d_a + objective - startup and ends no sooner than d_b + shortest, or a
        start-up and a job after it starts."""
        cost = [0.0] * (len(seconds) + 1)
        p = 0
        earlier = math.inf  # min over stretches begun more than an objective before: cost[a] - its start
        for b, d in enumerate(seconds):
            while seconds[p] < d - objective:
                earlier = min(earlier, cost[p] - max(0, seconds[p] + objective - startup))
                p += 1
            begin = max(0, d + objective - startup)
            options = [cost[b] + price * counts[b],
                       cost[p] + max(0, min(steps, max(d, begin + startup) + shortest) - begin),
                       earlier + min(steps, d + shortest)]
            if initial:
                options.append(float(min(steps, d + shortest)))  # a pod ready from the start
            cost[b + 1] = min(options)
        return cost[-1]

    if not late:
        return cheapest(math.inf)
    # Any price gives a bound; a message's own stretch, a start-up and its job, is a good one. Search further
    # (the dual is concave in the price) only where the bound could pass `beside`.
    price = float(startup + shortest)
    found = cheapest(price) - price * late
    if cheapest(math.inf) <= beside:
        return max(0.0, found)
    low, high = 0.0, float(startup + shortest + objective + steps)
    for _ in range(PRICE_SEARCH_STEPS):
        a, b = low + (high - low) / 3, high - (high - low) / 3
        if cheapest(a) - a * late < cheapest(b) - b * late:
            low = a
        else:
            high = b
    return max(0.0, found, cheapest(low) - low * late)


def offline_bound(scenario: Scenario) -> Bound:
    jobs = _jobs(scenario)
    every, bound = _dues(scenario)
    total = int(every.sum())
    late = total - math.ceil((1 - LATE_SHARE) * total)
    concurrency = scenario.workers.concurrency
    noise = 2 * math.sqrt(total * jobs.variance) / concurrency
    capacity = _capacity(scenario, jobs, every, bound, late)
    one_pod = _one_pod(scenario, jobs, bound, late, capacity - noise)
    return Bound(worker_seconds=max(capacity, one_pod), capacity=capacity, one_pod=one_pod, late_messages=late,
                 busy_worker_seconds=total * scenario.workers.service_time.average / concurrency,
                 noise=noise)


def main(argv: list[str] | None = None) -> None:
    from benchmarks.policy_suite import named_scenario

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="+")
    args = parser.parse_args(argv)
    for name in args.scenarios:
        try:
            scenario = named_scenario(name)
        except ScenarioError as exc:
            parser.error(str(exc))
        b = offline_bound(scenario)
        print(f"{name}: {b.worker_seconds:,.0f} worker-seconds expected at least, {b.at_least:,.0f} on a lucky "
              f"run (capacity {b.capacity:,.0f} less {b.noise:,.0f} of luck, one pod {b.one_pod:,.0f}; "
              f"{b.late_messages} may be late); service time {b.busy_worker_seconds:,.0f}; efficiency at most "
              f"{b.efficiency_at_most:.2f}")


if __name__ == "__main__":
    main()
