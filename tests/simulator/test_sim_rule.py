"""The simulator runs the operator's own Reconciler and policy: same counts, same decisions."""

from __future__ import annotations

import yaml

from controller.commands.simulate import default_rule
from controller.model.readings import Observation, ScalingMemory, SourceReading
from controller.model.rule import QueueScaler, parse_queuescaler
from controller.policy import decide, sizing
from controller.simulator.adapters import VirtualClock
from controller.simulator.run import rule_contender, simulate
from tests.sim_helpers import scenario

RULE = """
apiVersion: queuescale.io/v1alpha1
kind: QueueScaler
metadata: {name: orders}
spec:
  scaleTargetRef: {name: orders-worker}
  minReplicas: 0
  maxReplicas: 40
  pollingInterval: 10s
  sources:
    - {type: azure-queue, queueName: orders, connectionSecretRef: {name: q, key: c}}
  policy:
    targetPerReplica: 10
    lookahead: 20s
    scaleDown:
      stabilizationWindow: 1m
      policies: [{type: Percent, value: 50, period: 30s}]
    scaleToZeroDelay: 2m
"""


def _rule() -> QueueScaler:
    return parse_queuescaler(yaml.safe_load(RULE))


def test_the_simulator_decides_exactly_as_a_direct_sequence_of_decide_calls() -> None:
    sc = scenario(
        duration=3600,
        workers={"startupDelay": 20, "serviceTime": {"distribution": "exponential", "mean": 3}, "concurrency": 2},
        arrivals=[{"type": "poisson", "rate": 2},
                  {"type": "burst", "at": [600, 2400], "messages": 1500, "over": 60}],
    )
    rule = _rule()
    result = simulate(sc, [rule_contender("orders", rule, sc.start_epoch)])[0]
    ticks = result.ticks
    assert len(ticks) == 360
    assert len({t.desired for t in ticks}) > 3  # it really scaled, up and down

    history: list[Observation] = []
    memory = ScalingMemory()
    current = sc.workers.initial_replicas
    replayed = []
    for tick in ticks:
        assert tick.count is not None
        observation = Observation(time=tick.t, readings=(SourceReading.of(int(tick.count)),))
        decision = decide(rule.spec, observation, history, current, memory, tick.t)
        memory = decision.memory.with_scale(tick.t, current, decision.desired)
        history.append(observation)
        replayed.append((current, decision.desired))
        current = decision.desired
    assert replayed == [(t.current, t.desired) for t in ticks]


def test_the_virtual_clock_starts_at_the_scenario_start() -> None:
    sc = scenario(start="2026-03-02T08:00:00Z")
    clock = VirtualClock(sc.start_epoch)
    clock.t = 60
    assert clock.now() == 1772438400 + 60


def test_the_default_rule_is_sized_from_the_scenario() -> None:
    sc = scenario(slo={"waitSeconds": 60}, workers={"serviceTime": 3, "concurrency": 2, "startupDelay": 25,
                                                     "maxReplicas": 30})
    rule = default_rule(sc)
    policy = rule.spec.policy
    assert (policy.target_wait, policy.service_time, policy.messages_per_replica) == (60, 3, 2)
    assert policy.lookahead == 25
    assert sizing(rule.spec).target == 2 + 2 / 3 * 30  # 2 slots + throughput x half the wait objective
    assert rule.spec.max_replicas == 30
    assert rule.spec.max_replicas == 30


def test_a_rule_schedule_follows_the_virtual_clock() -> None:
    doc = yaml.safe_load(RULE)
    doc["spec"]["schedules"] = [{"name": "office", "start": "08:00", "end": "09:00", "minReplicas": 5}]
    rule = parse_queuescaler(doc)
    sc = scenario(start="2026-01-05T07:30:00Z", duration=7200, arrivals=[{"type": "constant", "rate": 0}])
    result = simulate(sc, [rule_contender("orders", rule, sc.start_epoch)])[0]
    assert result.scale_actions[0] == (1800, 0, 5)  # 08:00 is 30 minutes in
    assert result.scale_actions[1][0] >= 5400  # not before 09:00
    assert result.scale_actions[-1][2] == 0


async def test_a_visible_count_source_peeks_below_32_and_falls_back_above() -> None:
    from controller.simulator.adapters import SimulatedSource
    from controller.simulator.world import World

    doc = yaml.safe_load(RULE)
    doc["spec"]["sources"][0]["countStrategy"] = "visible"
    rule = parse_queuescaler(doc)
    sc = scenario(workers={"startupDelay": 0, "serviceTime": 100, "initialReplicas": 5})
    world = World(sc.queue, sc.workers, sc.workers.service_time.table(), seed=1, initial_replicas=5)
    source = SimulatedSource(rule.spec.sources[0], world)
    world.put(0, 20)
    world.step(0)
    assert (await source.poll(10)).count == 15  # 5 in flight are invisible
    world.put(1, 40)
    world.step(1)
    assert (await source.poll(10)).count == 60  # 55 visible: peek says "32 or more", so the approximate count


async def test_each_kind_of_source_reads_what_its_kind_counts() -> None:
    from controller.model.fields import SecretKeyRef
    from controller.model.sources.aws_sqs import AwsSqsSource
    from controller.model.sources.rabbitmq import RabbitMqSource
    from controller.model.sources.redis_list import RedisListSource
    from controller.model.sources.sql_table import SqlTableSource
    from controller.simulator.adapters import SimulatedSource
    from controller.simulator.world import World

    sc = scenario(workers={"startupDelay": 0, "serviceTime": 30, "initialReplicas": 5})
    world = World(sc.queue, sc.workers, sc.workers.service_time.table(), seed=1, initial_replicas=5)
    world.put(0, 20)
    world.put(0, 4, delay=300)
    world.step(0)
    lists = RedisListSource(type="redis-list", list_name="jobs", host="h")
    table = SqlTableSource(type="sql-table", table="jobs", host="h", database="d", user="u")
    pending = RedisListSource(type="redis-list", stream_name="s", consumer_group="g", host="h")
    both = RedisListSource(type="redis-list", stream_name="s", consumer_group="g", host="h",
                           stream_count="pendingAndLag")
    ready = RabbitMqSource(type="rabbitmq", queue="q", management_url="http://r")
    unacked = RabbitMqSource(type="rabbitmq", queue="q", management_url="http://r", count="readyAndUnacked")
    key_id, secret_key = SecretKeyRef("aws", "id"), SecretKeyRef("aws", "secret")
    sqs = AwsSqsSource(type="aws-sqs", queue_url="https://q/123456789012/q", region="eu-west-1",
                       access_key_id_secret_ref=key_id, secret_access_key_secret_ref=secret_key)
    sqs_all = AwsSqsSource(type="aws-sqs", queue_url="https://q/123456789012/q", region="eu-west-1",
                           access_key_id_secret_ref=key_id, secret_access_key_secret_ref=secret_key,
                           include_in_flight=True)
    specs = (lists, table, pending, both, ready, unacked, sqs, sqs_all)
    counts = [(await SimulatedSource(spec, world).poll(10)).count for spec in specs]
    assert counts == [15, 15, 5, 20, 15, 20, 15, 20]  # 5 in flight, 4 not yet due: a list and a table see neither


async def test_the_sources_that_say_so_report_how_long_the_oldest_waiting_message_waited() -> None:
    from controller.model.sources.redis_list import RedisListSource
    from controller.model.sources.sql_table import SqlTableSource
    from controller.simulator.adapters import SimulatedSource
    from controller.simulator.world import World

    doc = yaml.safe_load(RULE)
    counting = parse_queuescaler(doc)  # targetPerReplica: the policy learns nothing from waits
    doc["spec"]["policy"] = {"serviceTime": "100s", "targetWaitSeconds": 60}
    rule = parse_queuescaler(doc)
    sc = scenario(workers={"startupDelay": 0, "serviceTime": 100, "initialReplicas": 5})
    world = World(sc.queue, sc.workers, sc.workers.service_time.table(), seed=1, initial_replicas=5)
    clock = VirtualClock(0.0)
    azure = SimulatedSource(rule.spec.sources[0], world, clock)
    due = SimulatedSource(SqlTableSource(type="sql-table", table="jobs", due_column="due_at", host="h",
                                         database="d", user="u"), world, clock)
    others = [SimulatedSource(spec, world, clock) for spec in (
        counting.spec.sources[0],  # oldestAge: auto peeks for nothing in count mode
        SqlTableSource(type="sql-table", table="jobs", host="h", database="d", user="u"),
        RedisListSource(type="redis-list", list_name="jobs", host="h"),
    )]
    world.put(0, 3)
    world.step(0)  # the 5 replicas take 3: none waits
    assert (await azure.poll(10)).oldest_age == 0.0
    world.put(1, 4)
    for t in range(1, 31):
        world.step(t)
    clock.t = 30
    # Azure peeks the front message, a job table reads its oldest due row; the others do not say.
    assert [(await s.poll(10)).oldest_age for s in (azure, due, *others)] == [29.0, 29.0, None, None, None]


async def test_a_front_message_delivered_before_gives_no_age() -> None:
    # Its age counts a worker's time as well as waits: the real source says nothing rather than a wrong wait.
    from controller.simulator.adapters import SimulatedSource
    from controller.simulator.world import World

    doc = yaml.safe_load(RULE)
    doc["spec"]["policy"] = {"serviceTime": "100s", "targetWaitSeconds": 60}
    rule = parse_queuescaler(doc)
    sc = scenario(workers={"startupDelay": 0, "serviceTime": 100, "initialReplicas": 5})  # visibility 60 s
    world = World(sc.queue, sc.workers, sc.workers.service_time.table(), seed=1, initial_replicas=5)
    clock = VirtualClock(0.0)
    azure = SimulatedSource(rule.spec.sources[0], world, clock)
    world.put(0, 5)
    for t in range(0, 61):
        world.step(t)
    clock.t = 60
    reading = await azure.poll(10)
    assert world.visible_count == 5 and reading.count == 5  # back after the visibility timeout, still worked on
    assert reading.oldest_age is None
