"""Graceful handover between peered replicas: a stopping replica finishes what it is doing, starts nothing new,
and only then lets kopf stop (which drops its peering record, so the standby takes over at once).

kopf alone drops the record while timers it could not stop in time ("did not exit in time. Leaving it orphaned")
and timers spawned by events still in its queues go on running until the process exits: measured, a stopping
replica ran scaling passes for 5 s after its standby had taken over. So SIGTERM and SIGINT come here first.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import wraps
from typing import Any, ParamSpec

import kopf

from tierpool_operator.gate import Gate
from tierpool_operator.memo import PoolMemo

P = ParamSpec("P")


def gated(handler: Callable[P, Awaitable[None]]) -> Callable[P, Awaitable[None]]:
    """Run a kopf handler through the context's Gate (none, as in tests: run it as it is)."""

    @wraps(handler)
    async def run(*args: P.args, **kwargs: P.kwargs) -> None:
        memo = kwargs.get("memo")
        gate = memo.context.gate if isinstance(memo, PoolMemo) else None
        if gate is None:
            await handler(*args, **kwargs)
            return
        async with gate.entry(handler.__name__):
            logger = kwargs.get("logger")
            if isinstance(logger, logging.LoggerAdapter):  # kopf's, naming the object
                logger.debug("%s admitted", handler.__name__)
            await handler(*args, **kwargs)

    return run


async def serve(memo: PoolMemo, drain_timeout: float, threads: int, **options: Any) -> None:
    """``kopf.operator`` with our own SIGTERM/SIGINT handling (``kopf.run`` minus the loop set-up), and ``threads``
    for the blocking Kubernetes calls (``asyncio.to_thread``; the default is CPUs + 4, 6 on two cores)."""
    gate, stop = Gate(), asyncio.Event()
    memo.context.gate = gate
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
