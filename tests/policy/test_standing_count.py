"""The count's standing part that no replica holds: messages put with a visibility delay (scheduled retries) are in
Azure's approximate count, and the in-flight floor must not read them as busy workers (docs/policy.md, *In-flight
work keeps its replicas*)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from benchmarks.policy_suite import our_rule
from controller import policy, throughput
from controller.model.readings import ScalingMemory
from controller.model.rule import QueueScalerSpec
from controller.policy import STANDING_AFTER_SCALE_IN, raw_need, remember_standing
from tests.policy_helpers import Run, make_spec, seen
from tests.sim_helpers import fidelity_scenario, holdout_scenario, run_rule

# Four 2 s jobs a pod, a 45 s objective: a replica is sized for 4 + 2 x 22.5 = 49 messages.
SCHEDULED = {"targetWaitSeconds": 45, "serviceTime": "2s", "messagesPerReplica": 4, "onScaleIn": "kill",
             "scaleDown": {"delay": 0}}


def test_a_count_standing_while_nothing_is_visible_does_not_hold_the_replicas_a_burst_raised() -> None:
    # 3 replicas serve a stream while 240 retries wait out their delay: the count is 246 and peeks find nothing.
    # A burst then raises 23; once it is worked off the count is 246 again with nothing visible. Read as in flight,
    # 246 fills all 23 replicas' 92 slots and holds them; 234 of it was shown to stand where 3 replicas had 12 slots.
    run = Run(make_spec(policy=SCHEDULED), current=3)
    for t in range(0, 600, 10):
        run.tick(float(t), 246, ages=(0.0,))
    assert run.memory.standing == 234
    run.current = 23
    decision = run.tick(600.0, 246, ages=(0.0,))
    # The need is the count as backlog (246 / 49 = 5.02), no longer the 23 replicas the count would fill.
    assert decision.desired == 6
    assert "about 234 of the count held by no replica" in decision.message
    # Without the standing part, the floor keeps all 23 (what the rule did before).
    assert raw_need(make_spec(policy=SCHEDULED), 246, 0.0, 23) == pytest.approx(23.0)
    assert raw_need(make_spec(policy=SCHEDULED), 246, 0.0, 23, standing=234) == pytest.approx(246 / 49)


def test_a_message_that_waited_a_poll_proves_every_slot_busy_whatever_stands() -> None:
    # As above, 234 learned as standing; then the count is 246 on 23 replicas while the peek finds a message that
    # has waited. A free slot would have taken it, so all 23 replicas are busy: the standing part may have come due
    # (the count does not change when a scheduled message turns visible) and is not subtracted at this poll.
    def learned() -> Run:
        run = Run(make_spec(policy=SCHEDULED), current=3)
        for t in range(0, 600, 10):
            run.tick(float(t), 246, ages=(0.0,))
        run.current = 23
        return run

    waited = learned().tick(600.0, 246, ages=(10.0,))  # a poll's wait (pollingInterval 10 s)
    assert waited.desired == 23
    assert "held by no replica" not in waited.message
    assert learned().tick(600.0, 246, ages=(9.0,)).desired == 6  # younger than a poll: it may have just come due
    assert learned().tick(600.0, 246, ages=(None,)).desired == 6  # no age known (a redelivered front message)


def test_the_standing_part_is_learned_only_where_nothing_is_visible_and_long_after_a_scale_in() -> None:
    spec = make_spec(policy=SCHEDULED)
    empty = ScalingMemory()
    # Something visible: the count's excess over the slots may be waiting work.
    assert remember_standing(spec, 246, 3, empty, 1000.0, nothing_visible=False).standing is None
    assert remember_standing(spec, 246, 3, empty, 1000.0, nothing_visible=True).standing == 234
    # Within STANDING_AFTER_SCALE_IN of a scale-in, killed workers' messages may still be invisible.
    after_scale_in = replace(empty, last_scale_down=1000.0)
    assert remember_standing(spec, 246, 3, after_scale_in, 1000.0 + STANDING_AFTER_SCALE_IN - 10,
                             nothing_visible=True).standing is None
    assert remember_standing(spec, 246, 3, after_scale_in, 1000.0 + STANDING_AFTER_SCALE_IN,
                             nothing_visible=True).standing == 234
    # A scale-in by hand (kubectl scale) kills workers too.
    by_hand = empty.with_hand_scale(1000.0, 6, 3)
    assert remember_standing(spec, 246, 3, by_hand, 1500.0, nothing_visible=True).standing is None
    assert remember_standing(spec, 246, 3, by_hand, 1900.0, nothing_visible=True).standing == 234
    assert remember_standing(spec, 246, 3, empty.with_hand_scale(1000.0, 3, 6), 1500.0,
                             nothing_visible=True).standing == 234
    # Twenty-minute jobs: their visibility timeout is longer than a job, so two jobs' time must pass.
    long_jobs = make_spec(policy={**SCHEDULED, "serviceTime": "20m"})
    assert remember_standing(long_jobs, 246, 3, after_scale_in, 1000.0 + 2400 - 10,
                             nothing_visible=True).standing is None
    assert remember_standing(long_jobs, 246, 3, after_scale_in, 1000.0 + 2400,
                             nothing_visible=True).standing == 234


def test_a_scale_in_by_hand_holds_the_standing_part_back_after_the_history_forgets_it() -> None:
    # The scales made by hand are kept only as far back as the history reaches (about 100 s here); what the workers
    # a `kubectl scale` killed held stays invisible for their visibility timeout, so the wait after it is kept on.
    run = Run(make_spec(policy=SCHEDULED), current=6)
    run.memory = run.memory.with_hand_scale(1000.0, 6, 3)
    run.current = 3
    for t in range(1000, 1900, 10):
        run.tick(float(t), 246, ages=(0.0,))
        assert run.memory.standing is None, t
    assert not run.memory.hand_scales  # pruned long before: the wait holds on its own time
    run.tick(1900.0, 246, ages=(0.0,))
    assert run.memory.standing == 246 - 4 * run.current  # learned once the wait is over
    assert ScalingMemory.from_json(json.loads(json.dumps(run.memory.to_json()))) == run.memory


def test_the_standing_part_never_exceeds_a_count_since_and_is_forgotten_at_zero() -> None:
    spec = make_spec(policy=SCHEDULED)
    memory = replace(ScalingMemory(), standing=234.0)
    # Something visible: nothing learned, but what is counted holds at least what stands.
    assert remember_standing(spec, 200, 23, memory, 0.0, nothing_visible=False).standing == 200
    assert remember_standing(spec, 0, 23, memory, 0.0, nothing_visible=False).standing is None
    # A larger bound raises it; a smaller one leaves it.
    assert remember_standing(spec, 300, 3, memory, 0.0, nothing_visible=True).standing == 288
    unchanged = remember_standing(spec, 240, 2, memory, 0.0, nothing_visible=True)
    assert unchanged is memory


def test_count_mode_without_messages_per_replica_keeps_no_standing_part() -> None:
    spec = make_spec(policy={"targetPerReplica": 5})
    memory = replace(ScalingMemory(), standing=10.0)
    assert remember_standing(spec, 246, 3, memory, 0.0, nothing_visible=True).standing is None


def test_memory_with_a_standing_part_round_trips_through_json() -> None:
    memory = replace(ScalingMemory(), standing=234.0)
    assert ScalingMemory.from_json(json.loads(json.dumps(memory.to_json()))) == memory
    with pytest.raises(ValueError, match="memory"):
        ScalingMemory.from_json({"standing": "many"})


def test_the_held_out_scheduled_retries_release_what_their_bursts_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    # holdout-scheduled-retries: 0.8 retries a second put five minutes ahead and waves of 600 put two minutes
    # ahead, on 2 s jobs four a pod. Before, the floor held every replica a wave raised for the rest of the run.
    scenario = holdout_scenario("holdout-scheduled-retries")
    rule = our_rule(scenario)
    ours = run_rule(scenario, rule).metrics
    monkeypatch.setattr(policy, "remember_standing", lambda *args, **_: args[3])  # the memory, unchanged
    before = run_rule(scenario, rule).metrics
    assert ours.wait_p99 <= scenario.slo_wait
    assert ours.worker_seconds < 0.4 * before.worker_seconds


def test_the_held_out_campaign_waves_keep_busy_replicas_when_a_scheduled_wave_comes_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # holdout-campaign-waves: four waves of 12,000 put at once, three scheduled two, four and six hours ahead, on
    # pods that hand their messages back on scale-in. When a wave comes due the count does not change; read as
    # standing, the floor released busy replicas while the wave's front waited minutes (58 duplicates, and told
    # serviceTime x0.5 a p99 of 1,222 s against the 1,200 s objective).
    scenario = holdout_scenario("holdout-campaign-waves")
    ours, halved = run_rule(scenario, our_rule(scenario)).metrics, run_rule(scenario, our_rule(scenario, 0.5)).metrics
    monkeypatch.setattr(policy, "front_waited", lambda *_: False)  # the floor as it was
    before = run_rule(scenario, our_rule(scenario)).metrics
    before_halved = run_rule(scenario, our_rule(scenario, 0.5)).metrics
    assert ours.scale_in_duplicates < 0.5 * before.scale_in_duplicates
    assert halved.wait_p99 <= scenario.slo_wait < before_halved.wait_p99
    assert ours.worker_seconds < 1.02 * before.worker_seconds


def test_the_live_fidelity_scenario_with_standing_retries_releases_what_its_burst_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # benchmarks/scenarios/fidelity/fidelity-standing.yaml with its own rule: 0.5 a second of 1 s jobs, two a pod,
    # and 0.5 a second scheduled two minutes ahead (about 60 standing from 120 s); 400 put at 150 s raise 8 replicas.
    # Once they are worked off the count is back to about 62 with nothing visible: 60 learned as standing at 1
    # replica, so 8 -> 2 -> 1; read as in flight, 62 fills the 8 replicas' 16 slots and holds them to the end.
    sc, rule = fidelity_scenario("standing")
    ours = run_rule(sc, rule)
    assert (155, 1, 8) in ours.scale_actions and (200, 8, 2) in ours.scale_actions and ours.scale_actions[-1][2] == 1
    monkeypatch.setattr(policy, "remember_standing", lambda *args, **_: args[3])
    held = run_rule(sc, rule)
    assert held.scale_actions[-1] == (155, 1, 8)
    assert ours.metrics.worker_seconds < 0.5 * held.metrics.worker_seconds
    assert ours.metrics.wait_p99 <= held.metrics.wait_p99


def test_the_live_fidelity_scenario_with_a_block_come_due_holds_its_busy_replicas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # benchmarks/scenarios/fidelity/fidelity-due.yaml with its own rule: 240 put at 20 s with a 2-minute delay, a
    # stream of 0.3 a second, 1-3 s jobs two a pod on killed pods. The block is sized as backlog from 25 s (8
    # replicas) and comes due at 140 s with the count unchanged; its waiting front proves the 8 busy, so they are
    # released in one step once it is worked off. Read as standing once due, the floor let the rule kill busy
    # workers while the block waited.
    sc, rule = fidelity_scenario("due")
    ours = run_rule(sc, rule)
    assert (25, 0, 8) in ours.scale_actions and (180, 8, 1) in ours.scale_actions
    assert not [a for a in ours.scale_actions if 25 < a[0] < 180]
    monkeypatch.setattr(policy, "front_waited", lambda *_: False)
    before = run_rule(sc, rule)
    assert [a for a in before.scale_actions if 140 < a[0] < 180 and a[2] < a[1]]  # released while the block waited
    assert ours.metrics.scale_in_duplicates < before.metrics.scale_in_duplicates
    assert ours.metrics.wait_p99 < before.metrics.wait_p99


def test_a_front_age_proves_no_wait_where_a_poll_since_its_put_found_nothing_visible() -> None:
    # A peek's age counts from the put: a retry scheduled 8 minutes ahead shows 480 s the moment it turns visible.
    # A poll since its put that found nothing visible proves it turned visible later, at a moment nothing tells.
    history = [seen(100.0, 220, 5, ages=(0.0, 3.0)), seen(110.0, 221, 5, ages=(1.0, 0.0))]
    due = throughput.proven_waits(seen(120.0, 222, 5, ages=(480.0, 480.0)), history)
    assert [r.oldest_age for r in due.readings] == [None, None]
    # Each queue by its own polls: put at 105 s, the first was seen non-empty since, the second empty at 110 s.
    mixed = throughput.proven_waits(seen(120.0, 222, 5, ages=(15.0, 15.0)), history)
    assert [r.oldest_age for r in mixed.readings] == [15.0, None]
    younger = throughput.proven_waits(seen(120.0, 222, 5, ages=(5.0, 0.0)), history)
    assert [r.oldest_age for r in younger.readings] == [5.0, 0.0]  # put after the last empty poll; nothing visible


def test_the_held_out_backoff_retries_learn_no_slower_speed_from_retries_come_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # holdout-backoff-retries: 5 deliveries a second, retries scheduled 30 s, 2 min and 8 min ahead, 1 s jobs four
    # a pod (4 a second a replica). Read as waits since the put, retries come due taught the rule 1.6 a second on
    # the suite's seed; since each simulated message draws its own service time, that reading teaches it on seeds
    # 2 and 4 (and 5) of 1 to 5, not on the suite's, so the run is made on seed 4.
    scenario = replace(holdout_scenario("holdout-backoff-retries"), seed=4)
    rule = our_rule(scenario)
    remember = throughput._remember_bound
    learned: list[float] = []

    def recorded(spec: QueueScalerSpec, memory: ScalingMemory, stated: float, bound: float) -> ScalingMemory:
        kept = remember(spec, memory, stated, bound)
        if kept.learned_throughput != memory.learned_throughput and kept.learned_throughput is not None:
            learned.append(kept.learned_throughput)
        return kept

    monkeypatch.setattr(throughput, "_remember_bound", recorded)
    ours = run_rule(scenario, rule).metrics
    assert all(speed >= 0.8 * 4.0 for speed in learned), learned
    monkeypatch.setattr(throughput, "proven_waits", lambda observation, _: observation)  # every age read as a wait
    before = run_rule(scenario, rule).metrics
    assert min(learned) < 0.5 * 4.0
    assert ours.wait_p99 <= scenario.slo_wait
    assert ours.worker_seconds < 0.95 * before.worker_seconds
