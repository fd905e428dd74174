"""The due-time index at work: moving due tasks into their tier streams, rescheduling long retries
and deferrals, and drawing from the pool's rate limits before a task runs. Scripts: tierpool/scripts/due/."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from tierpool.model.keys import adopting
from tierpool.model.spec import PoolSpec
from tierpool.protocol import rate_limits as ratelimit
from tierpool.protocol.apps import limits_of
from tierpool.protocol.delays import DueRoute
from tierpool.protocol.envelope import Task
from tierpool.store.connection import UNREACHABLE
from tierpool.store.script_registry import ScriptCall
from tierpool.store.streams import PoolStreams

log = logging.getLogger("tierpool.due")
MOVE_BATCH = 500
"""Due tasks moved per script call (the mover calls again while a call moves a whole batch)."""
MOVE_EVERY = 0.2
"""Seconds between two moves by one worker's read loop (the lease holder's sweep moves too). Each move also
learns when the next task is due, and an idle worker's blocking read ends then, so an idle pool moves a task
within a few ms of its due time, and a busy one within this interval (measured by bench/due_latency.py)."""
ADMIT_RETRY_FIRST, ADMIT_RETRY_CAP = 0.05, 1.0
STRANDED_RETRY_MS = 10_000
"""How long a scheduled task naming a tier this worker's spec does not have waits in the stranded set before a
mover tries it again (a worker whose spec has the tier moves it then; see the MOVE_DUE script)."""


class DueMover:
    """Moves due tasks of one pool into their tier streams; any number of movers may race (see the MOVE_DUE script)."""

    def __init__(
        self, streams: PoolStreams, every: float = MOVE_EVERY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.streams, self.every, self.clock = streams, every, clock
        self.stranded_retry_ms = STRANDED_RETRY_MS
        self._next = 0.0
        self.next_due: float | None = None
        """Monotonic time the earliest scheduled task is due, as of the last move (None: nothing scheduled)."""
        self.moved_total = 0
        self.stranded_total = 0
        """Tasks this mover found due for a tier its spec does not have, and left in the stranded set."""

    def _call(self, limit: int) -> ScriptCall:
        return move_due_call(self.streams, limit, self.stranded_retry_ms)

    async def move(self, limit: int = MOVE_BATCH) -> int:
        """Move every task due now (on Redis' clock), a batch per call. Returns the count."""
        total = stranded = 0
        while True:
            taken, wait, lost = (int(part) for part in await self.streams.run(*self._call(limit)))
            total, stranded = total + taken - lost, stranded + lost
            if taken < limit:
                break
        if stranded:
            log.warning(
                "%d due task(s) name a tier this worker's spec does not have: kept, tried again later", stranded
            )
        self.moved_total += total
        self.stranded_total += stranded
        self.next_due = None if wait < 0 else self.clock() + wait / 1000
        return total

    async def maybe_move(self) -> int:
        """Move when ``every`` has passed since the last move by this mover, or a known task has come due."""
        now = self.clock()
        if now < self._next and (self.next_due is None or now < self.next_due):
            return 0
        self._next = now + self.every
        return await self.move()

    def wait_at_most(self, longest: float) -> float:
        """Seconds a blocking read may wait before the next known task is due (``longest`` when none is)."""
        return longest if self.next_due is None else min(max(self.next_due - self.clock(), 0.0), longest)


def move_due_call(streams: PoolStreams, limit: int, stranded_retry_ms: int = STRANDED_RETRY_MS) -> ScriptCall:
    """MOVE_DUE for this pool's tiers: each tier's stream, its tenant keys and its limit."""
    keys = streams.keys
    names = [keys.due, keys.throttled, keys.stranded, keys.dlq, keys.reentered, *streams.streams]
    args: list[Any] = [limit, stranded_retry_ms]
    for index, tier in enumerate(streams.tiers):
        names += [keys.tenants(tier), keys.admitted(tier), keys.queued(tier), keys.held(tier), keys.held_seq(tier)]
        limit_of = streams.tenant_limits[index] if index < len(streams.tenant_limits) else None
        args += [tier, -1 if limit_of is None else limit_of]
    return "MOVE_DUE", [*names, keys.where], args


def reschedule_call(
    streams: PoolStreams,
    index: int,
    consumer: str,
    task: Task,
    error: str,
    route: DueRoute,
    max_deferrals: int,
    memory_ms: int,
) -> ScriptCall:
    """Ack the failed entry and schedule its task in the due set after ``route.delay_ms``, in one owner-checked
    script (see the RESCHEDULE script)."""
    keys = [streams.streams[index], streams.keys.due, streams.keys.errors, streams.keys.deferrals(task.id)]
    keys.append(streams.keys.where)
    args: list[Any] = [streams.keys.group, consumer, task.stream_id, task.id, error, route.mode, route.delay_ms]
    tier = streams.tiers[index]
    args += [route.fallback_ms, max_deferrals, memory_ms, tier, adopting(streams.keys, tier)]
    return "RESCHEDULE", keys, args


class Throttle:
    """Draws each rate-limited task from its pool-wide bucket before it runs (see the THROTTLE script)."""

    def __init__(
        self, streams: PoolStreams, spec: PoolSpec, handler: object, consumer: str, stopping: asyncio.Event
    ) -> None:
        self.streams, self.consumer, self.stopping = streams, consumer, stopping
        self.buckets = ratelimit.buckets(spec)
        self.default = ratelimit.handler_limit(handler)
        if self.default is not None and self.default not in self.buckets:
            log.error(
                "handler draws from rate limit %r, which spec.rateLimits does not define: not limited", self.default
            )
            self.default = None
        for task, name in limits_of(handler).items():
            if name not in self.buckets:
                log.error(
                    "task %r draws from rate limit %r, which spec.rateLimits does not define: not limited", task, name
                )
        self.throttled_total = 0

    def limits(self, task: Task) -> bool:
        """Whether the task draws from one of the pool's rate limits."""
        return ratelimit.limit_for(task.rate_limit, self.default) in self.buckets

    def applies(self, task: Task) -> bool:
        """Whether the task goes through THROTTLE before this run: every task of a limit the pool defines, a paid
        one too (THROTTLE runs it on its reservation only when it recorded that reservation)."""
        return self.limits(task)

    def _call(self, index: int, task: Task, bucket: ratelimit.Bucket) -> ScriptCall:
        late_ms = ratelimit.late_tolerance_ms(bucket, task.cost)
        claimed = ratelimit.claimed_reservation(
            bucket.name, task.paid_ms, task.entry_deliveries, time.time() * 1000, late_ms
        )
        keys = [self.streams.streams[index], self.streams.keys.throttled, self.streams.keys.rate_bucket(bucket.name)]
        keys += [self.streams.keys.admitted(self.streams.tiers[index]), self.streams.keys.reservation(task.id)]
        args: Sequence[Any] = [
            self.streams.keys.group,
            self.consumer,
            task.stream_id,
            self.streams.tiers[index],
            f"{bucket.per_ms:.6f}",
            f"{bucket.burst:.6f}",
            f"{bucket.per_token_ms:.6f}",
            f"{bucket.token_burst:.6f}",
            task.cost,
            task.tenant or "",
            task.id,
            "" if claimed is None else claimed,
            math.ceil(late_ms),
            adopting(self.streams.keys, self.streams.tiers[index]),
        ]
        return "THROTTLE", [*keys, self.streams.keys.where], args

    async def admit(self, index: int, task: Task) -> bool:
        """True: run it now (its bucket let it, or it ran on its recorded reservation). False: it waits in the
        throttled set (or is no longer this worker's); a tenant's task keeps its tenant slot there (THROTTLE moves
        it). Retries while Redis is unreachable; False when the worker stops meanwhile (the entry stays pending
        and is reclaimed)."""
        name = ratelimit.limit_for(task.rate_limit, self.default)
        bucket = self.buckets.get(name or "")
        if bucket is None:
            log.warning("task %s names rate limit %r, which this pool does not define: not limited", task.id, name)
            return True
        delay = ADMIT_RETRY_FIRST
        while True:
            try:
                reply = int(await self.streams.run(*self._call(index, task, bucket)))
                break
            except UNREACHABLE as error:
                if self.stopping.is_set():
                    return False
                log.warning("rate limit check failed, retrying in %.2fs: %s", delay, error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, ADMIT_RETRY_CAP)
        if reply == 0:
            return True
        if reply > 0:
            self.throttled_total += 1
            log.debug("task %s throttled by %s for %d ms", task.id, bucket.name, reply)
        return False
