"""`queuescale run`: watch QueueScalers and run one reconciler per rule while this replica leads.

The pieces: a `RuleWatcher` per scope feeds `Operator` (sync / upsert / delete); each valid rule gets a
`Reconciler` running on its own task with a `KubernetesScaleTarget` (wrapped in the guards of
controller/targets/guards.py) and its sources; a `RuleReporter` (controller/report/) turns each tick into metrics, a
status patch (only when something changed) and rate-limited events, written through controller/kube/. Leader
election gates the rule tasks; health and metrics are served on their own ports. What the operator keeps per rule
is in controller/operator/state.py, the garbage-collector tuning in controller/operator/heap.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
from collections.abc import Callable
from typing import Any

from controller import __version__
from controller.kube.api import KubeApi, load_configuration
from controller.kube.errors import KubeError
from controller.kube.events import EventRecorder, event_sender
from controller.kube.lease import LeaderElector
from controller.kube.ownership import HpaWatch, Ownership
from controller.kube.ratelimit import TokenBucket
from controller.kube.rules import RuleWatcher
from controller.kube.secrets import SecretCache, secret_reader
from controller.kube.status import write_status
from controller.kube.timestamps import parse_rfc3339
from controller.kube.workloads import WorkloadCache, workload_watches
from controller.model.fields import SpecError
from controller.model.readings import ScalingMemory
from controller.model.rule import QueueScaler, parse_queuescaler
from controller.net.http import HttpClient, polling_client
from controller.net.httpserve import HttpServer, metrics_app, probe_app
from controller.net.slots import Slots
from controller.operator.heap import settle_the_heap
from controller.operator.options import MAX_SPREAD, OperatorOptions
from controller.operator.state import RuleState, is_ready, kept, rule_fingerprint, rule_key
from controller.reconciler import Clock, Reconciler, SystemClock
from controller.report.metrics import Metrics
from controller.report.reporter import ReportedRule, Reporting, RuleReporter
from controller.report.status import Status, memory_from_status
from controller.report.writer import LatestWins
from controller.sources import build_source
from controller.sources.base import Source, SourceContext
from controller.targets.base import Target
from controller.targets.guards import LeaderGuardedTarget, OwnedTarget
from controller.targets.kubernetes_scale import KubernetesScaleTarget

log = logging.getLogger(__name__)

TargetFactory = Callable[[QueueScaler], Target]


class Operator:
    """Keeps one reconciler task per valid rule while leading; writes what each tick saw."""

    def __init__(
        self,
        api: KubeApi,
        http: HttpClient,
        options: OperatorOptions,
        *,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
        target_factory: TargetFactory | None = None,
    ) -> None:
        self.api = api
        self.http = http
        self.options = options
        self.metrics = metrics or Metrics()
        self.clock = clock or SystemClock()
        self.identity = options.identity or f"{socket.gethostname()}-{os.getpid()}"
        self.secrets = SecretCache(secret_reader(api), ttl=options.secret_ttl, access=options.secret_access)
        self.ownership = Ownership(forget=self._forget_target_state)
        self.workloads = WorkloadCache(now=self.clock.now)  # kept current by the watches run() starts
        self.events = EventRecorder(event_sender(api), self.identity,
                                    counted=lambda outcome: self.metrics.events.labels(result=outcome).inc())
        factory = target_factory or self._kubernetes_target
        self.target_factory: TargetFactory = lambda rule: LeaderGuardedTarget(
            OwnedTarget(factory(rule), self.ownership, rule), self.may_write)
        self.rules: dict[str, RuleState] = {}
        self.leading = not options.leader_elect
        self.synced_scopes: set[str | None] = set()
        self.ready = asyncio.Event()
        # Checked right before every write: with leader election, whether our lease is still fresh (see
        # LeaderElector.holds_lease); `leading` alone lags behind when the process was frozen.
        self.lease_valid: Callable[[], bool] = lambda: True
        self._lock = asyncio.Lock()
        # Ticks hand their status writes over and go on polling (see controller/report/writer.py).
        self.status_writes: LatestWins[tuple[ReportedRule, Status, float]] = LatestWins(
            self._write_submitted, concurrency=options.status_writers)
        self.reporting = Reporting(
            metrics=self.metrics, events=self.events, pacing=options, now=self.clock.now, may_write=self.may_write,
            submit_status=lambda state, status, now: self.status_writes.submit(state.key, (state, status, now)),
            write_status=self._write_reported, rule_count=lambda: len(self.rules), first_tick=self._first_tick,
            invalidate_secrets=self.secrets.invalidate)
        self.metrics.leader.set(1 if self.leading else 0)
        self.metrics.rules.count = self.count_rules
        # How long the rules took to tick once after this replica began leading (see _first_tick).
        self._running: set[str] = set()  # rules whose loop runs
        self._ticked: set[str] = set()  # ...and have ticked since leading began
        self._leading_since = 0.0
        self._all_ticked = False
        if self.leading:
            self._began_leading()
        self.tick_slots = Slots(options.max_concurrent_ticks)

    # ---------------------------------------------------------------------------------------------- plumbing

    def _forget_target_state(self, key: str) -> None:
        state = self.rules.get(key)
        if state is not None and state.reconciler is not None:
            state.reconciler.forget_target_state()

    def _kubernetes_target(self, rule: QueueScaler) -> Target:
        return KubernetesScaleTarget(self.api, rule.spec.scale_target_ref, rule.namespace, workloads=self.workloads,
                                     in_flight=rule.spec.in_flight)

    def _began_leading(self) -> None:
        self._leading_since = self.clock.now()
        self._ticked.clear()
        self._all_ticked = False
        for state in self.rules.values():
            state.ticked = False
        self.metrics.leading_since.set(self._leading_since)
        self.metrics.rules_ticked.set(0)
        self.metrics.first_ticks.set(float("nan"))

    def _first_tick(self, key: str) -> None:
        """The rule ticked for the first time since this replica began leading."""
        self._ticked.add(key)
        self.metrics.rules_ticked.set(len(self._ticked))
        self._check_all_ticked()

    def _check_all_ticked(self) -> None:
        # Not before the first full list: until then, the rules running are only those listed so far.
        if not self._all_ticked and self.ready.is_set() and self.leading and len(self._ticked) >= len(self._running):
            self._all_ticked = True
            seconds = self.clock.now() - self._leading_since
            self.metrics.first_ticks.set(seconds)
            log.info("every rule (%d) has ticked once, %.1fs after this replica began leading", len(self._ticked),
                     seconds)

    def may_write(self) -> bool:
        """Whether this replica may write now: it leads, and (with leader election) its lease is fresh."""
        return self.leading and self.lease_valid()

    def _sources(self, rule: QueueScaler) -> list[Source]:
        # One resolver per source: a Secret may allow some source kinds only (queuescale.io/allowed-sources).
        return [build_source(spec, SourceContext(
            http=self.http, secrets=self.secrets.resolver(rule.namespace, rule.name, spec.type),
            namespace=rule.namespace)) for spec in rule.spec.sources]

    # ---------------------------------------------------------------------------------------------- watch handler

    async def sync(self, scope: str | None, objects: list[dict[str, Any]]) -> None:
        async with self._lock:
            seen = set()
            together = len(objects)
            for obj in objects:
                key = "?"
                try:
                    key = rule_key(obj)
                    seen.add(key)
                    await self._upsert(obj, spread=together)
                except Exception:
                    # One object we cannot handle must not hold up every other rule of the scope (nor delete the
                    # rules listed after it): say which, count it, go on. Its next event is handled afresh.
                    self.metrics.sync_errors.inc()
                    log.exception("rule %s: handling it in the list failed; going on with the others", key)
            for key, state in list(self.rules.items()):
                in_scope = scope is None or state.namespace == scope
                if in_scope and key not in seen:
                    await self._delete(key)
            self.synced_scopes.add(scope)
            wanted: set[str | None] = set(self.options.namespaces) or {None}
            if wanted <= self.synced_scopes:
                if not self.ready.is_set():
                    settle_the_heap()
                self.ready.set()
                if self._running:
                    self._check_all_ticked()

    async def upsert(self, obj: dict[str, Any]) -> None:
        async with self._lock:
            await self._upsert(obj)

    async def delete(self, obj: dict[str, Any]) -> None:
        async with self._lock:
            await self._delete(rule_key(obj))

    async def _upsert(self, obj: dict[str, Any], *, spread: int = 0) -> None:
        key = rule_key(obj)
        state = self.rules.get(key)
        fingerprint = rule_fingerprint(obj)
        if state is not None and state.uid != str((obj.get("metadata") or {}).get("uid") or ""):
            await self._delete(key)  # deleted and created again under the same name
            state = None
        if state is None:
            state = RuleState(key=key, obj=kept(obj), uid=str((obj.get("metadata") or {}).get("uid") or ""))
            state.reporter = RuleReporter(self.reporting, state)
            self._adopt_status(state, obj)
            self.rules[key] = state
        elif not self.leading:
            self._adopt_status(state, obj)  # the leader's writes: what a takeover starts from
        state.obj = kept(obj)
        if fingerprint == state.fingerprint:
            return  # our own status write, or a metadata change that does not matter
        state.fingerprint = fingerprint
        try:
            rule = parse_queuescaler(obj)
        except SpecError as exc:
            self.ownership.release(key)
            await self._stop_task(state, graceful=False)
            state.rule, state.errors, state.reconciler = None, exc.errors, None
            log.warning("rule %s is not valid: %s", key, exc)
            if self.leading:
                await self._report_invalid(state)
            return
        state.rule, state.errors = rule, ()
        try:
            sources = self._sources(rule)
        except KeyError as exc:  # a kind the spec knows but this build cannot poll
            self.ownership.release(key)
            await self._stop_task(state, graceful=False)
            state.reconciler = None
            if self.leading:
                await self._reporter(state).setup_failed(rule, "UnsupportedQueueKind",
                                                         f"no poller for queue kind {exc}")
            return
        self.ownership.claim(key, rule, obj)
        if state.reconciler is None:
            state.reconciler = Reconciler(
                rule, sources, self.target_factory(rule), self.clock, self._reporter(state),
                memory=self._stored_memory(state), target_refresh=self.options.target_refresh,
            )
        else:
            state.reconciler.update(rule, sources)
            state.reconciler.target = self.target_factory(rule)
        if self.leading and state.task is None:
            self._start_task(state, spread=spread)

    @staticmethod
    def _adopt_status(state: RuleState, obj: dict[str, Any]) -> None:
        """Take the status stored on the object (another replica's or an earlier process's) as our last write, as
        of its lastPollTime: a first tick that sees what it says writes nothing until the heartbeat or a
        significant change is due, instead of 10,000 rewrites of true statuses after every restart."""
        status = obj.get("status")
        state.last_status = status if isinstance(status, dict) else None
        state.last_write = parse_rfc3339((state.last_status or {}).get("lastPollTime")) or 0.0
        state.submitted = None

    def _stored_memory(self, state: RuleState) -> ScalingMemory:
        stored = memory_from_status(state.last_status)
        if stored is None:
            return ScalingMemory()
        try:
            return ScalingMemory.from_json(stored)
        except ValueError as exc:
            log.warning("rule %s: ignoring its stored memory (%s)", state.key, exc)
            return ScalingMemory()

    async def _delete(self, key: str) -> None:
        state = self.rules.pop(key, None)
        if state is None:
            return
        self._ticked.discard(key)
        self.ownership.release(key)
        await self._stop_task(state, graceful=False)
        self.status_writes.forget(key)
        self.metrics.forget_rule(state.namespace, state.name)
        self.events.limiter.forget(f"{state.namespace}/{state.name}/{state.uid}")
        log.info("rule %s deleted: stopped", key)

    def count_rules(self) -> dict[str, int]:
        """Rules by state, for `queuescale_rules` (counted when scraped)."""
        counts = {"ready": 0, "not_ready": 0, "invalid": 0, "paused": 0}
        for state in list(self.rules.values()):  # a copy: the scrape runs in a thread while rules change
            if state.rule is None:
                counts["invalid"] += 1
            elif state.rule.paused:
                counts["paused"] += 1
            elif is_ready(state.last_status):
                counts["ready"] += 1
            else:
                counts["not_ready"] += 1
        return counts

    # ---------------------------------------------------------------------------------------------- tasks

    def _start_task(self, state: RuleState, *, spread: int = 0) -> None:
        """Start the rule's loop. `spread`: how many rules start together (a relist, a new leader); they begin at a
        random point of their first interval (at most MAX_SPREAD), so that N rules do not poll all at once."""
        assert state.reconciler is not None
        state.stop = asyncio.Event()
        reconciler, stop = state.reconciler, state.stop
        # At most MAX_SPREAD: a rule polled hourly must not wait up to an hour for its first status.
        window = min(reconciler.rule.spec.polling_interval, MAX_SPREAD)
        first_delay = random.uniform(0.0, window) if spread else 0.0
        self._running.add(state.key)

        async def run() -> None:
            try:
                await reconciler.run(stop, first_delay=first_delay, slots=self.tick_slots)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("rule %s: the loop failed; it restarts on the next change", state.key)

        state.task = asyncio.create_task(run(), name=f"rule {state.key}")

    async def _stop_task(self, state: RuleState, *, graceful: bool) -> None:
        self._running.discard(state.key)
        self._ticked.discard(state.key)
        task, state.task = state.task, None
        if task is None:
            return
        state.stop.set()
        if graceful:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), self.options.shutdown_grace)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def started_leading(self) -> None:
        async with self._lock:
            self.leading = True
            self.metrics.leader.set(1)
            self._began_leading()
            for state in self.rules.values():
                if state.rule is None and state.errors:
                    await self._report_invalid(state)
                elif state.reconciler is not None and state.task is None:
                    # Another leader may have written since: take its memory so cooldowns carry over.
                    state.reconciler.memory = self._stored_memory(state)
                    state.reconciler.forget_target_state()
                    self._start_task(state, spread=len(self.rules))

    async def stopped_leading(self) -> None:
        # No lock: stop writing at once, even in the middle of a sync.
        self.leading = False
        self.metrics.leader.set(0)
        await asyncio.gather(*(self._stop_task(s, graceful=False) for s in list(self.rules.values())))

    async def shutdown(self) -> None:
        """Let every in-flight tick finish and its status be written (up to the grace period), then stop."""
        await asyncio.gather(*(self._stop_task(s, graceful=True) for s in list(self.rules.values())))
        if not await self.status_writes.drain(self.options.shutdown_grace):
            log.warning("stopping with %d status writes not made", self.status_writes.queued)
        await self.status_writes.close()

    # ---------------------------------------------------------------------------------------------- reporting

    @staticmethod
    def _reporter(state: RuleState) -> RuleReporter:
        assert state.reporter is not None  # made with the state
        return state.reporter

    async def _report_invalid(self, state: RuleState) -> None:
        generation = int((state.obj.get("metadata") or {}).get("generation") or 0)
        await self._reporter(state).invalid(state.name, generation, state.errors)

    async def _write_submitted(self, item: tuple[ReportedRule, Status, float]) -> None:
        await self._write_reported(*item)

    async def _write_reported(self, reported: ReportedRule, status: Status, now: float) -> bool:
        state = self.rules.get(reported.key)
        if state is None or state is not reported:  # deleted (or re-created) while the write waited
            return False
        return await self._write_status(state, status, now)

    async def _write_status(self, state: RuleState, status: Status, now: float) -> bool:
        """Write the rule's status now, if this replica may; True when written."""
        if not self.may_write():
            return False
        try:
            await write_status(self.api, state.namespace, state.name, status, state.last_status)
        except KubeError as exc:
            state.submitted = None  # the next tick writes again
            self.metrics.api_errors.labels(operation="patch_status", status=str(exc.status)).inc()
            log.warning("rule %s: could not write status: %s %s", state.key, exc.status, exc.reason)
            return False
        state.last_status = status
        state.last_write = now
        return True


# -------------------------------------------------------------------------------------------------- main


async def run(options: OperatorOptions, *, stop: asyncio.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT (or `stop`); exit code 0 after a clean shutdown."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    try:
        configuration = await load_configuration(options.kubeconfig, options.context)
    except Exception as exc:
        log.error("cannot load a Kubernetes configuration: %s", type(exc).__name__ if not str(exc) else exc)
        return 2
    identity = options.identity or f"{socket.gethostname()}-{os.getpid()}"
    options.identity = identity
    api = KubeApi(configuration, user_agent=f"queuescale/{__version__} ({identity})",
                  limiter=TokenBucket(options.kube_qps, options.kube_burst))
    http = polling_client(timeout=options.http_timeout, max_connections=200)
    operator = Operator(api, http, options)
    operator.metrics.gc.install()
    heartbeat = {"time": loop.time()}

    def healthz() -> tuple[int, bytes]:
        alive = loop.time() - heartbeat["time"] < 30
        return (200, b"ok\n") if alive else (503, b"event loop stalled\n")

    def readyz() -> tuple[int, bytes]:
        return (200, b"ok\n") if operator.ready.is_set() else (503, b"not synced\n")

    servers = []
    tasks: list[asyncio.Task[Any]] = []
    elector: LeaderElector | None = None
    try:
        servers.append(await HttpServer(options.bind_address, options.health_port,
                                        probe_app({"/healthz": healthz, "/readyz": readyz})).start())
        servers.append(await HttpServer(options.bind_address, options.metrics_port,
                                        metrics_app(operator.metrics.registry)).start())
        log.info("health on %s:%d, metrics on %s:%d", options.bind_address, servers[0].port, options.bind_address,
                 servers[1].port)

        async def beat() -> None:
            while True:
                heartbeat["time"] = loop.time()
                await asyncio.sleep(1)

        tasks.append(asyncio.create_task(beat()))
        scopes: list[str | None] = list(options.namespaces) or [None]
        for targets in workload_watches(
                api, operator.workloads, scopes, watch_timeout=options.watch_timeout,
                on_error=lambda resource, reason: operator.metrics.watch_errors.labels(resource, reason).inc()):
            tasks.append(asyncio.create_task(
                targets.run(), name=f"{targets.plural} watch {targets.namespace or 'all'}"))
        for scope in scopes:
            hpas = HpaWatch(api, operator.ownership.hpas, namespace=scope, watch_timeout=options.watch_timeout)
            tasks.append(asyncio.create_task(hpas.run(), name=f"hpa watch {scope or 'all'}"))
        for scope in scopes:
            watcher = RuleWatcher(api, operator, namespace=scope, selector=options.selector,
                                  watch_timeout=options.watch_timeout,
                                  on_error=lambda reason: operator.metrics.watch_errors.labels(
                                      resource="queuescalers", reason=reason).inc())
            tasks.append(asyncio.create_task(watcher.run(), name=f"watch {scope or 'all'}"))
        if options.leader_elect:
            elector = LeaderElector(
                api, namespace=options.lease_namespace, name=options.lease_name, identity=operator.identity,
                lease_duration=options.lease_duration, renew_deadline=options.renew_deadline,
                retry_period=options.retry_period, on_started=operator.started_leading,
                on_stopped=operator.stopped_leading,
            )
            operator.lease_valid = elector.holds_lease
            tasks.append(asyncio.create_task(elector.run(), name="leader election"))
        await stop.wait()
        log.info("stopping: finishing in-flight ticks")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await operator.shutdown()
        if elector is not None:
            await elector.release()
        for server in servers:
            await server.stop()
        await http.aclose()
        await api.close()
        operator.metrics.gc.uninstall()
    log.info("stopped")
    return 0
