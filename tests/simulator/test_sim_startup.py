"""The simulated target measures start-up times as the operator's workload watch does, so a simulated rule that
states no startupTime decides on the measured one, as it would in a cluster (controller/kube/workloads.py)."""

from __future__ import annotations

import asyncio

from controller.policy import startup_time
from controller.simulator.adapters import RuleAutoscaler, SimulatedTarget, VirtualClock
from controller.simulator.run import Contender, build_world, simulate
from controller.simulator.world import SimWorld, World
from tests.sim_helpers import parse_rule, scenario

START = 1_800_000_000.0
SOURCES = [{"type": "azure-queue", "queueName": "orders", "connectionSecretRef": {"name": "q", "key": "c"}}]


def target_on(startup_delay: int) -> tuple[SimulatedTarget, SimWorld, VirtualClock]:
    sc = scenario(workers={"startupDelay": startup_delay, "serviceTime": 2, "concurrency": 1, "maxReplicas": 50},
                  arrivals=[{"type": "burst", "at": 500, "messages": 1, "over": 1}])
    world = build_world(sc, initial_replicas=0)
    clock = VirtualClock(START)
    ref = parse_rule("r", maxReplicas=50, sources=SOURCES).spec.scale_target_ref
    return SimulatedTarget(ref, world, clock), world, clock


def run_until(world: SimWorld, clock: VirtualClock, start: int, end: int) -> None:
    for t in range(start, end):
        clock.t = float(t)
        world.step(t)
    clock.t = float(end)


async def test_a_scale_up_is_measured_from_the_write_to_its_ready_replicas() -> None:
    target, world, clock = target_on(startup_delay=90)
    state = await target.scale(3, await target.read())
    assert state.startup_seconds is None
    run_until(world, clock, 0, 60)
    assert (await target.read()).startup_seconds is None  # pods still starting
    run_until(world, clock, 60, 120)  # read 30 s after the pods came: the watch saw them when they came
    assert (await target.read()).startup_seconds == 90.0


async def test_a_scale_up_undone_before_its_pods_came_is_never_measured() -> None:
    target, world, clock = target_on(startup_delay=90)
    await target.scale(4, await target.read())
    run_until(world, clock, 0, 30)
    await target.scale(1, await target.read())
    run_until(world, clock, 30, 200)
    assert (await target.read()).startup_seconds is None


def test_a_rule_without_startup_time_decides_on_the_measured_one() -> None:
    sc = scenario(duration=600, workers={"startupDelay": 150, "serviceTime": 2, "concurrency": 1, "maxReplicas": 50},
                  arrivals=[{"type": "burst", "at": 10, "messages": 200, "over": 1}])
    rule = parse_rule("r", maxReplicas=50, pollingInterval="10s", sources=SOURCES,
                      policy={"serviceTime": "2s", "targetWaitSeconds": 600})
    built: list[RuleAutoscaler] = []

    def build(world: World) -> RuleAutoscaler:
        built.append(RuleAutoscaler("rule", rule, world, START))
        return built[0]

    result = simulate(sc, [Contender("rule", build)])[0]
    assert result.scale_actions  # it scaled up for the burst
    state = asyncio.run(built[0].reconciler.target.read())
    assert state.startup_seconds is not None and 150 <= state.startup_seconds <= 160  # asked at a tick, ready 150 s on
    assert startup_time(rule.spec, state.startup_seconds) == state.startup_seconds  # what the policy assumes
    assert startup_time(rule.spec) == 30.0  # and not the default it would assume without a measurement
