"""The worker: weighted work-conserving reads, bounded concurrency, heartbeats, reclaim and a graceful drain."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from redis.exceptions import ResponseError

from tierpool.model.adoption import GroupRefused
from tierpool.model.durations import ms
from tierpool.protocol import policy, slots
from tierpool.protocol.apps import App
from tierpool.protocol.dispatch import Planner
from tierpool.protocol.envelope import MalformedEntry, Task
from tierpool.protocol.gather import Gathering
from tierpool.protocol.late_reads import confirm_threshold
from tierpool.protocol.task_state import marker_ttl_ms
from tierpool.runtime import logs
from tierpool.runtime.admission import Admission
from tierpool.runtime.drain import Drain
from tierpool.runtime.eviction_watch import EvictionWatch
from tierpool.runtime.gathering import Gatherer
from tierpool.runtime.handler_loading import Handler, is_async
from tierpool.runtime.late_reads import LateReads
from tierpool.runtime.ledger import Key, SlotLedger
from tierpool.runtime.maintenance import Maintainer
from tierpool.runtime.metrics import WorkerMetrics
from tierpool.runtime.outcomes import Outcomes
from tierpool.runtime.preempting import Preemptor, Runnable
from tierpool.runtime.read_loop import FULL_WAIT, ReadLoop
from tierpool.runtime.reads import Reads
from tierpool.runtime.recovery import Recovery
from tierpool.runtime.refills import RefillFirst
from tierpool.runtime.settings import WorkerSettings
from tierpool.runtime.spans import RunSpans
from tierpool.runtime.supervise import Supervisor
from tierpool.runtime.task_control import TaskControl
from tierpool.runtime.threads import SyncRunner
from tierpool.runtime.time_limits import run_limited
from tierpool.runtime.writer import IDLE_TICK as WRITER_IDLE_TICK
from tierpool.runtime.writer import CompletionWriter, Item
from tierpool.store.connection import UNREACHABLE, AsyncRedis, wait_until_reachable
from tierpool.store.due import DueMover, Throttle
from tierpool.store.observe import read_eviction_policy
from tierpool.store.registry import publish_spec
from tierpool.store.replication import Wait, WaitGate
from tierpool.store.streams import Entry, Outcome, PoolStreams, is_nogroup

log = logging.getLogger("tierpool.worker")
NOT_OWNER = -1
"""An outcome script's reply when another consumer owns the entry."""
PING_TIMEOUT = 5.0
GROUP_REFUSED_FIRST, GROUP_REFUSED_MAX = 1.0, 60.0
"""The start-up's backoff while an adopted stream's groups refuse the pool's (tierpool.model.adoption)."""
RECLAIM_HOLDOFF_MIN = 1.0
"""After start-up and after a Redis error, reclaim pauses for two heartbeat intervals, and at least this long."""

TaskStarter = Callable[[asyncio.AbstractEventLoop, Coroutine[Any, Any, None]], "asyncio.Future[None]"]
_eager_factory = getattr(asyncio, "create_eager_task_factory", None)  # Python 3.12+
start_task: TaskStarter = (
    _eager_factory(asyncio.Task) if _eager_factory else lambda loop, coroutine: loop.create_task(coroutine)
)
"""Starts one task per message. On Python 3.12+ it starts eagerly: the handler runs at once, up to its first
real wait, inside the right asyncio Task (so ``asyncio.timeout`` and ``current_task`` behave), and a handler that
never waits finishes without a trip through the event loop: about a fifth less CPU per short task. Only these
tasks start eagerly; the handler's own tasks keep the loop's default factory."""


class Worker(ReadLoop):
    """Reads tasks by weight, runs them within ``concurrency``, and writes their outcomes; every entry it holds
    is tracked by one :class:`SlotLedger`, and every background loop runs under a :class:`Supervisor`."""

    def __init__(
        self,
        settings: WorkerSettings,
        handler: Handler,
        client: AsyncRedis,
        metrics: WorkerMetrics,
        clock: Callable[[], float] = time.time,
        start: TaskStarter = start_task,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        spec = settings.pool.spec
        self.settings, self.spec, self.handler, self.client = settings, spec, handler, client
        self.metrics, self.clock, self._start = metrics, clock, start
        self.pool = settings.pool.ref
        self.consumer = settings.consumer
        self.tier_names = spec.tier_names
        keys = settings.pool.keys
        self.streams = PoolStreams(client, keys, self.tier_names, spec.tenant_limits, spec.dead_letters)
        self.planner = Planner(
            [t.weight for t in spec.tiers], [t.max_concurrency for t in spec.tiers], spec.worker.dispatch
        )
        self._held_back = slots.held_back([t.reserved_slots for t in spec.tiers])
        self._ttl_ms = ms(spec.tasks.result_ttl)
        self.ledger = SlotLedger(settings.concurrency, len(spec.tiers))
        self.writer = CompletionWriter(self.streams, self.consumer, self._ttl_ms, self._landed, self._count_redis_error)
        self.writer.wait = WaitGate(Wait.of(spec.redis))
        self.refill = RefillFirst()
        self.ledger.on_run_ended, self.writer.before_batch = self.refill.slot_freed, self.refill.turn
        self.series = [metrics.for_tier(self.pool, name) for name in self.tier_names]
        for index, series in enumerate(self.series):
            series.in_flight = functools.partial(self.ledger.running.__getitem__, index)
        self.due = DueMover(self.streams)
        self.maintainer = Maintainer(self.streams, spec, settings.consumer, metrics, clock, self.due)
        self.ready = False
        self.stuck: list[Key] = []
        """After the drain: entries whose runs would not stop (the process must exit without waiting for them)."""
        self._app = handler if isinstance(handler, App) else None
        """An App screens each task before it starts: what it cannot run is dead-lettered without a run, and a task's
        default timeout and rate limit are filled in (tierpool.protocol.apps)."""
        self._sync = SyncRunner(handler, self.ledger, settings.concurrency, len(spec.tiers))
        self._invoke: Callable[[Task], Awaitable[Any]] = handler if is_async(handler) else self._sync
        self._slas = [tier.sla for tier in spec.tiers]
        self._stopping = asyncio.Event()
        self.throttle = Throttle(self.streams, spec, handler, self.consumer, self._stopping)
        recheck, read_policy = settings.eviction_recheck_seconds, functools.partial(read_eviction_policy, client)
        self.eviction = EvictionWatch(read_policy, spec.redis.allow_eviction, recheck, self._stopping, self._pause)
        self.reads = Reads(self.streams, self.consumer, ms(spec.recovery.claim_idle), self._stopping)
        self.reads.pause = self.eviction.paused  # a block in flight when the policy turns refused ends at once
        late = confirm_threshold(spec.recovery.claim_idle, spec.recovery.heartbeat)  # tierpool.runtime.late_reads
        self.late_reads = LateReads(self.streams, self.consumer, late, self.series, monotonic)
        self._reclaim_every = policy.reclaim_interval(spec.recovery.claim_idle, spec.recovery.retry_backoff)
        self._next_reclaim = 0.0
        self._reclaim_holdoff = max(2 * spec.recovery.heartbeat, RECLAIM_HOLDOFF_MIN)
        self.loops = Supervisor(recover=self._recover)
        self.outcomes = Outcomes(self.streams, spec.recovery, self.consumer, self._ttl_ms, self.series, clock)
        self.outcomes.rate_limited = self.throttle.limits
        self.admission = Admission(
            self.streams, self.consumer, spec.tasks.max_payload_bytes, self._dead_letter_now, self.throttle.buckets
        )
        marker_ttl = marker_ttl_ms(spec.tasks.result_ttl, spec.tasks.dedupe_window)
        self.control = TaskControl(
            self.streams, self.ledger, self.writer, self.consumer, self._ttl_ms, marker_ttl, clock, self.series
        )
        self.control.count_preemptions = any(tier.preemptible for tier in spec.tiers)
        self.gatherer = self.control.gatherer = Gatherer(
            self.streams, spec, self._app, self.consumer, self.control.tier_of, clock
        )
        self.preemptor = Preemptor(
            spec, self.streams, self.ledger, self.reads, self.consumer, marker_ttl, self.series, is_async(handler)
        )
        self.spans = RunSpans(self.pool, settings.handler, self.control.cancel_requested, self.preemptor.preempted)
        self.recovery = Recovery(
            self.streams, self.ledger, self.consumer, spec.recovery, self.series, self._launch, self._stopping,
            self._count_redis_error, self._dead_letter_now, self.control.check_running, self._held_back,
            self._screen_exhausted, self.late_reads.now,
        )  # fmt: skip

    @property
    def running(self) -> list[int]:
        """Running handlers per tier."""
        return self.ledger.running

    @property
    def inflight(self) -> dict[Key, asyncio.Future[None]]:
        """The handler runs still going, by (tier index, entry ID)."""
        return self.ledger.runs()

    # --- lifecycle -------------------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop reading; in-flight tasks finish within the grace period (SIGTERM)."""
        if not self._stopping.is_set():
            log.info("stop requested: draining %d in-flight task(s)", self.ledger.running_total)
        self._stopping.set()
        self.loops.stopping = True
        self.refill.close()
        self.ledger.changed.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def live(self) -> bool:
        """Liveness: every background loop alive and making progress."""
        return self.loops.live()

    def serving(self) -> bool:
        """Readiness: serving, and taking new work (not while the server's eviction policy is refused)."""
        return self.ready and self.eviction.safe

    def user_code_running(self) -> int:
        """Sync handler calls still running in threads (they cannot be stopped from outside)."""
        return self._sync.running

    async def run(self) -> int:
        """Serve until stopped; returns the process exit code (0 after a clean drain)."""
        if not await self._start_up():
            return 0
        # Just started (perhaps right after an outage): the other workers' heartbeats may not have refreshed their
        # entries yet, so reclaim holds off as it does after a Redis error.
        self._next_reclaim = time.monotonic() + self._reclaim_holdoff
        stall = self.settings.stall_seconds
        recovery = self.spec.recovery
        reader = self.loops.spawn(
            "reader", self._read_loop, max(stall, 3 * max(FULL_WAIT, self.settings.block_ms / 1000))
        )
        self.loops.spawn("heartbeat", self.recovery.heartbeat_loop, max(stall, 3 * recovery.heartbeat))
        self.loops.spawn("writer", self._writer_loop, max(stall, 3 * WRITER_IDLE_TICK))
        self.loops.spawn("eviction", self.eviction.run, max(stall, 3 * self.settings.eviction_recheck_seconds))
        if self.settings.maintenance:
            self.loops.spawn("maintenance", self._maintenance_loop, max(stall, 3 * recovery.sweep_interval))
        self.ready = True
        log.info("worker %s serving pool %s tiers %s", self.consumer, self.pool, self.tier_names)
        try:
            await reader
        finally:
            self.ready = False
            self.stuck = await Drain(self.streams, self.ledger, self.writer, self.consumer, recovery).run(
                self.settings.grace_seconds
            )
            await self.loops.stop()
            await self.maintainer.release()
            await self.reads.close()
            self._sync.shutdown()
        return 0

    async def _start_up(self) -> bool:
        """Reach Redis, load the scripts, create the groups; False when stopped first."""
        describe = self.settings.redis.redacted_url()
        refused_delay = GROUP_REFUSED_FIRST
        while await wait_until_reachable(self._ping, describe, sleep=self._pause, stop=self._stopping.is_set):
            try:
                await self._prepare()
                return True
            except UNREACHABLE as error:  # Redis went away again between the ping and the set-up
                log.warning("redis unreachable during start-up: %s", error)
                await self._pause(0.2)
            except GroupRefused as error:  # bad config: a clear error and a backoff, never a crash loop
                log.error("not starting: %s. Retrying in %.0f s", error, refused_delay)
                await self._pause(refused_delay)
                refused_delay = min(refused_delay * 2, GROUP_REFUSED_MAX)
        return False

    async def _ping(self) -> Any:
        return await asyncio.wait_for(self.client.ping(), PING_TIMEOUT)

    async def _prepare(self) -> None:
        await self.streams.load_scripts()
        await self.streams.ensure_groups()
        await publish_spec(self.client, self.streams.keys, self.spec)

    async def _recover(self, error: Exception) -> None:
        """Before a failed loop restarts: a missing consumer group (Redis lost its data) is created again."""
        if isinstance(error, ResponseError) and (is_nogroup(error) or "no such key" in str(error).lower()):
            log.warning("consumer group missing (redis restarted without data?); recreating it")
            await self._prepare()

    async def _writer_loop(self, beat: Callable[[], None]) -> None:
        self.writer.beat = beat
        await self.writer.run()

    async def _maintenance_loop(self, beat: Callable[[], None]) -> None:
        self.maintainer.beat, self.maintainer.resume_parked = beat, self.gatherer.sweep
        await self.maintainer.run(self._stopping)

    # --- running tasks ---------------------------------------------------------------------------------------

    async def _launch(self, entries: list[Entry], sent_at: float) -> None:
        """Start a task for every entry of one read or claim that :meth:`_runnable` lets through."""
        self._start_runs(await self._runnable(entries, sent_at))

    async def _runnable(self, entries: list[Entry], sent_at: float) -> list[Runnable]:
        """The entries of one read or claim that may start, through tierpool.runtime.admission; malformed or
        expired entries go to the dead-letter stream, cancelled ones are acked as cancelled
        (tierpool.runtime.task_control). An entry this process already holds is never started a second time, nor
        one a read sent at ``sent_at`` returned too late to still own."""
        self.control.loop = asyncio.get_running_loop()
        kept = self.admission.adopt(self.admission.within_limits(entries))
        entries, states, preemptions = await self.control.screen(kept)
        entries = await self.late_reads.confirm(entries, sent_at)
        now_ms = ms(self.clock())
        decoded = await self.admission.gate(self.admission.decode(entries, now_ms))
        runnable: list[Runnable] = []
        for entry, task in decoded:
            if self.ledger.holds((entry.tier_index, entry.id)):
                log.warning("entry %s is already held by this worker; not starting it twice", entry.id)
            elif isinstance(task, MalformedEntry):
                tier = self.tier_names[entry.tier_index]
                log.warning("dead-lettering malformed entry %s in %s: %s", entry.id, tier, task)
                self._dead_letter_now(entry, str(entry.fields.get("task_id", "")), str(task))
            elif task.attempt > self.spec.recovery.max_deliveries:  # counted before a move
                reason = f"exceeded maxDeliveries ({self.spec.recovery.max_deliveries})"
                self._dead_letter_now(entry, task.id, reason, task.attempt - 1)
            elif policy.deadline_passed(task.deadline_ms, now_ms):
                self._dead_letter_now(entry, task.id, policy.deadline_reason(task.attempt, task.resumes_gather))
            elif self._app is not None and (refused := self._app.screen(task)) is not None:
                log.warning("dead-lettering task %s (entry %s): %s", task.id, entry.id, refused)
                self._dead_letter_now(entry, task.id, refused)
            else:
                task.checkpoint_state, task.context = states.get(task.id), self.control
                runnable.append((entry, task, preemptions.get(task.id, 0)))
        return runnable

    def _start_runs(self, runnable: Sequence[Runnable]) -> None:
        loop = asyncio.get_running_loop()
        for entry, task, preemptions in runnable:
            key = (entry.tier_index, entry.id)
            if not self.ledger.start(key, task.id, task, preemptions):
                continue
            run = self._start(loop, self._execute(entry.tier_index, task))
            if not run.done():  # an eager start may have finished it already, bookkeeping included
                self.ledger.attach(key, run)

    def _dead_letter_now(
        self, entry: Entry, task_id: str, reason: str, attempts: int | None = None, cut: Sequence[int] = ()
    ) -> None:
        """Dead-letter an entry that will not run (its error: the task's remembered one); ``cut``: see streams."""
        if not self.ledger.hold((entry.tier_index, entry.id), task_id):
            return
        runs = entry.deliveries if attempts is None else attempts
        call = self.streams.dead_letter_call(
            entry.tier_index, self.consumer, entry.id, task_id, reason, "", runs, self._ttl_ms, cut
        )
        self.series[entry.tier_index].dead_lettered.inc()
        self.writer.submit(Outcome(entry.tier_index, entry.id, call))

    async def _execute(self, index: int, task: Task) -> None:
        """Run one task. The slot stops counting against concurrency as soon as the outcome is queued; the entry
        stays held (and heartbeated) until the outcome is written, so a crash in between means a re-run, never a
        loss, and a slow write never lets another worker (or this one) run it again."""
        queued = False
        run_logs = logs.enter_run(task.id, task.name or self.settings.handler, task.tier, task.attempt)
        try:
            if self.throttle.applies(task) and not await self.throttle.admit(index, task):
                return  # waits for its rate limit in the throttled set, without this slot
            self.ledger.in_handler((index, task.stream_id), task)  # only from here on may it be preempted
            started, wait = self.outcomes.started(index, task, self._slas[index])
            self.writer.submit(await self._run(index, task, started, wait))
            queued = True
        finally:
            logs.leave_run(run_logs)  # first: what the freed slot starts is not this run's
            self.ledger.run_ended((index, task.stream_id), queued)

    async def _run(self, index: int, task: Task, started: float, wait: float) -> Item:
        """The handler's run and the outcome it leads to; a cancelled task's run ends with its cancelled outcome,
        whatever the handler did (tierpool.runtime.task_control)."""
        key = (index, task.stream_id)
        try:
            with self.spans.run(key, task, wait):  # the run's span, current while the handler runs
                result = await run_limited(self._invoke, task, self.spec.tasks.timeout)
                # not JSON-able (a set, NaN) fails the task here; NaN would make the record invalid JSON
                result_json = "null" if result is None else json.dumps(result, allow_nan=False)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            cancelled, preempted = self.control.cancel_requested(key), self.preemptor.preempted(key)
            if not (cancelled or preempted) or current is None:
                raise  # handed back, or taken over by another worker: no outcome
            current.uncancel()
            return self.control.cancelled_run(index, task) if cancelled else self.preemptor.handed_back(index, task)
        except Gathering as parking:  # the run gives its slot up until its children have an outcome
            if self.control.cancel_requested(key):
                return self.control.cancelled_run(index, task)
            return self.gatherer.park(index, task, parking.children)
        except Exception as error:  # noqa: BLE001 - any handler error is a task failure, never a crash
            if self.control.cancel_requested(key):
                return self.control.cancelled_run(index, task)
            return self.outcomes.failure(index, task, error, started)
        if self.control.cancel_requested(key):
            return self.control.cancelled_run(index, task)
        return self.outcomes.success(index, task, started, wait, result_json)

    def _landed(self, key: Key, status: int | None) -> None:
        """The writer's report on one entry: its slot is let go of either way."""
        slot = self.ledger.release(key)
        self.control.landed(key, status)
        self.preemptor.landed(key)
        self.gatherer.landed(key, status, slot.task if slot else None)
        task_id = slot.task_id if slot else "?"
        if status == NOT_OWNER:
            self.series[key[0]].lost_ownership.inc()
            log.warning("outcome of task %s (entry %s) dropped: another worker owns the entry now", task_id, key[1])
        elif status == 0:
            log.info("outcome of task %s (entry %s) not written: the entry was finished already", task_id, key[1])

    async def _screen_exhausted(self, entries: list[Entry]) -> list[Entry]:
        """Entries past maxDeliveries: a cancelled one ends ``cancelled``, not dead-lettered."""
        return (await self.control.screen(self.admission.adopt(entries)))[0]

    # --- recovery (see tierpool.runtime.recovery) --------------------------------------------------------------------

    async def reclaim_once(self) -> int:
        return await self.recovery.reclaim_once()

    def _count_redis_error(self) -> None:
        self.metrics.redis_errors(self.pool).inc()
        # After an outage every pending entry looks idle, those of healthy workers too: reclaim waits until their
        # heartbeats (retried every HEARTBEAT_RETRY while Redis is away) have had time to refresh them.
        self._next_reclaim = max(self._next_reclaim, time.monotonic() + self._reclaim_holdoff)
