"""The user docs and the dashboard cannot drift from the code: the CRD, the metrics, the reasons, the links."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from controller.model.fields import format_duration
from controller.model.generate import reference_text
from controller.model.readings import Reason
from controller.report.metrics import GcPauses, Metrics, RuleStates

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CRD: dict[str, Any] = yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text())
SPEC_SCHEMA: dict[str, Any] = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
DASHBOARD = ROOT / "charts" / "queuescale" / "dashboards" / "queuescale.json"


def table_rows(text: str, first_cell: str) -> dict[str, list[str]]:
    """Markdown table rows whose first cell is `first_cell...` in backticks, keyed by that cell without them."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]  # no cell of these tables holds a |
        match = re.fullmatch(rf"`({re.escape(first_cell)}[^`]*)`", cells[0]) if line.startswith("|") else None
        if match:
            rows[match.group(1)] = cells[1:]
    return rows


# ----------------------------------------------------------------------------------------------------------------
# reference.md and the CRD


def crd_fields(schema: dict[str, Any], prefix: str = "spec") -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Every field of the CRD's spec as `spec.sources[].queueName`, with its schema and whether it is required."""
    required = set(schema.get("required") or ())
    for name, child in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}"
        yield path, child, name in required
        yield from crd_fields(child, path)
        if isinstance(child.get("items"), dict):
            yield from crd_fields(child["items"], path + "[]")


REFERENCE = table_rows((DOCS / "reference.md").read_text(), "spec.")
FIELDS = list(crd_fields(SPEC_SCHEMA))


def test_the_crd_has_fields_to_check() -> None:
    assert len(FIELDS) > 60
    assert "spec.sources[].queueName" in [path for path, _, _ in FIELDS]


def test_the_reference_tables_are_the_generated_ones() -> None:
    # The tables and the CRD are written from one declaration of each field (controller/model), so a row for each
    # field and no other is how they are made; what is left to check is that the file is current.
    text = (DOCS / "reference.md").read_text()
    assert reference_text(text) == text, "docs/reference.md is not current: run python tools/generate_schema.py"


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, dict):
        return "`" + json.dumps(value) + "`"
    return f"`{value}`"


@pytest.mark.parametrize(("path", "schema", "required"), FIELDS, ids=[path for path, _, _ in FIELDS])
def test_reference_row_agrees_with_the_crd(path: str, schema: dict[str, Any], required: bool) -> None:
    kind, default, bounds, meaning = REFERENCE[path]
    if "default" in schema:
        assert default == _shown(schema["default"]), f"{path}: default"
    else:  # no default, or one a queue kind applies itself (never written in the CRD: it would reach every kind)
        assert default == "" or path.startswith("spec.sources[]."), f"{path}: default"
    assert ("required" in bounds) >= required, f"{path} is required by the CRD"
    enum = schema.get("enum") or (schema.get("items") or {}).get("enum") or []
    for value in enum:
        assert f"`{value}`" in bounds, f"{path}: allowed value {value} not listed"
    if "minimum" in schema and kind != "duration":
        exclusive = schema.get("exclusiveMinimum", False)
        assert re.search(rf"{'>' if exclusive else '≥'} {schema['minimum']:g}\b", bounds) or (
            f"{schema['minimum']:g} to" in bounds), f"{path}: minimum {schema['minimum']}"
    if "maximum" in schema:
        maximum = format_duration(schema["maximum"]) if kind == "duration" else f"{schema['maximum']:g}"
        assert f"to {maximum}" in bounds or f"≤ {maximum}" in bounds, f"{path}: maximum"
    if "maxItems" in schema:
        assert f"{schema['maxItems']} items" in bounds, f"{path}: maxItems"
    expected_kind = {"integer": "integer", "number": "number", "string": "string", "boolean": "boolean",
                     "object": "object", "array": "list"}.get(schema.get("type", ""), "duration")
    assert kind == expected_kind, path
    assert meaning


def test_the_reference_check_can_fail() -> None:
    schema = {"type": "number", "default": 7, "minimum": 0, "exclusiveMinimum": True}
    with pytest.raises(AssertionError):
        test_reference_row_agrees_with_the_crd("spec.policy.targetPerReplica", schema, False)


# ----------------------------------------------------------------------------------------------------------------
# metrics.md and controller/report/metrics.py


def exported() -> dict[str, tuple[str, set[str]]]:
    """Every series the operator exports: name as scraped -> (type, label names)."""
    metrics = Metrics()
    found = {}
    for family in vars(metrics).values():
        if isinstance(family, RuleStates):  # counted when scraped
            found[family.name] = ("gauge", set(family.labelnames))
            continue
        if isinstance(family, GcPauses):  # summed by a gc hook, read when scraped
            found[f"{family.name}_total"] = ("counter", set(family.labelnames))
            continue
        if not isinstance(family, MetricWrapperBase):
            continue
        name = family._name  # the client keeps no public accessor for these
        labels = set(family._labelnames)
        if isinstance(family, Counter):
            found[f"{name}_total"] = ("counter", labels)
        elif isinstance(family, Histogram):
            found[name] = ("histogram", labels)
        elif isinstance(family, Gauge):
            found[name] = ("gauge", labels)
        else:
            raise AssertionError(f"a metric type this test does not know: {type(family).__name__}")
    return found


def test_metrics_doc_lists_every_series_with_its_type_and_labels() -> None:
    rows = table_rows((DOCS / "metrics.md").read_text(), "queuescale_")
    series = exported()
    assert len(series) >= 12
    assert sorted(rows) == sorted(series)
    for name, (kind, labels) in series.items():
        documented_kind, documented_labels, meaning = rows[name]
        assert documented_kind == kind, name
        assert set(re.findall(r"`(\w+)`", documented_labels)) == labels, name
        assert meaning, name


def scraped_names() -> set[str]:
    """Every name a Prometheus server holds for the operator's series."""
    names = set()
    for name, (kind, _) in exported().items():
        if kind == "counter":
            names |= {name, name.removesuffix("_total") + "_created"}
        elif kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created"}
        else:
            names.add(name)
    return names


def test_metrics_doc_queries_use_real_series() -> None:
    text = (DOCS / "metrics.md").read_text()
    used = set(re.findall(r"\bqueuescale_\w+", text))
    assert sorted(used - scraped_names() - set(exported())) == []


# ----------------------------------------------------------------------------------------------------------------
# operations.md and the reasons in the code


def literal_reasons() -> set[str]:
    """Condition and Event reasons written as literals in the code that sets them."""
    def folder(name: str) -> str:
        return "\n".join(path.read_text() for path in sorted((ROOT / "controller" / name).rglob("*.py")))

    status = folder("report")
    operator = folder("operator") + folder("report")
    reasons = set(re.findall(r'condition\(\s*"\w+",\s*"(?:True|False|Unknown)",\s*"(\w+)"', status))
    reasons |= set(re.findall(r'setup_failed(?:_status)?\(\s*rule,\s*"(\w+)"', operator))
    for call in re.findall(r"events\.record\((.*?)now\)", operator, re.S):
        reasons |= set(re.findall(r'(?<![f\w])"([A-Z][A-Za-z]+)"', call)) - {"Normal", "Warning"}
    return reasons


def test_operations_explains_every_condition_and_event_reason() -> None:
    text = (DOCS / "operations.md").read_text()
    reasons = literal_reasons() | {str(reason) for reason in Reason}
    assert {"Polling", "InvalidSpec", "PollsSucceeding", "PausedBySpec", "UnsupportedQueueKind"} <= reasons
    assert {"ScaleFailed", "TargetUnavailable", "Fallback"} <= reasons
    missing = sorted(reason for reason in reasons if f"`{reason}`" not in text)
    assert missing == []


def test_operations_names_every_run_flag_the_chart_sets() -> None:
    text = (DOCS / "operations.md").read_text()
    chart = (ROOT / "charts" / "queuescale" / "templates" / "deployment.yaml").read_text()
    for flag in set(re.findall(r'"(--[a-z-]+)', chart)):
        assert f"`{flag}" in text, flag


# ----------------------------------------------------------------------------------------------------------------
# README and the docs folder


def test_readme_links_every_doc() -> None:
    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)", readme))
    assert {f"docs/{p.name}" for p in DOCS.glob("*.md")} <= linked


def test_relative_links_in_docs_lead_somewhere() -> None:
    for page in [*DOCS.glob("*.md"), ROOT / "README.md"]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name}: {target}"


# ----------------------------------------------------------------------------------------------------------------
# The Grafana dashboard


def dashboard_expressions() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    found = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            found.append(target["expr"])
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["definition"])
    return found


def test_dashboard_is_grafana_json_with_panels() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["title"]
    assert board["uid"]
    assert len(board["panels"]) >= 7
    assert {"datasource"} <= {v["name"] for v in board["templating"]["list"]}


def test_dashboard_expressions_use_only_exported_series() -> None:
    names = scraped_names()
    expressions = dashboard_expressions()
    assert len(expressions) >= 8
    for expression in expressions:
        used = set(re.findall(r"\bqueuescale_\w+", expression))
        assert used, f"no queuescale series in {expression!r}"
        assert used <= names, f"unknown series {sorted(used - names)} in {expression!r}"


def test_dashboard_groups_only_by_labels_the_series_have() -> None:
    series = exported()
    scrape_labels = {"le", "instance", "job", "pod"}
    for expression in dashboard_expressions():
        labels: set[str] = set()
        for used in set(re.findall(r"\bqueuescale_\w+", expression)):
            base = re.sub(r"_(bucket|sum|count|created)$", "", used)
            labels |= series.get(base, series.get(used, ("", set())))[1]
        for grouping in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expression):
            for label in filter(None, (part.strip() for part in grouping.split(","))):
                assert label in labels | scrape_labels, f"{label} in {expression!r}"


def test_the_dashboard_covers_what_operators_ask() -> None:
    text = " ".join(dashboard_expressions())
    for series in ("queuescale_queue_length", "queuescale_desired_replicas", "queuescale_current_replicas",
                   "queuescale_scale_operations_total", "queuescale_poll_errors_total",
                   "queuescale_poll_duration_seconds_bucket", "queuescale_tick_lateness_seconds_bucket",
                   "queuescale_leader", "queuescale_rules"):
        assert series in text, series
    assert "histogram_quantile" in text


# ----------------------------------------------------------------------------------------------------------------
# Numbers quoted in the README and docs: each has one source, and the quotes are checked against it

BENCHMARKS = (DOCS / "benchmarks.md").read_text()
README = (ROOT / "README.md").read_text()


def benchmark_findings() -> list[str]:
    """The per-scenario summary lines of docs/benchmarks.md (`- name: p99 ...`), as benchmarks.policy_suite
    writes them."""
    return [line for line in BENCHMARKS.splitlines() if re.match(r"- [\w-]+( \(held out\))?: p99 ", line)]


def agrees(quoted: str, actual: float) -> bool:
    """A figure as quoted ("1.18", "2.0", "80") is `actual` rounded to the precision the quote shows."""
    if "." in quoted:
        return round(actual, len(quoted.split(".")[1])) == float(quoted)
    significant = len(quoted.rstrip("0")) or 1
    return round(actual, -(len(quoted) - significant)) == float(quoted)


def test_agrees_rounds_to_the_quoted_precision() -> None:
    assert agrees("1.18", 1.1849) and not agrees("1.18", 1.186)
    assert agrees("2.0", 2.02) and agrees("80", 83.0) and not agrees("80", 86.0) and agrees("2", 2.0)


def test_the_readme_benchmark_summary_is_what_docs_benchmarks_md_measured() -> None:
    # docs/benchmarks.md is generated (benchmarks.policy_suite --markdown); the README's sentence quotes it, so it
    # must say what the current table says, whatever a re-run changed.
    findings = benchmark_findings()
    costs = [float(m) for line in findings for m in re.findall(r"KEDA's cheapest \([^)]*\) costs ([\d.]+)x ours", line)]
    # "where we reverse at all": a rule that never reverses has no ratio
    reversals = [int(b) / int(a) for line in findings if "tuned KEDA" in line
                 for a, b in re.findall(r"reversals (\d+) vs (\d+)", line) if int(a)]
    unreached = [line for line in findings if "no KEDA queueLength reaches our p99" in line]
    missed = [line for line in findings if re.search(r"p99 \d+s misses the", line)]
    kept_ready = [float(m) for line in missed
                  for m in re.findall(r"some policy can: \d+ replicas kept ready throughout meet it at [\d,]+ "
                                      r"worker-seconds \(([\d.]+)x ours\)", line)]
    out_of_reach = [line for line in findings if "no policy can meet it" in line]
    assert findings and costs and reversals

    words = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
             "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
             "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "twenty-one": 21, "twenty-two": 22,
             "twenty-three": 23, "twenty-four": 24, "twenty-five": 25, "twenty-six": 26,
             "twenty-seven": 27, "twenty-eight": 28, "twenty-nine": 29, "thirty": 30, "thirty-one": 31,
             "thirty-two": 32, "thirty-three": 33, "thirty-four": 34, "thirty-five": 35, "thirty-six": 36,
             "thirty-seven": 37, "thirty-eight": 38, "thirty-nine": 39, "forty": 40, "forty-one": 41,
             "forty-two": 42, "forty-three": 43, "forty-four": 44, "forty-five": 45, "forty-six": 46,
             "forty-seven": 47, "forty-eight": 48, "forty-nine": 49, "fifty": 50, "fifty-one": 51,
             "fifty-two": 52, "fifty-three": 53, "fifty-four": 54, "fifty-five": 55, "fifty-six": 56,
             "fifty-seven": 57, "fifty-eight": 58, "fifty-nine": 59, "sixty": 60, "sixty-one": 61, "sixty-two": 62,
             "sixty-three": 63, "sixty-four": 64, "sixty-five": 65, "sixty-six": 66, "sixty-seven": 67,
             "sixty-eight": 68, "sixty-nine": 69, "seventy": 70, "seventy-one": 71,
             "seventy-two": 72, "seventy-three": 73, "seventy-four": 74, "seventy-five": 75,
             "seventy-six": 76, "seventy-seven": 77, "seventy-eight": 78, "seventy-nine": 79, "eighty": 80,
             "eighty-one": 81, "eighty-two": 82, "eighty-three": 83, "eighty-four": 84, "eighty-five": 85,
             "eighty-six": 86, "eighty-seven": 87, "eighty-eight": 88, "eighty-nine": 89, "ninety": 90,
             "ninety-one": 91, "ninety-two": 92, "ninety-three": 93}
    sentence = re.search(
        r"on ([\w-]+) of ([\w-]+) scenarios KEDA \+ HPA at its\s+cheapest queueLength reaching the same p99 wait costs "
        r"([\d.]+)x to ([\d.]+)x as much, and where a tuned KEDA meets the\s+objective it reverses direction "
        r"([\d.]+)x to ([\d.]+)x as often as we do \(where we reverse at all\); on the other (\w+) no\s+KEDA setting "
        r"reaches our p99\.\s+"
        r"We miss the objective on (\w+)\. (\w+) only replicas kept ready from the start meet, at ([\d.]+)x to "
        r"([\d.]+)x our\s+worker-seconds \(the rule's `ColdStart` condition says when a cold start cannot meet an "
        r"objective\)\.(?:\s+On\s+the\s+other\s+(\w+),\s+((?:-?[\w-]+(?:,\s+|\s+and\s+))*-?[\w-]+),\s+a queue "
        r"goes unseen.*?a constant ((?:\d+(?:,\s+|\s+and\s+))*\d+)\s+replicas meet (?:them|it), at "
        r"((?:[\d.]+x(?:,\s+|\s+and\s+))*[\d.]+x) our\s+worker-seconds[;)])?.*?"
        r"(No|\w+) scenarios? (?:is|are) out of reach for every policy", README, re.S)
    assert sentence, "the README's benchmark sentence changed shape: update this test with it"
    (with_cost, total, cost_low, cost_high, rev_low, rev_high, other, missed_count, cold_count, kept_low, kept_high,
     killed_count, names, counts, ratios, unreachable) = sentence.groups()

    def listed(text: str | None) -> list[str]:
        return [] if text is None else re.split(r",\s+|\s+and\s+", text)
    assert words[total] == len(findings)
    assert words[with_cost] == len(costs)
    assert agrees(cost_low, min(costs)) and agrees(cost_high, max(costs)), (min(costs), max(costs))
    assert agrees(rev_low, min(reversals)) and agrees(rev_high, max(reversals)), (min(reversals), max(reversals))
    assert words[other] == len(unreached)
    # Every objective we miss is met by some constant count kept ready, and the README quotes what that costs: for
    # the ones a cold start misses as a range, for the others by name.
    assert words[missed_count] == len(missed) == len(kept_ready) + len(out_of_reach)
    others = 0 if killed_count is None else ({**words, "one": 1})[killed_count]
    assert words[cold_count.lower()] + others + len(out_of_reach) == len(missed)
    named = {}
    killed = list(zip(listed(names), listed(counts), (x.removesuffix("x") for x in listed(ratios)), strict=True))
    assert others == len(killed)
    for name, count, ratio in killed:
        name = name.removeprefix("-")
        line = next(line for line in missed
                    if line.startswith((f"- {name}: ", f"- {name} ", f"- holdout-{name} ")))
        assert f"some policy can: {count} replicas kept ready throughout" in line, line
        named[line] = ratio
    for line, ratio in named.items():
        assert agrees(ratio, float(re.findall(r"\(([\d.]+)x ours\)", line)[0])), line
    cold = [x for line in missed if line not in named
            for x in re.findall(r"kept ready throughout meet it at [\d,]+ worker-seconds \(([\d.]+)x ours\)", line)]
    assert words[cold_count.lower()] == len(cold)
    assert agrees(kept_low, min(map(float, cold))) and agrees(kept_high, max(map(float, cold))), cold
    assert ({**words, "no": 0, "one": 1})[unreachable.lower()] == len(out_of_reach)


def test_the_readme_seeds_figure_is_what_docs_seeds_md_measured() -> None:
    # docs/seeds.md is generated (benchmarks.seeds --markdown); the README quotes its count of runs met told x1.
    seeds = (DOCS / "seeds.md").read_text()
    measured = re.search(r"queuescale meets the objective in (\d+) / \d+ / \d+ of (\d+) runs", seeds)
    quoted = re.search(r"the objective told the true serviceTime is met in (\d+) of (\d+) runs", README)
    assert measured and quoted, "the seeds sentence changed shape: update this test with it"
    assert quoted.groups() == measured.groups()


# The scoreboard's targets (benchmarks.policy_suite.scoreboard) by the short name the notes' table gives them.
TARGETS = {"SLO (p99 wait) at the stated serviceTime": "SLO", "worker-seconds <=": "cost", "efficiency >=": "efficiency",
           "duplicates after a scale-in": "duplicates", "SLO with serviceTime told x0.5": "x0.5",
           "SLO with serviceTime told x2": "x2", "a burst meets enough capacity": "burst",
           "the same, the pods' in-flight counts told": "duplicates, inFlight",
           "SLO (p99 wait), the pods' in-flight counts told": "SLO, inFlight"}
MISS = re.compile(r"(?<=\)), ")  # misses are "name (figure)", and a figure may hold a comma


def scoreboard_misses(text: str) -> list[tuple[str, str]]:
    """Each (target, "scenario (figure)") the scoreboard under docs/benchmarks.md's table lists as missed."""
    misses = []
    for line in text.split("## Replicas over time")[0].splitlines():
        cells = line.strip().strip("|").strip().split(" | ") if line.startswith("| ") else []
        target = next((short for start, short in TARGETS.items() if cells and cells[0].startswith(start)), None)
        if target is not None and len(cells) == 3 and cells[2].strip() != "none":
            misses += [(target, miss) for miss in MISS.split(cells[2].strip())]
    return misses


def explained_misses(text: str) -> list[tuple[str, str]]:
    """Each (target, "scenario (figure)") a row of the notes' *Against the issue's targets* table explains."""
    table = text.split("**Against the issue's targets (this table")[1].split("\n\n")[1]
    rows = [line.strip().strip("|").strip().split(" | ") for line in table.splitlines()[2:]]
    return [(cells[0].strip(), miss) for cells in rows for miss in MISS.split(cells[1].strip())]


def unexplained(text: str) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The misses the scoreboard lists that no row explains, and the rows' misses the scoreboard no longer lists."""
    listed, explained = set(scoreboard_misses(text)), set(explained_misses(text))
    return listed - explained, explained - listed


def test_every_miss_the_scoreboard_lists_is_explained_once_in_the_notes() -> None:
    # The issue is done when every target holds, or the note says which miss, by how much and why: the scoreboard is
    # regenerated with every run, so a miss that appears, moves or goes away must be explained again.
    listed, explained = scoreboard_misses(BENCHMARKS), explained_misses(BENCHMARKS)
    assert len(listed) > 100 and {target for target, _ in listed} == set(TARGETS.values())
    assert sorted(explained) == sorted(set(explained)), "a miss explained twice"
    missing, stale = unexplained(BENCHMARKS)
    assert missing == set(), "misses the notes do not explain"
    assert stale == set(), "explanations of misses the scoreboard no longer lists"


def test_the_explanation_check_sees_a_miss_whose_figure_moved() -> None:
    target, miss = scoreboard_misses(BENCHMARKS)[0]
    name, figure = miss.split(" (", 1)
    moved = BENCHMARKS.replace(f"| {miss}", f"| {name} (9{figure}", 1)  # the scoreboard's first entry, a re-run later
    assert unexplained(moved) == ({(target, f"{name} (9{figure}")}, {(target, miss)})


def test_the_built_in_scenarios_table_lists_the_library() -> None:
    from controller.simulator.scenario import library

    section = (DOCS / "simulator.md").read_text().split("### The built-in scenarios", 1)[1].split("\n#", 1)[0]
    documented = table_rows(section, "")
    assert sorted(documented) == sorted(library())


DEMO_DOC = (DOCS / "demo.md").read_text()


def test_the_demo_figures_in_the_docs_are_the_demo_defaults() -> None:
    from controller.demo.options import DemoOptions
    from controller.model.textfmt import duration

    d = DemoOptions()
    assert (f"sends a burst of {d.burst} messages {d.burst_at:g} s after the rule starts, and a second one of "
            f"{d.second_burst} at {d.second_burst_at:g} s") in DEMO_DOC
    assert f"works on it for {d.work_time:g} s" in DEMO_DOC
    assert f"(default {duration(d.max_duration)}) bounds it" in DEMO_DOC


def test_the_demo_options_table_shows_the_defaults_demo_help_shows() -> None:
    from controller.cli import build_parser
    from controller.model.textfmt import duration

    demo = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["demo"]
    defaults = {flag: action for action in demo._actions for flag in action.option_strings}
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in DEMO_DOC.splitlines()
            if line.startswith("| `--")]
    checked = 0
    for cell, shown, _ in rows:
        flags = re.findall(r"`(--[a-z-]+) [A-Z]+`", cell)
        if not flags:
            continue
        expected = []
        for flag in flags:
            action = defaults[flag]
            value = action.default
            expected.append(duration(value) if action.metavar == "T" else f"{value:g}" if isinstance(value, float)
                            else str(value))
        assert shown.strip("`") == ", ".join(expected), cell
        checked += len(flags)
    assert checked >= 11


def test_the_readme_and_docs_demo_md_quote_one_demo_length_that_the_defaults_allow() -> None:
    from controller.demo.options import DemoOptions

    d = DemoOptions()
    length = re.compile(r"about ([\d.]+) to ([\d.]+) minutes")
    in_readme, in_doc = length.search(README), length.search(DEMO_DOC)
    assert in_readme and in_doc and in_readme.groups() == in_doc.groups()
    demo_seconds = re.search(r"about (\d+) s of demo", DEMO_DOC)
    assert demo_seconds
    # It cannot end before the last burst plus the wait before zero, nor after --max-duration; and the quoted
    # minutes are that, plus Azurite's start and the clean-up.
    seconds = float(demo_seconds.group(1))
    assert d.second_burst_at + d.scale_to_zero_delay < seconds < d.max_duration
    low, high = (float(g) * 60 for g in in_doc.groups())
    assert low <= seconds + 30 and seconds <= high


# ----------------------------------------------------------------------------------------------------------------
# The image: one name, one tag, quoted alike everywhere

CHART_VALUES: dict[str, Any] = yaml.safe_load((ROOT / "charts" / "queuescale" / "values.yaml").read_text())
CHART: dict[str, Any] = yaml.safe_load((ROOT / "charts" / "queuescale" / "Chart.yaml").read_text())
IMAGE = f"{CHART_VALUES['image']['repository']}:{CHART['appVersion']}"  # the source: what the chart pulls
QUICKSTART = (DOCS / "quickstart.md").read_text()


def test_the_image_reference_is_the_charts_everywhere_it_is_quoted() -> None:
    operator = [doc for doc in yaml.safe_load_all((ROOT / "manifests" / "operator.yaml").read_text())
                if doc and doc.get("kind") == "Deployment"]
    assert [c["image"] for d in operator for c in d["spec"]["template"]["spec"]["containers"]] == [IMAGE]
    assert f"docker build -t {IMAGE} ." in (ROOT / "Dockerfile").read_text()
    assert f"`{CHART_VALUES['image']['repository']}:<version>`" in (DOCS / "operations.md").read_text()
    quoted = set(re.findall(r"\b[\w.-]+\.[a-z]{2,}/[\w./-]*queuescale:[\w.-]+", QUICKSTART))
    assert quoted == {IMAGE}, quoted
    assert f"docker build -t {IMAGE} ." in QUICKSTART
    assert f"kind load docker-image {IMAGE}" in QUICKSTART


def test_the_quickstart_applies_objects_a_cluster_accepts() -> None:
    import kubernetes_validate

    from controller.model.rule import parse_queuescaler

    blocks = re.findall(r"kubectl apply -f - <<'EOF'\n(.*?)\nEOF\n", QUICKSTART, re.S)
    assert len(blocks) == 1
    docs = [doc for doc in yaml.safe_load_all(blocks[0]) if doc]
    kinds = [doc["kind"] for doc in docs]
    assert kinds == ["Secret", "Deployment", "Service", "Deployment", "QueueScaler"]
    for doc in docs:
        if doc["kind"] == "QueueScaler":
            parse_queuescaler(doc)  # raises SpecError, naming the field, if validate would refuse it
        else:
            kubernetes_validate.validate(doc, "1.30", strict=True)
    secret, rule = docs[0], docs[-1]
    assert rule["spec"]["sources"][0]["passwordSecretRef"]["name"] == secret["metadata"]["name"]
    assert rule["spec"]["scaleTargetRef"]["name"] == docs[3]["metadata"]["name"]
    # The operator uses a Secret only for the rules its annotation names (docs/operations.md): without it the
    # quickstart's rule would stop at SecretNotAllowed.
    from controller.kube.secrets import ALLOWED_RULES_ANNOTATION, ALLOWED_SOURCES_ANNOTATION

    annotations = secret["metadata"]["annotations"]
    assert rule["metadata"]["name"] in annotations[ALLOWED_RULES_ANNOTATION].split(",")
    assert rule["spec"]["sources"][0]["type"] in annotations[ALLOWED_SOURCES_ANNOTATION].split(",")


def test_the_readme_links_the_quickstart() -> None:
    assert "](docs/quickstart.md)" in README


def test_the_simulators_default_rule_is_the_one_docs_simulator_md_describes() -> None:
    # The paragraph once described a count-mode rule with a gentle scale-down long after the code changed: every
    # policy field the default rule sets, and only those, is named there with what it is set from.
    from controller.commands.simulate import default_rule
    from controller.simulator.scenario import library

    text = (DOCS / "simulator.md").read_text()
    paragraph = text[text.index("**Without `--policy`** the simulator runs"):].split("\n\n", 1)[0]
    named = set(re.findall(r"`(\w+)`\s+=\s+`?[\w. ]+`?", paragraph))
    checkout = library()["checkout-outage"]
    rule = default_rule(checkout)
    policy = rule.spec.policy
    set_fields = {"targetWaitSeconds": policy.target_wait, "serviceTime": policy.service_time,
                  "messagesPerReplica": policy.messages_per_replica, "lookahead": policy.lookahead,
                  "onScaleIn": policy.on_scale_in, "maxReplicas": rule.spec.max_replicas}
    assert named == set(set_fields), named
    workers = checkout.workers
    assert set_fields == {"targetWaitSeconds": checkout.slo_wait, "serviceTime": workers.service_time.average,
                          "messagesPerReplica": workers.concurrency, "lookahead": workers.startup_delay,
                          "onScaleIn": workers.scale_in, "maxReplicas": workers.max_replicas}
    assert policy.target_per_replica is None and "targetPerReplica" not in paragraph
