"""The worker's reader, apart from tierpool.runtime.worker for its size: one pass claims others' idle entries when
that is due, then reads by weight into the free slots the read window allows, blocking while every tier it may read
is empty, and hands what it took to the worker's launch. A mixin of :class:`tierpool.runtime.worker.Worker`, which
builds every collaborator it names."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from redis.exceptions import ResponseError

from tierpool.model.durations import ms
from tierpool.protocol import slots
from tierpool.protocol.dispatch import Planner, TakePlan
from tierpool.runtime.eviction_watch import EvictionWatch
from tierpool.runtime.late_reads import LateReads
from tierpool.runtime.ledger import SlotLedger
from tierpool.runtime.preempting import Preemptor, Runnable
from tierpool.runtime.reads import Reads
from tierpool.runtime.recovery import Recovery
from tierpool.runtime.refills import RefillFirst
from tierpool.runtime.settings import WorkerSettings
from tierpool.store.connection import UNREACHABLE
from tierpool.store.due import DueMover, Throttle
from tierpool.store.streams import Entry, PoolStreams, is_nogroup

log = logging.getLogger("tierpool.worker")
FULL_WAIT = 1.0
"""With every slot busy the read loop re-checks (and reports progress) at least this often."""


class ReadLoop:
    """The reader's passes. Every attribute below is the worker's (set in ``Worker.__init__``)."""

    settings: WorkerSettings
    consumer: str
    streams: PoolStreams
    ledger: SlotLedger
    planner: Planner
    refill: RefillFirst
    eviction: EvictionWatch
    recovery: Recovery
    due: DueMover
    reads: Reads
    late_reads: LateReads
    preemptor: Preemptor
    throttle: Throttle
    _stopping: asyncio.Event
    _held_back: tuple[int, ...]
    _next_reclaim: float
    _reclaim_every: float
    _prepare: Callable[[], Awaitable[None]]
    _count_redis_error: Callable[[], None]
    _launch: Callable[[list[Entry], float], Awaitable[None]]
    _runnable: Callable[[list[Entry], float], Awaitable[list[Runnable]]]
    _start_runs: Callable[[Sequence[Runnable]], None]

    async def _read_loop(self, beat: Callable[[], None]) -> None:
        delay = 0.1
        while not self._stopping.is_set():
            try:
                await self._read_once()
                delay = 0.1
            except UNREACHABLE as error:
                self._count_redis_error()
                log.warning("redis unreachable while reading, retrying in %.1fs: %s", delay, error)
                await self._pause(delay)
                delay = min(delay * 2, 1.0)
            except ResponseError as error:
                if not is_nogroup(error):
                    raise
                log.warning("consumer group missing (redis restarted without data?); recreating it")
                await self._prepare()
            beat()  # after a pass that did not fail (see tierpool.runtime.supervise)

    async def _read_once(self) -> None:
        """One pass: claim others' idle entries when that is due, then read by weight into the free slots the read
        window allows (tierpool.protocol.slots). Claims and reads take turns here, so they share one free-slot count.
        None of it while the server's eviction policy is refused (tierpool.runtime.eviction_watch)."""
        if not self.eviction.safe:
            self.refill.passed()
            await self.eviction.resumed(FULL_WAIT)
            return
        if self.ledger.free() > 0 and time.monotonic() >= self._next_reclaim:
            self._next_reclaim = time.monotonic() + self._reclaim_every
            await self.recovery.reclaim_once()
        paced = slots.pace(self.ledger.last_run, self.settings.concurrency)
        since_start = time.monotonic() - self.ledger.last_start
        spacing = slots.stagger(self.ledger.last_run, self.settings.concurrency, since_start) if paced else 0.0
        if spacing > 0 and self.ledger.free() > 0:  # spaced starts (tierpool.protocol.slots)
            self.refill.passed()
            await self._pause(spacing)
            return
        window = slots.read_window(self.ledger.free(), self._held_back, paced)
        plan = self.planner.plan(window.size, self.ledger.running, window.open) if window.size > 0 else None
        if plan is None or plan.total == 0:  # every slot busy, or every tier at its concurrency cap
            self.refill.passed()
            await self.due.maybe_move()
            if self.preemptor.rules.any and await self._preempt():
                return
            await self.refill.wait_for_room(self.ledger.changed, FULL_WAIT)
            return
        try:
            await self._fill(plan)
        finally:
            self.refill.passed()
        await self.due.maybe_move()  # due-time index (delayed, retried, throttled tasks): after the refill

    async def _fill(self, plan: TakePlan) -> None:
        """Read what the plan allows, or block for it when every tier it reads is empty, and start it."""
        reserved = self.ledger.reserve(plan.total)
        self.ledger.changed.clear()  # a slot freed from here on cuts short a block that leaves tiers out
        try:
            sent_at = self.late_reads.now()
            entries = await self.reads.guard(self.streams.take(plan, self.consumer))
            if not entries:  # block on the tiers the plan may read (cut short as a slot frees, if it left some out)
                await self.due.maybe_move()  # it learns when the next task is due, which bounds the block
                until_due = ms(self.due.wait_at_most(self.settings.block_ms / 1000))
                until_reclaim = ms(self._next_reclaim - time.monotonic())
                block = slots.block_ms(min(self.settings.block_ms, until_due), until_reclaim)
                sent_at = self.late_reads.now()
                self.refill.passed()
                entries = await self.reads.wait_for_work(plan, block, self.ledger.changed)
            if entries:  # a cancellation meanwhile hands them back (tierpool.runtime.reads)
                await self.reads.launch(entries, lambda taken: self._launch(taken, sent_at), self.ledger.holds)
        finally:
            self.ledger.unreserve(reserved)

    async def _preempt(self) -> bool:
        """Every slot held: wait on the tiers a preemption could serve (tierpool.runtime.preempting)."""
        sent_at = self.late_reads.now()
        runnable = lambda taken: self._runnable(taken, sent_at)  # noqa: E731 - the read's time, bound now
        preempt = self.preemptor.wait_and_preempt
        return await preempt(ms(FULL_WAIT), self._stopping.is_set, runnable, self._start_runs, self.throttle.applies)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
