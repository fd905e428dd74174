"""Batches completion writes (acks with results, retry marks, dead letters) into pipelined round trips.

Under load many tasks finish between two flushes: their acks and result records go out as one script call per
tier, next to any other queued scripts, in one round trip. Nothing is held back on purpose: a lone completion
is flushed at once. Writes are retried while Redis is unreachable; an entry whose write never lands stays
pending and is reclaimed, which keeps delivery at-least-once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from tierpool.connection import UNREACHABLE
from tierpool.streams import Completion, PoolStreams, ScriptCall

log = logging.getLogger("tierpool.writer")
MAX_BATCH = 512

Item = Completion | ScriptCall


class CompletionWriter:
    def __init__(self, streams: PoolStreams, ttl_ms: int, on_redis_error: Callable[[], None] | None = None) -> None:
        self.streams, self.ttl_ms = streams, ttl_ms
        self._queue: deque[Item] = deque()
        self._kick = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._on_redis_error = on_redis_error or (lambda: None)

    def submit(self, item: Item) -> None:
        """Queue a completion or a script call. Failed writes are logged here; their entries stay pending."""
        self._queue.append(item)
        self._idle.clear()
        self._kick.set()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued write has landed; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def run(self) -> None:
        delay = 0.05
        while True:
            await self._kick.wait()
            self._kick.clear()
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_BATCH))]
                try:
                    await self._flush(batch)
                    delay = 0.05
                except UNREACHABLE as error:
                    self._on_redis_error()
                    log.warning("completion write failed, retrying in %.2fs: %s", delay, error)
                    self._queue.extendleft(reversed(batch))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                except Exception:  # never let one bad batch stop every later write
                    log.exception("completion write failed; those entries stay pending and will be reclaimed")
            self._idle.set()

    async def _flush(self, batch: list[Item]) -> None:
        by_tier: dict[tuple[int, bool], list[Completion]] = {}
        singles: list[ScriptCall] = []
        for item in batch:
            if isinstance(item, Completion):
                by_tier.setdefault((item.tier_index, item.retried), []).append(item)
            else:
                singles.append(item)
        calls = [
            self.streams.complete_many_call(tier, self.ttl_ms, group, forget_errors=retried)
            for (tier, retried), group in by_tier.items()
        ]
        replies = await self.streams.run_batch(calls + singles)
        for group, reply in zip(by_tier.values(), replies, strict=False):
            if isinstance(reply, Exception):
                ids = ", ".join(item.task_id for item in group[:5]) + (", ..." if len(group) > 5 else "")
                log.error(
                    "could not record the outcome of %d task(s) (%s); they stay pending: %s", len(group), ids, reply
                )
        for (name, keys, _), reply in zip(singles, replies[len(calls) :], strict=True):
            if isinstance(reply, Exception):
                log.error("%s on %s failed; the entry stays pending: %s", name, keys[0], reply)
