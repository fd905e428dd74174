"""The loop supervisor: a stop request cuts a restart's backoff short; consecutive failures fail liveness."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tierpool.runtime import supervise
from tierpool.runtime.supervise import Supervisor


async def test_a_stop_request_wakes_a_loop_waiting_to_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervise, "FIRST_RESTART_DELAY", 600.0)  # far longer than this test may take
    supervisor = Supervisor()
    failed = asyncio.Event()

    async def body(beat: Callable[[], None]) -> None:
        if supervisor.stopping:
            return
        failed.set()
        raise RuntimeError("boom")

    task = supervisor.spawn("reader", body, stall_after=60)
    await asyncio.wait_for(failed.wait(), 30)
    supervisor.stopping = True
    await asyncio.wait_for(task, 30)  # not after the 600 s backoff
    assert supervisor.loops["reader"].failures == 1


async def test_a_loop_that_keeps_failing_is_reported_once_past_its_stall_bound() -> None:
    now = [100.0]
    supervisor = Supervisor(clock=lambda: now[0])
    gate = asyncio.Event()

    async def body(beat: Callable[[], None]) -> None:
        await gate.wait()
        raise RuntimeError("OOM")

    supervisor.spawn("heartbeat", body, stall_after=5)
    gate.set()
    state = supervisor.loops["heartbeat"]
    for _ in range(200):
        if state.failures:
            break
        await asyncio.sleep(0.01)
    assert state.failing_since == 100.0 and supervisor.live()
    supervisor.beat("heartbeat")  # a beat is a pass that worked: the failing streak is over
    assert state.failing_since is None
    state.failing_since = 100.0
    now[0] = 105.5
    state.last_beat = 105.0  # progress recently, yet failing for longer than the bound
    assert supervisor.problems() == ["heartbeat loop failing for 6s"]
    await supervisor.stop()


async def test_stop_ends_a_loop_that_swallowed_its_first_cancellation() -> None:
    """What Python 3.11's wait_for does when the cancellation meets its inner wait completing: the loop goes on."""
    supervisor = Supervisor()
    swallowed = 0

    async def body(beat: Callable[[], None]) -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(600)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed += 1
                asyncio.current_task().uncancel()  # type: ignore[union-attr]

    supervisor.spawn("writer", body, stall_after=60)
    await asyncio.sleep(0)
    await asyncio.wait_for(supervisor.stop(), 5)
    assert swallowed == 1
