"""The demo's terminal view: plain lines off a terminal, a block redrawn in place on one."""

from __future__ import annotations

import io

from controller.demo.view import Frame, LiveView, sparkline


def frame(elapsed: float, count: int, desired: int, ready: int) -> Frame:
    return Frame(elapsed=elapsed, count=count, change=-1.5, desired=desired, ready=ready, reason="ScaledUp",
                 message=f"scaled up 0 -> {desired}", processed=3, sent=40, counts=[0, 40, count],
                 events=["+1s burst of 40 messages starts"])


def test_off_a_terminal_each_tick_is_one_line_and_events_are_lines_too() -> None:
    out = io.StringIO()
    view = LiveView(out, live=False, title="demo")
    view.event(1.0, "burst of 40 messages starts")
    view.frame(frame(2.0, 40, 4, 1))
    lines = out.getvalue().splitlines()
    assert lines == [
        "+    1s  burst of 40 messages starts",
        "+    2s  queue   40  change   -1.50/s  desired  4  ready  1  processed    3/40    ScaledUp: scaled up 0 -> 4",
    ]
    assert "\x1b[" not in out.getvalue()


def test_on_a_terminal_the_block_is_erased_and_redrawn_in_place() -> None:
    out = io.StringIO()
    view = LiveView(out, live=True, title="demo")
    view.frame(frame(2.0, 40, 4, 1))
    first = out.getvalue()
    assert "\x1b[" not in first
    assert "■□□□" in first and "ScaledUp: scaled up 0 -> 4" in first
    view.frame(frame(4.0, 30, 4, 4))
    second = out.getvalue()[len(first):]
    height = len(first.splitlines())
    assert second.startswith(f"\x1b[{height}F\x1b[J")  # up over the old block, then clear it
    assert "■■■■" in second


def test_sparkline_scales_to_the_largest_recent_count() -> None:
    assert sparkline([0, 5, 10]) == "▁▅█"
    assert sparkline([0, 0]) == "▁▁"
    assert len(sparkline(list(range(100)))) == 40
