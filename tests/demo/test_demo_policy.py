"""The demo's rule under the operator's policy, tick by tick (no Azurite, no workers): what docs/demo.md says the
demo shows must be what `policy.decide` does with the demo's defaults."""

from __future__ import annotations

from itertools import pairwise

from controller.demo.options import DemoOptions
from controller.demo.record import Sample, count_change, demo_rule_document
from controller.model.rule import parse_queuescaler
from tests.azurite import ROOT
from tests.policy_helpers import Run

DEMO_DOC = (ROOT / "docs" / "demo.md").read_text(encoding="utf-8")
POLL = DemoOptions().polling_interval
BURST = DemoOptions().burst


def demo_run() -> Run:
    return Run(parse_queuescaler(demo_rule_document(DemoOptions())).spec)


def steps(run: Run) -> list[int]:
    """The replica counts the rule went through, from the first scale on."""
    path: list[int] = []
    for decision in run.decisions:
        if not path or decision.desired != path[-1]:
            path.append(decision.desired)
    return path


def test_a_queue_drained_steadily_is_followed_down_one_step_per_poll_as_docs_demo_md_says() -> None:
    # The burst lands at 6 s; 8 workers at 1 message/s each take 16 messages per 2 s poll from 10 s on. The
    # scale-down delay releases capacity once the largest recommendation of its window is below the count, so a
    # steady drain is followed down, `delay` behind, a step per poll: what the demo showed (8 -> 6 -> 5 -> ... -> 0).
    run = demo_run()
    count, t = 0, 0.0
    while t <= 60:
        if t == 6:
            count = BURST
        elif t >= 10:
            count = max(0, count - 16)
        run.tick(t, count)
        t += POLL
    path = steps(run)
    assert path[:2] == [0, 8]
    assert path[-1] == 0
    downs = list(pairwise(path[1:]))
    assert len(downs) >= 5 and all(a - b <= 2 for a, b in downs), path
    assert "followed down" in DEMO_DOC and "one step per poll" in DEMO_DOC
    assert "**scale-in in one step**" not in DEMO_DOC


def test_capacity_unneeded_all_at_once_is_released_in_one_step() -> None:
    run = demo_run()
    for at, count in [(0, 0), (2, 0), (4, 0), (6, BURST), (8, BURST), (10, BURST)]:
        run.tick(at, count)
    t = 12.0
    while t <= 40:
        run.tick(t, 0)  # all of it gone between two polls
        t += POLL
    assert steps(run) == [0, 8, 1, 0]  # one step down, then to zero after scaleToZeroDelay
    assert "in one step" in DEMO_DOC


def test_the_view_shows_how_the_count_moves_not_the_policys_fit_over_the_trend_window() -> None:
    # After a burst the count sits flat, but the policy's trend (Theil-Sen over 20 s) stays positive while the
    # jump is inside its window: the view showed "+23.33/s" for a flat queue.
    run = demo_run()
    samples: list[Sample] = []
    for at, count in [(0, 0), (2, 0), (4, 0), (6, BURST), (8, BURST)]:
        decision = run.tick(at, count)
        samples.append(Sample(t=at, count=count, trend=decision.trend, desired=decision.desired, ready=0,
                              reason=str(decision.reason), message=decision.message, scaled_from=None,
                              scaled_to=None, processed=0, sent=BURST))
    assert samples[-1].trend is not None and samples[-1].trend > 10  # the policy's own estimate
    assert count_change(samples[:-1], samples[-1]) == 0.0  # what the view shows: the queue sits flat
    assert count_change(samples[:3], samples[3]) == BURST / POLL
    assert count_change([], samples[0]) is None
