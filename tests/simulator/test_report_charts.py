"""The HTML reports' charts (controller/simulator/report.py, used by the demo's report too): lines that coincide
stay visible, a long run is averaged rather than drawn as a solid block, a share's axis ends at 100 %, and a tie
for the best value highlights every tied column."""

from __future__ import annotations

import re

from controller.simulator.report import (
    AGGREGATE_PIXELS,
    aggregate,
    best_columns,
    line_chart,
    wait_cdf_chart,
)
from controller.simulator.run import RunResult
from tests.sim_helpers import run_scripted, scenario


def polylines(svg: str) -> list[str]:
    return re.findall(r"<polyline [^>]*>", svg)


def test_series_on_the_same_values_are_drawn_so_that_both_show() -> None:
    same = [0.0, 1.0, 2.0, 3.0]
    svg = line_chart("replicas", [("desired", "#d62728", same, same), ("ready", "#2ca02c", same, same)],
                     x_label="s", y_label="n")
    first, second = polylines(svg)
    assert "stroke-dasharray" not in first and 'stroke-dasharray="' in second  # the top one lets the other through
    width = [float(re.search(r'stroke-width="([\d.]+)"', line).group(1)) for line in (first, second)]  # type: ignore[union-attr]
    assert width[0] > width[1]  # and the one below is wider: its colour borders the top one
    assert svg.count("<line x1=") >= 2 and 'stroke-dasharray="' in svg.split("</polyline>")[-1]  # legend shows dashes


def test_a_week_of_samples_is_averaged_to_one_point_per_two_pixels_and_says_over_what() -> None:
    days = [t / 86400 for t in range(0, 7 * 86400, 60)]  # a sample a minute, x in days
    jitter = [float(i % 2) * 20 for i in range(len(days))]  # what drew a solid block
    width = 900
    svg = line_chart("Replicas", [("a", "#000", days, jitter)], x_label="days", y_label="n", width=width,
                     step=True, x_unit_seconds=86400)
    [line] = polylines(svg)
    points = re.search(r'points="([^"]*)"', line).group(1).split()  # type: ignore[union-attr]
    assert len(points) <= width // AGGREGATE_PIXELS
    assert "Replicas, mean per 30m" in svg  # 7 d over ~410 buckets is 24m35s, rounded up to a bucket a person reads
    ys = {p.split(",")[1] for p in points}
    assert len(ys) <= 3  # the 0/20 alternation became its mean, 10


def test_aggregate_averages_per_bucket() -> None:
    assert aggregate([0, 1, 2, 3, 10], [0, 2, 4, 6, 8], 0, 2) == ([0.5, 2.5, 10.0], [1.0, 5.0, 8.0])


def test_few_points_are_drawn_as_they_are() -> None:
    svg = line_chart("t", [("a", "#000", [0.0, 1.0, 2.0], [1.0, 3.0, 2.0])], x_label="x", y_label="y", step=True,
                     x_unit_seconds=1)
    assert "mean per" not in svg
    assert len(re.search(r'points="([^"]*)"', svg).group(1).split()) == 5  # type: ignore[union-attr]  # stepped


def _y_ticks(svg: str) -> list[str]:
    return re.findall(r'<text x="\d+" y="[\d.]+" font-size="11" text-anchor="end">([^<]*)</text>', svg)


def test_the_wait_distribution_axis_ends_at_100_percent() -> None:
    sc = scenario(duration=300, workers={"initialReplicas": 1, "startupDelay": 5, "serviceTime": 1})
    result: RunResult = run_scripted(sc, {})
    svg = wait_cdf_chart([result])
    ticks = _y_ticks(svg)
    assert ticks[-1] == "100" and "120" not in ticks


def test_a_tie_for_the_best_value_highlights_every_tied_column() -> None:
    assert best_columns([3, 3, 5], lower_better=True) == [True, True, False]
    assert best_columns([0.1 + 0.2, 0.3, 0.5], lower_better=True) == [True, True, False]  # equal as shown
    assert best_columns([0.9, 0.98, 0.98], lower_better=False) == [False, True, True]
    assert best_columns([4, 4, 4], lower_better=True) == [False, False, False]  # nothing is better
    assert best_columns([4, None, 2], lower_better=True) == [False, False, True]
    assert best_columns([4, 2], lower_better=None) == [False, False]
