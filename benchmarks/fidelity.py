"""How well the simulator predicts a live run: each fidelity scenario run both ways, compared metric by metric.

    .venv/bin/python benchmarks/fidelity.py  # all benchmarks/scenarios/fidelity/fidelity-*.yaml, live
    .venv/bin/python benchmarks/fidelity.py --only ramp-kill     # one of them
    .venv/bin/python benchmarks/fidelity.py --from /tmp/fidelity # print again from the summaries of a past run

Each scenario runs live with `queuescale demo --scenario FILE --policy benchmarks/scenarios/fidelity/rule.yaml`
(or `rule-NAME.yaml` beside `fidelity-NAME.yaml`, where the scenario needs a rule of its own): Azurite, real worker
processes, the operator's reconciler; it takes the scenario's own duration, 2-6 minutes. The demo
also simulates the same scenario and rule and writes both into demo-summary.json: once with the scenario's seed,
20 times with other service-time draws, and 20 times given the service times the live run's workers took, in the
order they took them (the same arrivals and the same jobs in the same order: only each job's rounding to whole
seconds is left to chance). This prints, per scenario and metric, the live value, the simulated one and the
difference, the median given the live jobs, and the spread of the other draws. It checks
the agreement the simulator claims (docs/simulator.md, "Fidelity"), against the simulation given the live jobs
(the seed's draw, for a summary without them): worker-seconds within 10 %, p99 wait within max(10 %, 2 s). Where
1 % of the messages or more were delivered again live (workers killed on scale-in), which messages a scale-in
stopped decides the p99 wait, by chance both ways: there the live p99 wait (within 2 s) and the live duplicates,
all of them and those after a scale-in (`scale_in_duplicates`, where the summary has it: what a rule's `inFlight`
changes), must lie within the range of the 20 simulations given the live jobs. The bursts' metrics (first
scale-out and enough capacity, mean seconds after a burst begins) are shown, not judged. Exit 1 when a scenario
disagrees.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from controller.demo.live import COMPARED

ROOT = Path(__file__).resolve().parent.parent
# Not in benchmarks/scenarios/ itself: policy_suite.py runs every scenario there.
SCENARIOS = ROOT / "benchmarks" / "scenarios" / "fidelity"
RULE = SCENARIOS / "rule.yaml"
# The spread: each scenario also simulated with 20 other service-time draws (same arrivals), min .. median .. max.
# The demo's own list: what it measures live and simulates, burst metrics included (shown, not judged).
METRICS = COMPARED


def scenario_files(only: list[str]) -> list[Path]:
    files = sorted(SCENARIOS.glob("fidelity-*.yaml"))
    if only:
        files = [f for f in files if any(name in f.stem for name in only)]
    return files


def rule_for(scenario: Path) -> Path:
    """The rule a fidelity scenario runs with: `rule-NAME.yaml` for `fidelity-NAME.yaml` if there is one, else
    the shared `rule.yaml`."""
    own = scenario.with_name(f"rule-{scenario.stem.removeprefix('fidelity-')}.yaml")
    return own if own.exists() else RULE


def run_live(scenario: Path, out: Path) -> dict[str, object]:
    """One live run through the command line; its summary."""
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "controller", "demo", "--scenario", str(scenario), "--policy",
               str(rule_for(scenario)),
               "--out", str(out), "--no-live"]
    with (out / "demo-output.txt").open("w", encoding="utf-8") as log:
        done = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{scenario.name}: the live run exited {done.returncode}; see {out / 'demo-output.txt'}")
    summary: dict[str, object] = json.loads((out / "demo-summary.json").read_text(encoding="utf-8"))
    return summary


def agreement(live: float, simulated: float, *, floor: float = 0.0) -> tuple[float, bool]:
    """The relative difference (live vs simulated), and whether it is within max(10 %, `floor`)."""
    difference = live - simulated
    relative = difference / simulated if simulated else (0.0 if not difference else float("inf"))
    return relative, abs(difference) <= max(0.10 * abs(simulated), floor)


def table(name: str, summary: dict[str, object]) -> tuple[list[str], list[str]]:
    """The comparison's lines, and the checks that failed."""
    simulated = summary["simulated"]
    assert isinstance(simulated, dict)
    lines = [f"{name} ({summary.get('duration_seconds')} s live, send lag max {summary.get('send_lag_max_seconds')} s)",
             f"  {'metric':<24}{'live':>10}{'simulated':>11}  {'difference':<17}{'live jobs':>10}"
             f"{'simulated, 20 other draws':>27}"]
    spread = summary.get("simulated_spread") or {}
    assert isinstance(spread, dict)
    given = summary.get("simulated_with_live_jobs") or {}
    assert isinstance(given, dict)
    for key in METRICS:
        live, sim = summary.get(key), simulated.get(key)
        if isinstance(live, int | float) and isinstance(sim, int | float):
            relative, _ = agreement(float(live), float(sim))
            shown = f"{live - sim:+.4g}" + (f" ({relative:+.0%})" if sim and abs(relative) < 100 else "")
            low, median, high = spread.get(key) or (None, None, None)
            draws = "" if low is None else f"{low:.4g} .. {median:.4g} .. {high:.4g}"
            jobs = given.get(key)
            matched = "" if not jobs else f"{jobs[1]:.4g}"
            lines.append(f"  {key:<24}{live:>10.4g}{sim:>11.4g}  {shown:<17}{matched:>10}{draws:>27}")
    failed = []
    checks: tuple[tuple[str, float], ...] = (("worker_seconds", 0.0), ("wait_p99", 2.0))
    if stopped_by_chance(summary) and given.get("wait_p99") and given.get("duplicate_deliveries"):
        # The messages scale-ins stopped decide the tail, and which ones they are is chance: live, whatever the
        # newest workers held (with inFlight, the least busy); simulated, the removed pods' share drawn at random
        # (with inFlight, what the least busy hold where messages sit in random slots). There the live p99 wait
        # and the live duplicates must be values the simulations given the live jobs produce (their range).
        checks = (("worker_seconds", 0.0),)
        ranged = [("wait_p99", 2.0), ("duplicate_deliveries", 0.0)]
        if given.get("scale_in_duplicates") and summary.get("scale_in_duplicates") is not None:
            ranged.append(("scale_in_duplicates", 0.0))  # which pods a scale-in removes decides these
        for key, floor in ranged:
            live, (low, _, high) = summary.get(key), given[key]
            lines.append(f"  {key}: chance decides it ({summary.get('duplicate_deliveries')} of "
                         f"{summary.get('messages_arrived')} messages delivered again); live {live:g}, "
                         f"given the live jobs {low:g} .. {high:g}")
            if not isinstance(live, int | float) or not low - floor <= live <= high + floor:
                failed.append(f"{name}: {key} live {live}, outside what 20 simulations given the live jobs "
                              f"produce ({low:g} .. {high:g})")
    for key, floor in checks:
        live = summary.get(key)
        sim = given[key][1] if given.get(key) else simulated.get(key)
        against = "simulated given the live jobs (median)" if given.get(key) else "simulated"
        if isinstance(live, int | float) and isinstance(sim, int | float):
            relative, ok = agreement(float(live), float(sim), floor=floor)
            if not ok:
                failed.append(f"{name}: {key} live {live:g}, {against} {sim:g} ({relative:+.0%})")
    return lines, failed


def stopped_by_chance(summary: dict[str, object]) -> bool:
    """Whether 1 % of the messages or more were delivered again live (the p99 wait is then one of theirs)."""
    again, arrived = summary.get("duplicate_deliveries"), summary.get("messages_arrived")
    return isinstance(again, int | float) and isinstance(arrived, int | float) and again >= 0.01 * arrived > 0


def markdown(summaries: dict[str, dict[str, object]]) -> str:
    """One table for the docs: a row per metric, a column per scenario, each cell `live / simulated / simulated given
    the live jobs (median)`."""
    names = list(summaries)
    lines = ["| metric | " + " | ".join(n.removeprefix("fidelity-") for n in names) + " |",
             "|---|" + "---:|" * len(names)]
    for key in METRICS:
        cells = []
        for name in names:
            summary = summaries[name]
            simulated = summary["simulated"]
            assert isinstance(simulated, dict)
            given = summary.get("simulated_with_live_jobs") or {}
            assert isinstance(given, dict)
            matched = f" / {_short(given[key][1])}" if given.get(key) else ""
            cells.append(f"{_short(summary.get(key))} / {_short(simulated.get(key))}{matched}")
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _short(value: object) -> str:
    """A cell's figure; "-" where there is none (a burst metric of a scenario without bursts)."""
    return f"{value:.4g}" if isinstance(value, float) else "-" if value is None else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="scenarios whose name holds NAME")
    parser.add_argument("--out", default="/tmp/queuescale-fidelity", metavar="DIR", help="one folder per scenario")
    parser.add_argument("--from", dest="previous", metavar="DIR", help="print the summaries a past run left in DIR")
    parser.add_argument("--markdown", action="store_true", help="also print one Markdown table (docs/simulator.md)")
    args = parser.parse_args(argv)
    base = Path(args.previous or args.out)
    failures: list[str] = []
    summaries: dict[str, dict[str, object]] = {}
    for scenario in scenario_files(args.only):
        name = scenario.stem
        out = base / name
        if args.previous:
            summary = json.loads((out / "demo-summary.json").read_text(encoding="utf-8"))
        else:
            print(f"running {name} live ...", file=sys.stderr, flush=True)
            summary = run_live(scenario, out)
        summaries[name] = summary
        lines, failed = table(name, summary)
        print("\n".join(lines), flush=True)
        print()
        failures.extend(failed)
    if args.markdown:
        print(markdown(summaries))
        print()
    if failures:
        print("disagree beyond worker-seconds 10 %, p99 wait max(10 %, 2 s) (where chance decides it, the range of "
              "the simulations given the live jobs):")
        print("\n".join(f"  {line}" for line in failures))
        return 1
    print("every scenario agrees: worker-seconds within 10 %, p99 wait within max(10 %, 2 s) (where chance decides it: "
          "within the simulations' range)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
