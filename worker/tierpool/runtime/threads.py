"""Sync (plain ``def``) handlers run in a thread pool. A thread cannot be stopped from outside: its slot in the
ledger knows while it runs (see SlotLedger.zombies), a thread that outlives its run (timed out, cancelled) keeps
counting against the worker's free slots until it returns (SlotLedger.detached_threads), and ``running`` counts
the calls still in user code. A call runs in a copy of the run's context (its log fields, its span: see
tierpool.runtime.logs and tierpool.runtime.spans), as an async handler's run does in its asyncio task."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tierpool.protocol.envelope import Task
from tierpool.runtime.handler_loading import Handler
from tierpool.runtime.ledger import SlotLedger


class SyncRunner:
    def __init__(self, handler: Handler, ledger: SlotLedger, concurrency: int, tiers: int) -> None:
        self.handler, self.ledger, self.tiers = handler, ledger, tiers
        self._threads = ThreadPoolExecutor(concurrency, thread_name_prefix="tierpool-handler")
        self.running = 0
        """Sync handler calls still running in threads."""
        self._lock = threading.Lock()

    def __call__(self, task: Task) -> asyncio.Future[Any]:
        """Run the handler in a thread; its slot knows, until the thread returns (see SlotLedger.zombies)."""
        loop = asyncio.get_running_loop()
        keys = [(index, task.stream_id) for index in range(self.tiers)]
        key = next((k for k in keys if k in self.ledger.slots and self.ledger.slots[k].task is task), None)
        call = self._threads.submit(contextvars.copy_context().run, self._call, task)
        if key is not None and self.ledger.thread_started(key, task):
            call.add_done_callback(lambda _: _call_soon(loop, functools.partial(self.ledger.thread_ended, key, task)))
        return asyncio.wrap_future(call, loop=loop)

    def _call(self, task: Task) -> Any:
        with self._lock:
            self.running += 1
        try:
            return self.handler(task)
        finally:
            with self._lock:
                self.running -= 1

    def shutdown(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending anyway
        loop.call_soon_threadsafe(callback)
