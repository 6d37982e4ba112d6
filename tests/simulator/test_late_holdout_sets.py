"""Issue 18: the fifth to fifteenth held-out sets, each written before any run (d8643a1, 9082529, 170343b, 597e80c,
d584a70, 2fd804a, 1a08630, c8622dc, 88255a0, c445199, 92c0178), run first with the policy unchanged and then moved into
the suite (docs/benchmarks.md, *The fifth held-out set* to *The fifteenth held-out set, first run*). They must stay
in the suite under their own names, on seeds no other scenario draws."""

from __future__ import annotations

import pytest

from benchmarks.policy_suite import HOLDOUT, ROOT, named_scenario
from controller.simulator.scenario import library, load_scenario

SETS = {
    "fifth": ("cron-offsets", "flaky-metrics", "monday-wake", "scheduled-retries", "slow-leak", "thumbnails"),
    "sixth": ("click-stream", "launch-decay", "passcode-expiry", "priority-lanes", "shift-steps",
              "visibility-overrun"),
    "seventh": ("capped-peak", "grace-drain", "iot-metronome", "partner-trace", "startup-over-slo", "three-queues"),
    "eighth": ("backlog-install", "sparse-jobs", "square-wave", "ticket-sale", "viral-growth", "weekend-lull"),
    "ninth": ("firehose", "irregular-bursts", "pdf-ocr", "release-ebb", "wait-under-job", "web-and-batch"),
    "tenth": ("blast-decay", "hourly-drain", "lunch-dip", "release-fanout", "slow-release", "small-kill"),
    "eleventh": ("chatty-producer", "dlq-replay", "failover", "gpu-batch", "month-end", "reminders"),
    "twelfth": ("archive-migration", "campaign-waves", "etl-outage", "fraud-checks", "sms-gateway", "trial-expiry"),
    "thirteenth": ("backoff-retries", "image-ai", "ledger-export", "nightly-model", "over-provisioned",
                   "quarterly-close"),
    "fourteenth": ("debounce", "late-key", "node-single", "probe-fanout", "sensor-beat", "webhook-relay"),
    "fifteenth": ("ci-runners", "geo-follow", "stepped-cliff", "timeout-flaps", "tiny-trickle", "ttl-expiry"),
}
PATHS = {name: [ROOT / "benchmarks" / "scenarios" / f"holdout-{s}.yaml" for s in scenarios]
         for name, scenarios in SETS.items()}


@pytest.mark.parametrize("which", sorted(SETS))
def test_the_set_is_in_the_suite_under_its_own_names(which: str) -> None:
    paths = PATHS[which]
    assert len(paths) == 6
    assert set(paths) <= set(HOLDOUT)  # the suite runs every file directly under benchmarks/scenarios
    for path in paths:
        scenario = load_scenario(str(path))
        assert scenario.name == path.stem
        assert scenario.slo_wait > 0


@pytest.mark.parametrize("which", sorted(SETS))
def test_the_set_shares_no_seed_with_the_rest_of_the_suite(which: str) -> None:
    mine = {str(path) for path in PATHS[which]}
    others = {named_scenario(name).seed for name in [*library(), *map(str, HOLDOUT)] if name not in mine}
    seeds = [named_scenario(path).seed for path in sorted(mine)]
    assert len(set(seeds)) == len(seeds)
    assert not set(seeds) & others
