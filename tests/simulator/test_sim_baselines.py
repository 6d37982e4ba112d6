"""The simple baselines: static, and AWS-style target tracking on backlog per instance."""

from __future__ import annotations

from typing import cast

from controller.simulator.adapters import AwsTargetTracking
from controller.simulator.world import World
from tests.sim_helpers import FakeWorld, run_scripted, scenario


async def test_aws_target_tracking_scales_out_at_once_and_in_gradually() -> None:
    world = FakeWorld(count=450, desired=1)
    aws = AwsTargetTracking("aws", 10, cast(World, world), max_replicas=100)
    t = 0
    while t < 60 * 40:
        if t == 60 * 3:
            world.set_count(0)
        if t >= aws.next_at:
            await aws.act(t)
        t += 1
    assert world.changes[0] == (0, 45)  # ceil(450 / 10), in one step
    downs = [(when, replicas) for when, replicas in world.changes[1:]]
    # 15 low datapoints (t=180..1020) before the first scale-in, then at most 10 % per minute.
    assert downs[0] == (1020, 41)
    assert downs[1] == (1080, 37)
    assert all(b >= a - max(1, a // 10) for (_, a), (_, b) in zip([(0, 45), *downs], downs, strict=False))


def test_a_static_count_never_scales() -> None:
    sc = scenario(duration=300, workers={"initialReplicas": 3, "startupDelay": 5, "serviceTime": 1})
    result = run_scripted(sc, {})
    assert result.scale_actions == []
    assert result.metrics.worker_seconds == 3 * 300

