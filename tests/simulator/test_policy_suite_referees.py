"""Issue 18: the policy benchmark's referees, capacity kept ready from the first second to the last.

maxReplicas throughout bounds the p99 wait any policy can reach; the cheapest constant replica count meeting the SLO
is found by bisection. Both rest on a FIFO queue's p99 not rising with more ready replicas, measured here rather
than assumed. Scenarios are a quarter of an hour, so every test runs the real simulator in well under a second.
"""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from benchmarks.policy_suite import (
    HEADER,
    KeptReady,
    Row,
    above_bound,
    against,
    cheapest_meeting,
    referees,
    run_scenario,
    scoreboard,
    summary,
    table_rows,
)
from controller.simulator.adapters import StaticAutoscaler
from controller.simulator.run import Contender, Metrics, simulate
from controller.simulator.scenario import Scenario, parse_scenario

COMMON = """
duration: 15m
seed: 3
slo: {waitSeconds: 30}
queue: {visibilityTimeout: 60s}
"""

# 600 messages at once, and three replicas of a 2 s job clear 1.5 a second: the last waits about 400 s.
BEYOND = COMMON + """
name: beyond-capacity
workers: {startupDelay: 10s, serviceTime: 2s, concurrency: 1, maxReplicas: 3}
arrivals:
  - {type: poisson, rate: 0.2}
  - {type: batch, every: 1h, at: 2m, messages: 600, over: 5s}
"""

# A burst 3 minutes in, into pods that take a minute to start (longer than the 30 s objective): a policy that
# waits for the burst misses, replicas kept ready meet it.
LATE = COMMON + """
name: late-start
workers: {startupDelay: 60s, serviceTime: 1s, concurrency: 1, maxReplicas: 20}
arrivals:
  - {type: poisson, rate: 0.1}
  - {type: batch, every: 1h, at: 3m, messages: 200, over: 5s}
"""

# Four messages a second of a 2 s job (at least four replicas busy), an objective a poll and a start-up allow.
STEADY = COMMON + """
name: steady
workers: {startupDelay: 10s, serviceTime: 2s, concurrency: 1, maxReplicas: 50}
arrivals:
  - {type: poisson, rate: 2}
"""


def parsed(text: str) -> Scenario:
    return parse_scenario(yaml.safe_load(text))


def benchmarked(tmp_path: Path, text: str) -> Row:
    """The benchmark's row for the scenario, run as the suite runs a held-out file."""
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return run_scenario(str(path))


def constant(scenario: Scenario, replicas: int) -> Metrics:
    """`replicas` ready from the start and never scaled, built here rather than by the benchmark's own helper."""
    contender = Contender("fixed", lambda world: StaticAutoscaler("fixed", replicas, world), initial_replicas=replicas)
    return simulate(scenario, [contender])[0].metrics


def referee_lines(row: Row) -> list[tuple[str, ...]]:
    lines = table_rows([row])
    start = next(i for i, line in enumerate(lines) if line[2].startswith("any policy"))
    return lines[start:]


def test_a_burst_beyond_what_max_replicas_can_clear_is_one_no_policy_can_meet(tmp_path: Path) -> None:
    row = benchmarked(tmp_path, BEYOND)
    most = row.referees.most
    assert most.replicas == 3
    assert most.metrics.worker_seconds == 3 * 15 * 60  # ready throughout: replicas x duration
    assert most.metrics.wait_p99 > 300  # about 400 s by the arithmetic above
    assert row.referees.cheapest is None
    assert row.ours.wait_p99 > row.slo
    # The offline bound agrees: three pods cannot take 600 jobs of 2 s within 30 s, whatever they know.
    assert row.bound.worker_seconds == float("inf")
    bound_line = next(line for line in table_rows([row]) if "knowing every arrival" in line[2])
    assert bound_line[2:4] == ("no policy meets the SLO, even knowing every arrival (maxReplicas cannot do the work "
                               "in time)", "-")
    assert not above_bound(row, 0.75)  # an efficiency target is moot where no policy meets the objective

    line = summary([row])[0]
    assert (f"misses the 30s SLO; no policy can meet it (maxReplicas throughout: p99 {most.metrics.wait_p99:g}s)"
            in line)
    assert "some policy can" not in line
    assert "meeting the SLO: eff" not in line  # no constant count meets it, so none to compare efficiency with

    kept, cheapest = referee_lines(row)
    assert len(kept) == len(cheapest) == len(HEADER)
    assert kept[2] == "any policy: maxReplicas (3) throughout"
    assert kept[3] == "2,700" and kept[4] == f"{most.metrics.wait_p99:g}"
    assert kept[9] == f"{most.metrics.worker_seconds / row.keda_default.worker_seconds:.2f}"
    assert cheapest[2] == "constant replicas: none meets SLO" and set(cheapest[3:]) == {"-"}


def test_the_bisection_returns_exactly_the_fewest_constant_replicas_that_meet_the_slo() -> None:
    scenario = parsed(LATE)
    found = referees(scenario)
    assert found.most.replicas == 20 and found.most.metrics.wait_p99 <= scenario.slo_wait
    assert found.cheapest is not None
    n = found.cheapest.replicas
    assert 1 < n < 20  # a bisection had to look, not stop at either end

    fewer, enough = constant(scenario, n - 1), constant(scenario, n)
    assert fewer.wait_p99 > scenario.slo_wait >= enough.wait_p99
    assert found.cheapest.metrics == enough
    assert enough.worker_seconds == n * scenario.duration


@pytest.fixture(scope="module")
def some_metrics() -> Metrics:
    """Metrics of one real run, whose p99 wait the bisection tests below replace (the bisection reads only that)."""
    return constant(parsed(STEADY), 4)


@pytest.mark.parametrize("most", [1, 2, 3, 7, 40, 150])
def test_the_bisection_finds_every_threshold_in_about_log2_runs(most: int, some_metrics: Metrics) -> None:
    for threshold in range(1, most + 1):
        runs: list[int] = []

        def run(replicas: int, threshold: int = threshold, runs: list[int] = runs) -> KeptReady:
            runs.append(replicas)
            # Exactly at the objective meets it, a second above misses it.
            return KeptReady(replicas, replace(some_metrics, wait_p99=30.0 if replicas >= threshold else 31.0))

        found = cheapest_meeting(run, KeptReady(most, replace(some_metrics, wait_p99=30.0)), slo=30.0)
        assert found.replicas == threshold
        assert len(runs) <= math.ceil(math.log2(most)) and most not in runs  # the count meeting it is not rerun


def test_the_summary_says_some_policy_can_when_ours_misses_and_replicas_kept_ready_meet_it(tmp_path: Path) -> None:
    row = benchmarked(tmp_path, LATE)
    cheapest = row.referees.cheapest
    assert cheapest is not None and row.ours.wait_p99 > row.slo
    cost = cheapest.metrics.worker_seconds
    line = summary([row])[0]
    assert (f"misses the 30s SLO; some policy can: {cheapest.replicas} replicas kept ready throughout meet it at "
            f"{cost:,.0f} worker-seconds ({cost / row.ours.worker_seconds:.2f}x ours)") in line
    assert "no policy can meet it" not in line

    kept, constant_line = referee_lines(row)
    assert kept[2] == "any policy: maxReplicas (20) throughout"
    assert constant_line[2] == f"constant {cheapest.replicas} replicas (cheapest meeting SLO)"
    assert constant_line[4] == f"{cheapest.metrics.wait_p99:g}"
    assert constant_line[11] == f"{cost / row.floor:.2f}"


def test_the_summary_adds_nothing_to_a_met_slo_and_names_the_constant_when_efficiency_misses(tmp_path: Path) -> None:
    row = benchmarked(tmp_path, STEADY)
    cheapest = row.referees.cheapest
    assert cheapest is not None and row.ours.wait_p99 <= row.slo
    phrase = f"(constant {cheapest.replicas} meeting the SLO: eff {cheapest.metrics.efficiency:.2f})"

    for efficiency, named in ((0.10, True), (0.99, False)):
        line = summary([replace(row, ours=replace(row.ours, efficiency=efficiency))])[0]
        assert "meets the 30s SLO; " in line
        assert "no policy can meet it" not in line and "some policy can" not in line
        assert (f"efficiency {efficiency:.2f} (steady, target 0.75) {phrase}" in line) is named


def test_the_scoreboard_counts_each_target_and_names_each_miss_with_its_figure(tmp_path: Path) -> None:
    late, steady = benchmarked(tmp_path, LATE), benchmarked(tmp_path, STEADY)
    assert late.ours.wait_p99 > late.slo and steady.ours.wait_p99 <= steady.slo
    lines = scoreboard([late, steady])
    assert lines[:2] == ["| target | met on | missed on |", "|---|---|---|"]
    slo, cost, _efficiency, _duplicates, told_duplicates, told_slo, half, double, bursts = lines[2:]
    assert slo == f"| SLO (p99 wait) at the stated serviceTime | 1 of 2 | late-start ({late.ours.wait_p99:g} s vs 30 s) |"
    # The rule told the pods' in-flight counts (inFlight) is a contender of its own, with its own lines.
    assert late.told_in_flight is not None and steady.told_in_flight is not None
    assert told_duplicates.startswith("| the same, the pods' in-flight counts told (`inFlight`) | ")
    told_late = late.told_in_flight.wait_p99
    assert told_slo == ("| SLO (p99 wait), the pods' in-flight counts told | "
                        + (f"1 of 2 | late-start ({told_late:g} s vs 30 s) |" if told_late > 30 else "2 of 2 | none |"))
    assert not any("in-flight" in line for line in scoreboard([replace(steady, told_in_flight=None)]))
    # Efficiency: a steady row at 0.10 misses 0.75; the same row at 0.99 meets it.
    low = replace(steady, ours=replace(steady.ours, efficiency=0.10))
    assert "| steady (0.10 vs 0.75) |" in scoreboard([low])[4]
    assert scoreboard([replace(steady, ours=replace(steady.ours, efficiency=0.99))])[4].endswith("| 1 of 1 | none |")
    # A miss that rounds to its target says so with a third decimal: 0.745 missed 0.75, "0.75 vs 0.75" did not say
    # why (holdout-launch-decay and -lunch-dip, session 30's table).
    near = replace(steady, ours=replace(steady.ours, efficiency=0.7451))
    assert "| steady (0.745 vs 0.75) |" in scoreboard([near])[4]
    assert "efficiency 0.745 (steady, target 0.75)" in summary([near])[0]
    # Cost counts only where some KEDA setting meets the SLO, and says how many it left out.
    tuned = steady.keda_tuned
    assert tuned is not None
    dear = replace(steady, ours=replace(steady.ours, worker_seconds=0.9 * tuned.worker_seconds))
    below = 0.8 * tuned.worker_seconds < steady.bound.at_least
    assert f"| steady (0.90x{', below the bound' if below else ''}) |" in scoreboard([dear])[3]
    assert scoreboard([dear])[3].split(" | ")[1] == "0 of 1"
    # A cost target under the offline bound, or an efficiency target over what it allows, no policy can meet: the
    # miss says so, in the scoreboard and in the summary.
    beyond = replace(dear, bound=replace(steady.bound, capacity=0.85 * tuned.worker_seconds, noise=0.0))
    assert "| steady (0.90x, below the bound) |" in scoreboard([beyond])[3]
    assert (f"(below the bound: 0.8x tuned KEDA is {0.8 * tuned.worker_seconds:,.0f} worker-seconds, and no policy "
            f"meeting the SLO spends less than {0.85 * tuned.worker_seconds:,.0f}, even knowing every arrival)"
            in summary([beyond])[0])
    wasteful = replace(low, bound=replace(steady.bound, capacity=5 * steady.bound.busy_worker_seconds, noise=0.0))
    assert "| steady (0.10 vs 0.75, above the bound) |" in scoreboard([wasteful])[4]
    assert "(no policy meeting the SLO exceeds 0.20)" in summary([wasteful])[0]
    cheap = replace(steady, ours=replace(steady.ours, worker_seconds=0.5 * tuned.worker_seconds))
    assert scoreboard([cheap])[3].endswith("| 1 of 1 | none |")
    priced = [r for r in (late, steady) if r.keda_tuned is not None]
    left_out = 2 - len(priced)
    assert cost.split(" | ")[1].startswith(f"{cost.split(' | ')[1].split(' of ')[0]} of {len(priced)}")
    assert ("no KEDA setting meets the SLO on the other" in cost) is (left_out > 0)
    # More duplicates after a scale-in than KEDA's is a miss; more after work that outlasted its visibility timeout
    # is not (the issue asks for duplicates from scale-in at or below KEDA's).
    many = replace(steady, ours=replace(steady.ours, duplicate_deliveries=tuned.duplicate_deliveries + 5,
                                        scale_in_duplicates=tuned.scale_in_duplicates + 5))
    assert f"steady ({tuned.scale_in_duplicates + 5} vs {tuned.scale_in_duplicates})" in scoreboard([many])[5]
    overruns = replace(steady, ours=replace(steady.ours, duplicate_deliveries=tuned.duplicate_deliveries + 5))
    assert scoreboard([overruns])[5].endswith("| 1 of 1 | none |")
    assert f"({steady.ours.scale_in_duplicates} vs {tuned.scale_in_duplicates} after a scale-in)" \
        in summary([overruns])[0]
    assert half.startswith("| SLO with serviceTime told x0.5 | ") and double.startswith("| SLO with serviceTime told x2 | ")
    assert bursts.startswith("| a burst meets enough capacity within a poll (10 s) plus the start-up | ")


# Two bursts into a 3 s job, in whole seconds: every replica count sees the same service times, message by message.
BURSTS = COMMON + """
name: bursts
workers: {startupDelay: 10s, serviceTime: 3s, concurrency: 2, maxReplicas: 12}
arrivals:
  - {type: poisson, rate: 0.5}
  - {type: batch, every: 6m, at: 1m, messages: 150, over: 10s}
"""


def test_the_p99_wait_does_not_rise_with_more_replicas_kept_ready() -> None:
    scenario = parsed(BURSTS)
    p99 = [constant(scenario, n).wait_p99 for n in range(1, 13)]
    assert all(more <= fewer for fewer, more in pairwise(p99)), p99
    assert p99[0] > p99[-1] > 0  # a scenario where the count matters throughout


def test_with_drawn_service_times_the_p99_wait_rises_with_more_replicas_by_draw_noise_only() -> None:
    # The simulator draws service times per second's dequeue, not per message, so each replica count sees another
    # draw: the p99 may rise a second or two with one replica more (here at 15 and 19 replicas, seed 3). The
    # referees hold to that noise, far below the margins of the benchmark's verdicts.
    scenario = parsed(LATE.replace("serviceTime: 1s", "serviceTime: {distribution: exponential, mean: 1s}"))
    p99 = [constant(scenario, n).wait_p99 for n in range(1, 21)]
    assert all(more <= fewer + 2 for fewer, more in pairwise(p99)), p99
    assert all(p99[n + 3] < p99[n] for n in range(0, 10)), p99  # over a few replicas more, it falls


@pytest.mark.parametrize(("value", "target", "printed"), [
    (0.7451, 0.75, "0.745"), (0.8004, 0.8, "0.8004"), (0.79996, 0.8, "0.79996"), (0.80, 0.8, "0.80"),
    (0.74, 0.75, "0.74"), (1.234, 0.8, "1.23"),
])
def test_a_figure_beside_its_target_prints_as_many_decimals_as_tell_them_apart(
        value: float, target: float, printed: str) -> None:
    assert against(value, target) == printed
