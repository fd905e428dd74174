"""Graceful handover between peered replicas: a stopping replica finishes what it is doing, starts nothing new,
and only then lets kopf stop (which drops its peering record, so the standby takes over at once).

kopf alone drops the record while timers it could not stop in time ("did not exit in time. Leaving it orphaned")
and timers spawned by events still in its queues go on running until the process exits: measured, a stopping
replica ran scaling passes for 5 s after its standby had taken over. So SIGTERM and SIGINT come here first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import wraps
from typing import Any, ParamSpec

import kopf

log = logging.getLogger("tierpool.operator")
P = ParamSpec("P")


class Gate:
    """Counts the handler runs in flight; once stopping, lets none start (they wait until the process exits)."""

    def __init__(self) -> None:
        self.stopping = False
        self.running = 0
        self.by_handler: Counter[str] = Counter()
        self._idle = asyncio.Event()
        self._idle.set()

    def count(self, handler: str) -> int:
        """Runs of this handler in flight (admitted, not finished)."""
        return self.by_handler[handler]

    @contextlib.asynccontextmanager
    async def entry(self, handler: str = "") -> AsyncIterator[None]:
        if self.stopping:
            await asyncio.Event().wait()  # never set: kopf cancels this when it exits; nothing is written
        self.running += 1
        self.by_handler[handler] += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.running -= 1
            self.by_handler[handler] -= 1
            if self.running == 0:
                self._idle.set()

    async def hand_over(self, stop: asyncio.Event, timeout: float) -> None:
        """Stop admitting runs, wait (at most ``timeout``) for those in flight, then stop kopf."""
        if self.stopping:
            return
        self.stopping = True
        log.info("stopping: %d handler run(s) in flight; no new ones start", self.running)
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            log.warning("stopping with %d handler run(s) still in flight after %.0fs", self.running, timeout)
        stop.set()


def defer_pass(reconciling: int, since_last_pass: float, max_defer: float) -> bool:
    """Pure: whether a scaling pass gives way to reconciles in flight. During a burst of pool changes (1,000 pools
    applied at once) every pool already created would otherwise scale, and write status, every interval, and those
    passes took the API calls the burst's reconciles needed: the last pools waited minutes for their Deployment.
    A pass is deferred at most ``max_defer`` seconds after the last one, so scaling never stops for long."""
    return reconciling > 0 and since_last_pass < max_defer


def gated(handler: Callable[P, Awaitable[None]]) -> Callable[P, Awaitable[None]]:
    """Run a kopf handler through the memo's Gate (none in the memo, as in tests: run it as it is)."""

    @wraps(handler)
    async def run(*args: P.args, **kwargs: P.kwargs) -> None:
        memo = kwargs.get("memo")
        gate = memo.get("gate") if isinstance(memo, kopf.Memo) else None
        if not isinstance(gate, Gate):
            await handler(*args, **kwargs)
            return
        async with gate.entry(handler.__name__):
            logger = kwargs.get("logger")
            if isinstance(logger, logging.LoggerAdapter):  # kopf's, naming the object
                logger.debug("%s admitted", handler.__name__)
            await handler(*args, **kwargs)

    return run


async def serve(memo: kopf.Memo, drain_timeout: float, threads: int, **options: Any) -> None:
    """``kopf.operator`` with our own SIGTERM/SIGINT handling (``kopf.run`` minus the loop set-up), and ``threads``
    for the blocking Kubernetes calls (``asyncio.to_thread``; the default is CPUs + 4, 6 on two cores)."""
    gate, stop = Gate(), asyncio.Event()
    memo["gate"] = gate
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(threads, thread_name_prefix="kube"))
    existing = asyncio.all_tasks()
    tasks = await kopf.spawn_tasks(memo=memo, stop_flag=stop, **options)
    loop = asyncio.get_running_loop()
    handing_over: set[asyncio.Task[None]] = set()

    def on_signal() -> None:
        task = loop.create_task(gate.hand_over(stop, drain_timeout))
        handing_over.add(task)  # a reference, so the task is not collected mid-way
        task.add_done_callback(handing_over.discard)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)  # replaces kopf's: it would stop at once
    await kopf.run_tasks(tasks, ignored=existing)
