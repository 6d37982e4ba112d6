"""Seeds: how often each verdict of the policy benchmark holds when only the random draws change.

benchmarks/policy_suite.py runs every scenario once, with the seed its file states; a p99 within a few seconds of
the objective, or a KEDA setting picked as the cheapest meeting it, may then be the luck of that seed. This runs
each scenario again with other seeds (seed + 1000 k, k = 0 .. --seeds - 1; k = 0 is the suite's own run): same
shape, other arrivals and service times. For each it counts the seeds on which queuescale meets the objective, told
serviceTime x1, x0.5 and x2, and told the pods' in-flight counts (`inFlight`), and on which the KEDA setting the
suite picked (tuned on seed k = 0) still meets it; and it sets queuescale's worker-seconds against KEDA tuned again
on each seed (the cheapest setting of the same sweep meeting the objective on that seed: an oracle per seed, more
than anyone tuning by hand could do) and against the cheapest setting meeting it on every seed (what a user tuning
by hand, for every day and not one, would pick), worker-seconds summed over the seeds.

    .venv/bin/python -m benchmarks.seeds [--seeds 5] [--scenario NAME ...] [--jobs 2] [--markdown docs/seeds.md]
        [--store DIR] [--ours-only]

--ours-only runs queuescale's rule alone (told x1, x0.5, x2 and inFlight), without the KEDA sweep: the columns of
KEDA then say so, and a policy change can be judged over seeds in minutes.

A full run takes hours; with --store each seed's result is written to DIR as it finishes, and a run started again
with the same DIR takes what is there instead of running it again, so a run cut off loses only the seeds under way.
A stored result counts only for the code it was made with (a digest of controller/ and benchmarks/, and the
scenario's file): change the policy and the store starts over.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.policy_suite import (
    HOLDOUT,
    IN_FLIGHT_LABEL,
    ROOT,
    SERVICE_TIME_FACTORS,
    contenders,
    keda_setting,
    named_scenario,
    ours_label,
)
from controller.simulator.run import simulate
from controller.simulator.scenario import Scenario, library

SEED_STEP = 1000  # seed k of a scenario is its own seed + SEED_STEP x k


def seeded(scenario: Scenario, k: int) -> Scenario:
    """The scenario with its k-th seed (k = 0: the seed its file states)."""
    return scenario if k == 0 else replace(scenario, seed=scenario.seed + SEED_STEP * k)


@dataclass(frozen=True)
class SeedRun:
    """One seed of one scenario: queuescale's p99 told serviceTime x each factor, its worker-seconds (x1), each
    KEDA setting's (p99, worker-seconds), and queuescale's p99 told the pods' in-flight counts (None: not run)."""

    k: int
    ours: dict[float, float]  # serviceTime factor -> p99 wait
    ours_worker_seconds: float
    keda: dict[str, tuple[float, float]]  # label -> (p99 wait, worker-seconds)
    in_flight: float | None = None


def run_seed(name: str, k: int, ours_only: bool = False) -> SeedRun:
    """Seed k of the scenario, every contender of the suite (`ours_only`: queuescale's alone, no KEDA sweep)."""
    scenario = seeded(named_scenario(name), k)
    runners = [c for c in contenders(scenario, SERVICE_TIME_FACTORS)
               if not (ours_only and c.label.startswith("keda-"))]
    results = {r.label: r.metrics for r in simulate(scenario, runners)}
    ours = {f: results[ours_label(f)].wait_p99 for f in (1.0, *SERVICE_TIME_FACTORS)}
    keda = {label: (m.wait_p99, m.worker_seconds) for label, m in results.items() if label.startswith("keda-")}
    return SeedRun(k, ours, results["queuescale"].worker_seconds, keda, results[IN_FLIGHT_LABEL].wait_p99)


def code_digest() -> str:
    """What every seed's result depends on besides its scenario: the simulator, the policy, the sweep."""
    digest = hashlib.sha256()
    for path in sorted([*(ROOT / "controller").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


class Store:
    """Finished seeds on disk, one JSON file each, valid for one code digest and one scenario text."""

    def __init__(self, folder: Path, digest: str) -> None:
        self.folder, self.digest = folder, digest
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, name: str, k: int) -> Path:
        return self.folder / f"{Path(name).stem}-{k}.json"

    @staticmethod
    def _scenario_text(name: str) -> str:
        path = Path(name) if Path(name).is_absolute() else ROOT / name
        return path.read_text() if path.suffix == ".yaml" else name

    def load(self, name: str, k: int) -> SeedRun | None:
        path = self._path(name, k)
        if not path.exists():
            return None
        stored = json.loads(path.read_text())
        if stored.get("digest") != self.digest or stored.get("scenario") != self._scenario_text(name):
            return None
        return SeedRun(k, {float(f): p99 for f, p99 in stored["ours"].items()}, stored["ours_worker_seconds"],
                       {label: (p99, cost) for label, (p99, cost) in stored["keda"].items()}, stored.get("in_flight"))

    def save(self, name: str, run: SeedRun) -> None:
        text = json.dumps({"digest": self.digest, "scenario": self._scenario_text(name), "ours": run.ours,
                           "ours_worker_seconds": run.ours_worker_seconds, "keda": run.keda,
                           "in_flight": run.in_flight})
        path = self._path(name, run.k)
        temporary = path.with_suffix(".part")
        temporary.write_text(text)
        temporary.replace(path)  # a run cut off mid-write leaves no half file behind


def run_all(tasks: Sequence[tuple[str, int]], jobs: int, store: Store | None,
            ours_only: bool = False) -> dict[tuple[str, int], SeedRun]:
    """Every (scenario, seed) of `tasks`: from the store where it holds them, run in `jobs` processes otherwise."""
    done: dict[tuple[str, int], SeedRun] = {}
    if store is not None:
        for name, k in tasks:
            stored = store.load(name, k)
            if stored is not None:
                done[(name, k)] = stored
    left = [task for task in tasks if task not in done]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_seed, name, k, ours_only): (name, k) for name, k in left}
        for future in as_completed(futures):
            name, k = futures[future]
            done[(name, k)] = future.result()
            if store is not None:
                store.save(name, done[(name, k)])
    return done


def tuned(run: SeedRun, slo: float) -> str | None:
    """The cheapest KEDA setting meeting `slo` on this seed, or None."""
    meeting = [(cost, label) for label, (p99, cost) in run.keda.items() if p99 <= slo]
    return min(meeting)[1] if meeting else None


@dataclass(frozen=True)
class Spread:
    """What the seeds of one scenario show."""

    scenario: str
    slo: float
    seeds: int
    met: dict[float, int]  # serviceTime factor -> seeds on which queuescale meets the SLO
    p99: dict[float, tuple[float, float]]  # factor -> (lowest, highest) p99 over the seeds
    setting: str | None  # the KEDA setting tuned on seed 0
    setting_met: int  # seeds on which that setting meets the SLO
    keda_met: int  # seeds on which some KEDA setting meets it
    ratios: tuple[float, ...]  # ours / KEDA re-tuned, on the seeds where some setting meets it
    steady: str | None  # the cheapest KEDA setting (over all the seeds) meeting the SLO on every seed
    steady_ratio: float | None  # ours / that setting, worker-seconds summed over the seeds
    in_flight_met: int | None = None  # seeds on which queuescale told `inFlight` meets it (None: not run on all)
    keda_run: bool = True  # False: no KEDA setting was run (--ours-only)


def spread(name: str, slo: float, runs: Sequence[SeedRun]) -> Spread:
    runs = sorted(runs, key=lambda r: r.k)
    factors = list(runs[0].ours)
    setting = tuned(runs[0], slo)
    ratios = []
    for run in runs:
        best = tuned(run, slo)
        if best is not None:
            ratios.append(run.ours_worker_seconds / run.keda[best][1])
    everywhere = [(sum(r.keda[label][1] for r in runs), label) for label in runs[0].keda
                  if all(r.keda[label][0] <= slo for r in runs)]
    cheapest = min(everywhere, default=None)
    steady = None if cheapest is None else cheapest[1]
    steady_ratio = None if cheapest is None else sum(r.ours_worker_seconds for r in runs) / cheapest[0]
    return Spread(
        scenario=name, slo=slo, seeds=len(runs),
        met={f: sum(r.ours[f] <= slo for r in runs) for f in factors},
        p99={f: (min(r.ours[f] for r in runs), max(r.ours[f] for r in runs)) for f in factors},
        setting=setting,
        setting_met=0 if setting is None else sum(r.keda[setting][0] <= slo for r in runs),
        keda_met=sum(tuned(r, slo) is not None for r in runs),
        ratios=tuple(ratios), steady=steady, steady_ratio=steady_ratio,
        in_flight_met=(None if any(r.in_flight is None for r in runs)
                       else sum(r.in_flight is not None and r.in_flight <= slo for r in runs)),
        keda_run=any(r.keda for r in runs),
    )


HEADER = ("scenario", "SLO s", "ours meets (x1 / x0.5 / x2)", "our p99 s at x1", "ours told inFlight meets",
          "KEDA tuned on seed 0 meets",
          "ours / KEDA re-tuned per seed", "ours / the cheapest KEDA meeting it on every seed")


def cells(s: Spread) -> tuple[str, ...]:
    met = " / ".join(f"{s.met[f]}/{s.seeds}" for f in s.met)
    low, high = s.p99[1.0]
    p99 = f"{low:.0f}" if low == high else f"{low:.0f}-{high:.0f}"
    setting = "no setting meets" if s.setting is None else f"{s.setting_met}/{s.seeds} ({keda_setting(s.setting)})"
    if not s.ratios:
        ratio = "no setting meets on any seed"
    else:
        ratio = f"{statistics.median(s.ratios):.2f}x ({min(s.ratios):.2f}-{max(s.ratios):.2f})"
        if len(s.ratios) < s.seeds:
            ratio += f" on the {len(s.ratios)} seeds some setting meets"
    steady = ("no setting meets on every seed" if s.steady is None or s.steady_ratio is None
              else f"{s.steady_ratio:.2f}x ({keda_setting(s.steady)})")
    in_flight = "not run" if s.in_flight_met is None else f"{s.in_flight_met}/{s.seeds}"
    if not s.keda_run:
        return s.scenario, f"{s.slo:g}", met, p99, in_flight, "KEDA not run", "KEDA not run", "KEDA not run"
    return s.scenario, f"{s.slo:g}", met, p99, in_flight, setting, ratio, steady


def totals(spreads: Sequence[Spread]) -> str:
    runs = sum(s.seeds for s in spreads)
    met = " / ".join(f"{sum(s.met[f] for s in spreads)}" for f in spreads[0].met)
    told = [s.in_flight_met for s in spreads]
    in_flight = ("" if any(m is None for m in told)
                 else f"; told the pods' in-flight counts, in {sum(m for m in told if m is not None)}")
    return f"queuescale meets the objective in {met} of {runs} runs (serviceTime x1 / x0.5 / x2){in_flight}"


def markdown(spreads: Sequence[Spread]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(cells(s)) + " |" for s in spreads]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--scenario", action="append", help="only these (names or files); default: all")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--markdown", type=Path, help="write the table to this Markdown file")
    parser.add_argument("--store", type=Path, help="keep each finished seed here, and take what is here already")
    parser.add_argument("--ours-only", action="store_true",
                        help="queuescale's runs alone (x1, x0.5, x2, inFlight), without the KEDA sweep: minutes, "
                             "not hours, to see what a policy change does over seeds")
    args = parser.parse_args(argv)
    names = args.scenario or [*sorted(library()), *(str(p.relative_to(ROOT)) for p in HOLDOUT)]
    started = time.perf_counter()
    tasks = [(name, k) for name in names for k in range(args.seeds)]
    # Longest first: a long scenario started last keeps one process busy while the others idle.
    scenarios = {name: named_scenario(name) for name in names}
    tasks.sort(key=lambda task: -scenarios[task[0]].duration)
    digest = code_digest() + ("-ours-only" if args.ours_only else "")  # a stored run of ours alone has no KEDA
    done = run_all(tasks, args.jobs, None if args.store is None else Store(args.store, digest), args.ours_only)
    by_name: dict[str, list[SeedRun]] = {}
    for task in tasks:
        by_name.setdefault(task[0], []).append(done[task])
    spreads = [spread(scenarios[n].name, scenarios[n].slo_wait, by_name[n]) for n in names]
    elapsed = time.perf_counter() - started
    table = markdown(spreads)
    print(table)
    print()
    print(totals(spreads))
    print(f"\n{len(names)} scenarios x {args.seeds} seeds in {elapsed:.0f} s ({args.jobs} processes)")
    if args.markdown:
        args.markdown.write_text("\n".join([
            "# Policy benchmark over seeds",
            "",
            "Produced by:",
            "",
            f"    .venv/bin/python -m benchmarks.seeds --seeds {args.seeds}"
            + "".join(f" --scenario {n}" for n in args.scenario or []) + (" --ours-only" if args.ours_only else "")
            + f" --markdown {args.markdown}",
            "",
            f"on {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, in "
            f"{elapsed:.0f} s with {args.jobs} processes. Each scenario of [benchmarks.md](benchmarks.md) run "
            f"with {args.seeds} seeds (its own, then its own + {SEED_STEP} k): same shape, other draws. "
            "A verdict the suite's one run shows but other seeds do not is the luck of that seed.",
            "",
            table,
            "",
            totals(spreads) + ".",
            "",
        ]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
