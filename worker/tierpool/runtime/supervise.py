"""Supervised background loops: each runs as a named unit that is restarted with backoff when it fails, and
reports progress, so that liveness (``/healthz``) can fail when a loop is dead or stalled."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger("tierpool.supervise")
FIRST_RESTART_DELAY = 0.1
MAX_RESTART_DELAY = 10.0
STABLE_AFTER = 30.0
"""A loop that ran this long before failing restarts from the first delay again."""
STOP_RECANCEL = 0.1
"""How often Supervisor.stop cancels again a loop that has not ended."""

LoopBody = Callable[[Callable[[], None]], Awaitable[None]]
"""A loop's body: it receives its ``beat`` and calls it after every pass that succeeded (never before a pass: a
loop that fails on every pass must look stalled); it returns only when the worker stops."""
Recover = Callable[[Exception], Awaitable[None]]


@dataclass
class LoopState:
    name: str
    stall_after: float
    last_beat: float
    failures: int = 0
    failing_since: float | None = None
    """When the current run of consecutive failures began (None after a successful pass)."""
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class Supervisor:
    """Runs the worker's background loops and answers whether they are all alive."""

    def __init__(self, recover: Recover | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.loops: dict[str, LoopState] = {}
        self._recover = recover
        self._clock = clock
        self._stop = asyncio.Event()
        self._closed = False

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @stopping.setter
    def stopping(self, value: bool) -> None:
        """Set when the worker stops: a loop waiting to restart wakes at once (SIGTERM is not delayed)."""
        if value:
            self._stop.set()
        else:
            self._stop.clear()

    def spawn(self, name: str, body: LoopBody, stall_after: float) -> asyncio.Task[None]:
        state = LoopState(name, stall_after, self._clock())
        state.task = asyncio.create_task(self._supervise(state, body), name=f"tierpool-{name}")
        self.loops[name] = state
        return state.task

    def beat(self, name: str) -> None:
        self._beat(self.loops[name])

    def _beat(self, state: LoopState) -> None:
        state.last_beat = self._clock()
        state.failing_since = None

    async def _supervise(self, state: LoopState, body: LoopBody) -> None:
        delay = FIRST_RESTART_DELAY

        def beat() -> None:
            self._beat(state)

        while True:
            started = self._clock()
            try:
                await body(beat)
                return  # loops return only when the worker stops
            except Exception as error:
                state.failures += 1
                if state.failing_since is None:
                    state.failing_since = self._clock()
                if self._clock() - started > STABLE_AFTER:
                    delay = FIRST_RESTART_DELAY
                log.exception("%s loop failed (failure %d); restarting in %.1fs", state.name, state.failures, delay)
                await self._try_recover(state.name, error)
            await self._restart_pause(delay)
            if self._closed:  # a cancellation can be lost in wait_for (Python 3.11): never restart after stop()
                return
            delay = min(delay * 2, MAX_RESTART_DELAY)

    async def _restart_pause(self, delay: float) -> None:
        """Wait before a restart; a stop request cuts the wait short (the loop must see it, and the drain may
        still need it), but a loop failing while the worker stops still restarts no faster than the first delay."""
        if self.stopping:
            await asyncio.sleep(min(delay, FIRST_RESTART_DELAY))
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), delay)

    async def _try_recover(self, name: str, error: Exception) -> None:
        if self._recover is None:
            return
        try:
            await self._recover(error)
        except Exception as again:  # noqa: BLE001 - the next restart tries again
            log.warning("could not recover the %s loop yet: %s", name, again)

    def problems(self) -> list[str]:
        """Why the worker is not live: loops that ended while it was not stopping, that have failed on every pass
        for longer than their stall bound, or that made no progress."""
        now = self._clock()
        found: list[str] = []
        for state in list(self.loops.values()):  # read from the health server's thread
            if state.task is not None and state.task.done() and not self.stopping:
                found.append(f"{state.name} loop is dead")
            elif state.failing_since is not None and now - state.failing_since > state.stall_after:
                found.append(f"{state.name} loop failing for {now - state.failing_since:.0f}s")
            elif now - state.last_beat > state.stall_after:
                found.append(f"{state.name} loop stalled for {now - state.last_beat:.0f}s")
        return found

    def live(self) -> bool:
        return not self.problems()

    async def stop(self) -> None:
        self.stopping = True
        self._closed = True
        tasks = [state.task for state in self.loops.values() if state.task is not None]
        # Python 3.11's wait_for swallows a cancellation that arrives as its inner wait completes (the writer's
        # kick, say), and the loop then goes on: cancel again until every loop has ended.
        while pending := [task for task in tasks if not task.done()]:
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=STOP_RECANCEL)
        await asyncio.gather(*tasks, return_exceptions=True)
