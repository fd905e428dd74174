"""Batches outcome writes (acks with results, retry marks, dead letters) into pipelined round trips.

Under load many tasks finish between two flushes: their acks and result records go out as one script call per
tier, next to any other queued scripts, in one round trip. Nothing is held back on purpose: a lone completion
is flushed at once. Every script writes only if this worker's consumer still owns the entry. While Redis is
unreachable writes are retried from a short delay with a short cap (a finished task waiting here is still
heartbeated, but the sooner its outcome lands the better), and the delay resets as soon as a write lands. Each
entry's fate is reported through ``on_landed`` so that the slot ledger can let go of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from tierpool.runtime.ledger import Key
from tierpool.store.connection import UNREACHABLE
from tierpool.store.replication import WaitGate
from tierpool.store.streams import Completion, Outcome, PoolStreams

log = logging.getLogger("tierpool.writer")
MAX_BATCH = 512
FIRST_DELAY = 0.05
MAX_DELAY = 1.0
"""Longest wait between two attempts while Redis is unreachable."""
MAX_ATTEMPTS = 10
"""Script errors (not connection errors: OOM, NOGROUP) tolerated per outcome before it is given up."""
IDLE_TICK = 5.0

Item = Completion | Outcome
Landed = Callable[[Key, int | None], None]
"""Called once per entry: the script's reply (1 written, 0 no longer pending, -1 another consumer owns it), or
None when the write was given up after repeated script errors."""


class CompletionWriter:
    def __init__(
        self,
        streams: PoolStreams,
        consumer: str,
        ttl_ms: int,
        on_landed: Landed,
        on_redis_error: Callable[[], None] = lambda: None,
        wait: WaitGate | None = None,
    ) -> None:
        self.streams, self.consumer, self.ttl_ms = streams, consumer, ttl_ms
        self.wait = wait
        """spec.redis.waitReplicas: every batch ends with a WAIT before its entries are reported landed."""
        self._queue: deque[Item] = deque()
        self._kick = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._on_landed = on_landed
        self._on_redis_error = on_redis_error
        self._retry_soon = False
        self.beat: Callable[[], None] = lambda: None
        """Called after every pass that did not fail, for the liveness check."""
        self.before_batch: Callable[[], Awaitable[None]] = _go
        """Awaited before each batch is taken from the queue (tierpool.runtime.refills: a due refill goes first)."""

    def submit(self, item: Item) -> None:
        """Queue an outcome. Failed writes are logged here; their entries stay pending."""
        self._queue.append(item)
        self._idle.clear()
        self._kick.set()

    def __len__(self) -> int:
        return len(self._queue)

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued write has landed; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def run(self) -> None:
        delay = FIRST_DELAY
        while True:
            if not self._queue:
                self._idle.set()
                self.beat()
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation that arrives as the
                # kick is set, and the writer loop would then never stop (Supervisor.stop waits for it)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(IDLE_TICK):
                        await self._kick.wait()
                self._kick.clear()
                continue
            if await self._write_batch(delay):
                delay = FIRST_DELAY
                self.beat()  # only after a pass that did not fail (see tierpool.runtime.supervise)
            else:
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)

    async def _write_batch(self, delay: float) -> bool:
        """Write one batch; True when nothing needs a pause. Whatever fails, every item of the batch is either
        reported (landed or given up) or queued again: none is dropped with its slot still held."""
        await self.before_batch()
        batch = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_BATCH))]
        try:
            self._retry_soon = False
            await self._flush(batch)
            return not self._retry_soon  # a script error (OOM, say): give the server a moment
        except UNREACHABLE as error:
            self._on_redis_error()
            log.warning("outcome write failed, retrying in %.2fs: %s", delay, error)
        except Exception:
            log.exception("outcome write failed unexpectedly, retrying in %.2fs", delay)
        self._queue.extendleft(reversed(batch))
        return False

    async def _flush(self, batch: list[Item]) -> None:
        by_tier: dict[tuple[int, bool], list[Completion]] = {}
        singles: list[Outcome] = []
        for item in batch:
            if isinstance(item, Completion):
                by_tier.setdefault((item.tier_index, item.retried), []).append(item)
            else:
                singles.append(item)
        calls = [
            self.streams.complete_many_call(tier, self.consumer, self.ttl_ms, group, forget_errors=retried)
            for (tier, retried), group in by_tier.items()
        ]
        releases = self.streams.tenant_release_calls([(item.tier_index, item.entry_id) for item in batch])
        replies = await self.streams.run_batch(calls + [single.call for single in singles] + releases, self.wait)
        for group, reply in zip(by_tier.values(), replies, strict=False):
            if isinstance(reply, Exception):
                self._failed(list(group), reply)
            else:
                for item, status in zip(group, reply, strict=True):
                    self._on_landed((item.tier_index, item.entry_id), int(status))
        for single, reply in zip(singles, replies[len(calls) : len(calls) + len(singles)], strict=True):
            if isinstance(reply, Exception):
                self._failed([single], reply)
            else:
                self._on_landed((single.tier_index, single.entry_id), int(reply))

        for reply in replies[len(calls) + len(singles) :]:
            if isinstance(reply, Exception):  # the lease holder's repair releases what this missed
                log.warning("tenant release failed: %s", reply)

    def _failed(self, items: list[Item], error: Exception) -> None:
        """A script error: retry a few times, then give the outcomes up. One that only says Redis is away for now
        (in cluster mode: a slot mid-migration, redirections exhausted) is retried without counting an attempt, as
        a dropped connection is: giving up would leave the entry pending, to run again after claimIdle."""
        given_up: list[Item] = []
        for item in items:
            item.attempts += 0 if isinstance(error, UNREACHABLE) else 1
            if item.attempts < MAX_ATTEMPTS:
                self._queue.append(item)
                self._retry_soon = True
            else:
                given_up.append(item)
        if given_up:
            ids = ", ".join(item.entry_id for item in given_up[:5]) + (", ..." if len(given_up) > 5 else "")
            log.error("could not record %d outcome(s) (%s); the entries stay pending: %s", len(given_up), ids, error)
        for item in given_up:
            self._on_landed((item.tier_index, item.entry_id), None)


async def _go() -> None:
    return None
