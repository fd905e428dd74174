"""Batches completion writes (ack + result, retry marks, dead-letters) into pipelined round trips.

Under load many tasks finish between two flushes, so one round trip carries many atomic scripts. Nothing is
held back on purpose: a lone completion is flushed at once. Writes are retried while Redis is unreachable; an
entry whose write never lands stays pending and is reclaimed, which keeps delivery at-least-once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from tierpool.connection import UNREACHABLE
from tierpool.streams import PoolStreams, ScriptCall

log = logging.getLogger("tierpool.writer")
MAX_BATCH = 256


class CompletionWriter:
    def __init__(self, streams: PoolStreams, on_redis_error: Any = None) -> None:
        self.streams = streams
        self._queue: deque[tuple[ScriptCall, asyncio.Future[Any]]] = deque()
        self._kick = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._on_redis_error = on_redis_error or (lambda: None)

    async def write(self, call: ScriptCall) -> Any:
        """Queue one script call and wait for its reply (an exception from the script is raised here)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((call, future))
        self._idle.clear()
        self._kick.set()
        return await future

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
                    replies = await self.streams.run_batch([call for call, _ in batch])
                except UNREACHABLE as error:
                    self._on_redis_error()
                    log.warning("completion write failed, retrying in %.2fs: %s", delay, error)
                    self._queue.extendleft(reversed(batch))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                delay = 0.05
                for (_, future), reply in zip(batch, replies, strict=True):
                    if future.done():
                        continue
                    if isinstance(reply, Exception):
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)
            self._idle.set()
