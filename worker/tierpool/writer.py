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
from typing import Any

from tierpool.connection import UNREACHABLE
from tierpool.streams import Completion, PoolStreams, ScriptCall

log = logging.getLogger("tierpool.writer")
MAX_BATCH = 512

Item = Completion | ScriptCall


class CompletionWriter:
    def __init__(self, streams: PoolStreams, ttl_ms: int, on_redis_error: Callable[[], None] | None = None) -> None:
        self.streams, self.ttl_ms = streams, ttl_ms
        self._queue: deque[tuple[Item, asyncio.Future[Any]]] = deque()
        self._kick = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._on_redis_error = on_redis_error or (lambda: None)

    def submit(self, item: Item) -> asyncio.Future[Any]:
        """Queue a completion or a script call; the future resolves with its reply (or its error)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        self._idle.clear()
        self._kick.set()
        return future

    async def write(self, item: Item) -> Any:
        return await self.submit(item)

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
                except Exception as error:  # never let one bad batch stop every later write
                    log.exception("completion write failed; those entries stay pending and will be reclaimed")
                    for _, future in batch:
                        _resolve(future, error)
            self._idle.set()

    async def _flush(self, batch: list[tuple[Item, asyncio.Future[Any]]]) -> None:
        by_tier: dict[int, list[tuple[Completion, asyncio.Future[Any]]]] = {}
        singles: list[tuple[ScriptCall, asyncio.Future[Any]]] = []
        for item, future in batch:
            if isinstance(item, Completion):
                by_tier.setdefault(item.tier_index, []).append((item, future))
            else:
                singles.append((item, future))
        calls = [
            self.streams.complete_many_call(tier, self.ttl_ms, [c for c, _ in group]) for tier, group in by_tier.items()
        ]
        replies = await self.streams.run_batch(calls + [call for call, _ in singles])
        for group, reply in zip(by_tier.values(), replies, strict=False):
            for index, (_, future) in enumerate(group):
                _resolve(future, reply if isinstance(reply, Exception) else reply[index])
        for (_, future), reply in zip(singles, replies[len(calls) :], strict=True):
            _resolve(future, reply)


def _resolve(future: asyncio.Future[Any], reply: Any) -> None:
    if future.done():
        return
    if isinstance(reply, Exception):
        future.set_exception(reply)
    else:
        future.set_result(reply)
