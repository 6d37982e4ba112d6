"""Showing results: a text table, a timeline CSV, and a self-contained HTML report with inline SVG plots."""

from __future__ import annotations

import csv
import html
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from controller.model.textfmt import duration
from controller.simulator.run import Metrics, RunResult, percentile
from controller.simulator.scenario import Scenario
from controller.simulator.world import Sample

TIMELINE_COLUMNS = ("t", "policy", "arrivals", "visible", "approximate_count", "in_flight", "desired",
                    "ready_replicas")

# (key, heading, lower is better?) for the table; None: no "better" direction.
ROWS: tuple[tuple[str, str, bool | None], ...] = (
    ("worker_seconds", "worker-seconds (provisioned)", True),
    ("busy_worker_seconds", "worker-seconds (busy)", None),
    ("efficiency", "efficiency", False),
    ("mean_replicas", "mean replicas", True),
    ("peak_replicas", "peak replicas", None),
    ("wait_p50", "wait p50 (s)", True),
    ("wait_p95", "wait p95 (s)", True),
    ("wait_p99", "wait p99 (s)", True),
    ("wait_max", "wait max (s)", True),
    ("oldest_message_age_max", "oldest message age max (s)", True),
    ("slo_violation_seconds", "seconds above the SLO", True),
    ("scale_actions", "scale actions", True),
    ("direction_reversals", "direction reversals", True),
    ("duplicate_deliveries", "duplicate deliveries", True),
    ("scale_in_duplicates", "  of them after a scale-in stopped the work", True),
    ("expired_messages", "expired messages", True),
    ("messages_arrived", "messages arrived", None),
    ("messages_processed", "messages processed", None),
    ("messages_remaining", "messages still queued at the end", None),
    ("burst_first_scale_out_mean", "burst -> first scale-out (s, mean)", True),
    ("burst_enough_capacity_mean", "burst -> enough capacity (s, mean)", True),
    ("bursts_short_of_capacity", "bursts never given enough capacity", True),
    ("outage_replicas_min", "replicas while polls failed (min)", None),
    ("outage_replicas_max", "replicas while polls failed (max)", None),
)

# Dash patterns by series, so two series on the same values show both colours (the first is solid).
DASHES = ("", "8 5", "2 4", "12 4 3 4", "5 3", "1 3", "9 3 2 3 2 3")
# More samples than buckets of this many pixels are averaged per bucket.
AGGREGATE_PIXELS = 2
ROUND_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
          "#7f7f7f")


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value.is_integer():
            return f"{int(value):,}"
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _metric(metrics: Metrics, key: str) -> object:
    value: object = getattr(metrics, key)
    return value


def scenario_facts(scenario: Scenario) -> str:
    """The scenario's length, seed, objective, workers and queue, in one line."""
    w = scenario.workers
    return (
        f"{duration(scenario.duration)}, seed {scenario.seed}, SLO wait {duration(scenario.slo_wait)}; "
        f"workers: start-up {duration(w.startup_delay)}, service {w.service_time.distribution} mean "
        f"{duration(w.service_time.average)}, {w.concurrency} per pod, scale-in {w.scale_in}; "
        f"queue: visibility timeout {duration(scenario.queue.visibility_timeout)}"
    )


def format_table(scenario: Scenario, results: Sequence[RunResult], *, wide: bool = False) -> str:
    """One column per policy, one row per metric; `wide` also says the scenario's workers and queue."""
    header = ["", *(r.label for r in results)]
    rows = [header]
    for key, heading, _better in ROWS:
        rows.append([heading, *(_fmt(_metric(r.metrics, key)) for r in results)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    head = (scenario_facts(scenario) if wide
            else f"{duration(scenario.duration)}, seed {scenario.seed}, SLO wait {duration(scenario.slo_wait)}")
    lines = [f"scenario {scenario.name}: {head}", ""]
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), *(cell.rjust(widths[i + 1]) for i, cell in enumerate(row[1:]))]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_timeline(path: Path, results: Sequence[RunResult]) -> None:
    """CSV: t,policy,arrivals,visible,approximate_count,in_flight,desired,ready_replicas."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(TIMELINE_COLUMNS)
        for result in results:
            for s in result.timeline:
                writer.writerow([s.t, result.label, s.arrivals, s.visible, s.approximate_count, s.in_flight,
                                 s.desired, s.ready_replicas])


# --------------------------------------------------------------------------------------------------------------
# SVG


def _nice_step(span: float, ticks: int = 5) -> float:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving about `ticks` ticks over `span`."""
    raw = span / max(1, ticks)
    if raw <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5):
        if raw <= magnitude * factor:
            return float(magnitude * factor)
    return float(magnitude * 10)


def _axis_label(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value.is_integer() else f"{value:.1f}"


def line_chart(
    title: str,
    series: Sequence[tuple[str, str, Sequence[float], Sequence[float]]],
    *,
    x_label: str,
    y_label: str,
    width: int = 900,
    height: int = 260,
    step: bool = False,
    log_x: bool = False,
    y_limit: float | None = None,
    x_unit_seconds: float | None = None,
) -> str:
    """An SVG line chart: each series is (label, colour, xs, ys); `log_x` plots x on log10 (x < 1 as 1).

    Series that coincide stay visible: each has its own dash pattern and the earlier ones are drawn wider, so a
    line on top of another shows both colours. More points than pixels are averaged per bucket of two pixels
    (a week of per-minute samples would otherwise be a solid block of ink), and the title says over what
    (`x_unit_seconds`: how many seconds one unit of x is). `y_limit` fixes the top of the axis (100 for a share).
    """
    if log_x:
        series = [(label, colour, [math.log10(max(x, 1.0)) for x in xs], ys) for label, colour, xs, ys in series]
    legend_rows = (len(series) + 3) // 4
    left, right, top, bottom = 64, 16, 30 + 14 * legend_rows, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    xs_all = [x for _, _, xs, _ in series for x in xs] or [0.0, 1.0]
    ys_all = [y for _, _, _, ys in series for y in ys] or [0.0, 1.0]
    x_min, x_max = min(xs_all), max(xs_all)
    y_max = max(ys_all) or 1.0
    if x_max <= x_min:
        x_max = x_min + 1
    buckets = plot_w // AGGREGATE_PIXELS
    bucket_width = (x_max - x_min) / buckets
    if x_unit_seconds:  # a round bucket, to be said in the title: 30m rather than 24m35s
        seconds = next((b for b in ROUND_BUCKETS if b >= bucket_width * x_unit_seconds), ROUND_BUCKETS[-1])
        bucket_width = seconds / x_unit_seconds
    aggregated = not log_x and any(len(xs) > buckets for _, _, xs, _ in series)
    if aggregated:
        series = [(label, colour, *aggregate(xs, ys, x_min, bucket_width)) for label, colour, xs, ys in series]
        step = False  # a mean of replica counts is not a count: joined, not stepped
        if x_unit_seconds is not None:
            title = f"{title}, mean per {duration(bucket_width * x_unit_seconds)}"
    if y_limit is not None:
        y_step = _nice_step(y_limit)
        y_top = y_limit
    else:
        y_step = _nice_step(y_max)
        y_top = y_step * (int(y_max / y_step) + 1)

    def px(x: float) -> float:
        return left + (x - x_min) / (x_max - x_min) * plot_w

    def py(y: float) -> float:
        return top + plot_h - y / y_top * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="{left}" y="18" font-size="14" font-weight="600">{html.escape(title)}</text>',
    ]
    y = 0.0
    while y <= y_top + 1e-9:
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" font-size="11" text-anchor="end">'
                     f"{_axis_label(y)}</text>")
        y += y_step
    x_step = 1.0 if log_x else _nice_step(x_max - x_min, 8)
    x = x_min - x_min % x_step if x_step else x_min
    while x <= x_max + 1e-9:
        if x >= x_min:
            label = _axis_label(10**x if log_x else x)
            parts.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}" '
                         'stroke="#444"/>')
            parts.append(f'<text x="{px(x):.1f}" y="{top + plot_h + 16}" font-size="11" text-anchor="middle">'
                         f"{label}</text>")
        x += x_step
    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 6}" font-size="12" text-anchor="middle">'
                 f"{html.escape(x_label)}</text>")
    parts.append(f'<text x="14" y="{top + plot_h / 2}" font-size="12" text-anchor="middle" '
                 f'transform="rotate(-90 14 {top + plot_h / 2})">{html.escape(y_label)}</text>')
    for index, (label, colour, xs, ys) in enumerate(series):
        points: list[str] = []
        previous: float | None = None
        for xv, yv in zip(xs, ys, strict=True):
            if step and previous is not None:
                points.append(f"{px(xv):.1f},{py(previous):.1f}")
            points.append(f"{px(xv):.1f},{py(yv):.1f}")
            previous = yv
        dash = DASHES[index % len(DASHES)]
        stroke = f'stroke="{colour}" stroke-width="{max(1.5, 3.0 - 0.5 * index):g}"' + (
            f' stroke-dasharray="{dash}"' if dash else "")
        parts.append(f'<polyline fill="none" {stroke} points="{" ".join(points)}">'
                     f"<title>{html.escape(label)}</title></polyline>")
        legend_x = left + (index % 4) * 210
        legend_y = 34 + (index // 4) * 14
        parts.append(f'<line x1="{legend_x}" x2="{legend_x + 22}" y1="{legend_y - 3}" y2="{legend_y - 3}" {stroke}/>')
        parts.append(f'<text x="{legend_x + 26}" y="{legend_y + 1}" font-size="11">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def aggregate(xs: Sequence[float], ys: Sequence[float], x_min: float, width: float) -> tuple[list[float], list[float]]:
    """The mean of `ys` in each bucket of x of `width` from `x_min`, at the bucket's mean x; empty buckets skipped."""
    sums: dict[int, list[float]] = {}
    for x, y in zip(xs, ys, strict=True):
        bucket = sums.setdefault(int((x - x_min) / width) if width > 0 else 0, [0.0, 0.0, 0.0])
        bucket[0] += x
        bucket[1] += y
        bucket[2] += 1
    ordered = [sums[key] for key in sorted(sums)]
    return [b[0] / b[2] for b in ordered], [b[1] / b[2] for b in ordered]


def _time_axis(scenario: Scenario) -> tuple[float, str]:
    if scenario.duration > 2 * 86400:
        return 86400.0, "days since start"
    if scenario.duration > 3 * 3600:
        return 3600.0, "hours since start"
    return 60.0, "minutes since start"


def _series(
    results: Sequence[RunResult], divisor: float, value: Callable[[Sample], float]
) -> list[tuple[str, str, list[float], list[float]]]:
    return [
        (r.label, COLORS[i % len(COLORS)], [s.t / divisor for s in r.timeline], [value(s) for s in r.timeline])
        for i, r in enumerate(results)
    ]


def wait_cdf_chart(results: Sequence[RunResult]) -> str:
    """Share of deliveries that waited at most x seconds, per policy."""
    limit = max((percentile(r.wait_histogram, 0.999) for r in results), default=1.0) or 1.0
    series = []
    for i, r in enumerate(results):
        total = sum(r.wait_histogram.values()) or 1
        xs: list[float] = [0.0]
        ys: list[float] = [0.0]
        seen = 0
        for wait in sorted(r.wait_histogram):
            if wait > limit:
                break
            seen += r.wait_histogram[wait]
            xs.append(float(wait))
            ys.append(100.0 * seen / total)
        series.append((r.label, COLORS[i % len(COLORS)], xs, ys))
    return line_chart("Message wait: share of deliveries that waited at most x", series,
                      x_label="wait (seconds, log scale), up to the worst policy's p99.9", y_label="% of deliveries",
                      step=True, log_x=True, y_limit=100.0)


def best_columns(values: Sequence[object], lower_better: bool | None) -> list[bool]:
    """Which cells of a row hold its best value, as shown: every column that ties for it (0.1 + 0.2 and 0.3 both
    print 0.30), none when the row has no better direction or every column shows the same."""
    shown = [_fmt(v) for v in values]
    numbers = [(float(v), text) for v, text in zip(values, shown, strict=True) if isinstance(v, int | float)]
    if lower_better is None or len({text for _, text in numbers}) < 2:
        return [False] * len(values)
    best = (min if lower_better else max)(numbers)[1]
    return [text == best and isinstance(v, int | float) for v, text in zip(values, shown, strict=True)]


def _metrics_table(results: Sequence[RunResult]) -> str:
    head = "".join(f"<th>{html.escape(r.label)}</th>" for r in results)
    body = []
    for key, heading, lower_better in ROWS:
        values = [_metric(r.metrics, key) for r in results]
        cells = "".join(f'<td class="{"best" if best else ""}">{_fmt(v)}</td>'
                        for v, best in zip(values, best_columns(values, lower_better), strict=True))
        body.append(f"<tr><th>{html.escape(heading)}</th>{cells}</tr>")
    return f'<table><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def render_html(scenario: Scenario, results: Sequence[RunResult]) -> str:
    divisor, x_label = _time_axis(scenario)
    first = results[:1]
    arrivals = line_chart(
        "Arrivals (messages per sample)",
        [("arrivals", "#555", [s.t / divisor for s in r.timeline], [float(s.arrivals) for s in r.timeline])
         for r in first],
        x_label=x_label, y_label="messages", x_unit_seconds=divisor,
    )
    backlog = line_chart("Backlog: visible messages waiting", _series(results, divisor, lambda s: s.visible),
                         x_label=x_label, y_label="messages", x_unit_seconds=divisor)
    count = line_chart("Approximate count (what a count-based autoscaler sees)",
                       _series(results, divisor, lambda s: s.approximate_count), x_label=x_label,
                       y_label="messages", x_unit_seconds=divisor)
    replicas = line_chart("Replicas asked for", _series(results, divisor, lambda s: s.desired), x_label=x_label,
                          y_label="replicas", step=True, x_unit_seconds=divisor)
    ready = line_chart("Ready replicas", _series(results, divisor, lambda s: s.ready_replicas), x_label=x_label,
                       y_label="replicas", step=True, x_unit_seconds=divisor)
    facts = scenario_facts(scenario)
    title = f"queuescale simulation: {scenario.name}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 960px; }}
h1 {{ font-size: 22px; }} p.facts {{ color: #555; }}
table {{ border-collapse: collapse; margin: 12px 0 24px; font-size: 13px; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: right; }}
tbody th {{ text-align: left; font-weight: normal; }}
td.best {{ background: #e3f4e3; font-weight: 600; }}
svg {{ display: block; margin: 8px 0 20px; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(scenario.description)}</p>
<p class="facts">{html.escape(facts)}</p>
<h2>Metrics</h2>
<p>Best value per row highlighted, in every column that ties for it (for rows where lower or higher is better,
and some column differs).</p>
{_metrics_table(results)}
<h2>Over time</h2>
{arrivals}
{backlog}
{count}
{replicas}
{ready}
<h2>Wait distribution</h2>
{wait_cdf_chart(results)}
</body></html>
"""


def write_html(path: Path, scenario: Scenario, results: Sequence[RunResult]) -> None:
    path.write_text(render_html(scenario, results), encoding="utf-8")
