"""Time limits on handler runs.

An async handler past its limit is cancelled (``CancelledError`` is raised at its current ``await``). A sync
handler runs in a thread, which cannot be stopped from outside: the worker stops waiting for it, exactly as it
does when it hands tasks back at shutdown, and records the timeout; the thread runs on to its end, its result is
discarded, and until then it counts against the worker's ``concurrency`` (SlotLedger.detached_threads), so the
worker takes that much less work. Either way the run is a
failed attempt with the error ``timed out after <N>s``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tierpool.protocol.envelope import Task
from tierpool.protocol.errors import TaskTimedOut
from tierpool.protocol.policy import time_limit


def run_limited(invoke: Callable[[Task], Awaitable[Any]], task: Task, pool_timeout: float | None) -> Awaitable[Any]:
    """The handler's run for ``task``, stopped with :class:`TaskTimedOut` past its time limit (the task's own,
    else the pool's). Without a limit the run is returned as it is, at no extra cost."""
    seconds = time_limit(task.timeout_ms, pool_timeout)
    run = invoke(task)
    return run if seconds is None else _within(run, seconds)


async def _within(run: Awaitable[Any], seconds: float) -> Any:
    limit = asyncio.timeout(seconds)
    try:
        async with limit:
            return await run
    except TimeoutError:
        if limit.expired():
            raise TaskTimedOut(seconds) from None
        raise  # the handler's own TimeoutError: an ordinary failure
