"""Watching the server's eviction policy, before serving and while serving (tierpool.protocol.eviction decides).

A server switched to ``allkeys-*`` while workers serve would delete tier streams and scheduled tasks under memory
pressure. While the policy is refused the worker takes no new work (runs already going finish and are acked), and
readiness says not ready; it resumes when the policy is safe again. Liveness stays up throughout: restarting the
worker would not change the server's policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from tierpool.protocol.eviction import EvictionAction, EvictionVerdict, eviction_change, eviction_verdict
from tierpool.store.connection import UNREACHABLE

log = logging.getLogger("tierpool.eviction")
ReadPolicy = Callable[[], Awaitable[str | None]]
"""Reads the server's ``maxmemory-policy`` (None: it cannot be read)."""
Sleep = Callable[[float], Awaitable[None]]


class EvictionWatch:
    """The last reading of the policy, and whether the worker may take new work under it."""

    def __init__(
        self, read_policy: ReadPolicy, allow_eviction: bool, recheck: float, stop: asyncio.Event, sleep: Sleep
    ) -> None:
        """``sleep`` waits between readings; ``stop`` set ends the waits and the watch."""
        self._read_policy, self.allow_eviction, self.recheck = read_policy, allow_eviction, recheck
        self._stop, self._sleep = stop, sleep
        self.verdict: EvictionVerdict | None = None
        """The last reading's verdict; None before the first."""
        self.safe = True
        """False while the policy is refused: no new work is taken (read from the health server's thread too)."""
        self.paused = asyncio.Event()
        """Set while the policy is refused (the reads' pause: tierpool.runtime.reads)."""
        self._resumed = asyncio.Event()
        self._resumed.set()

    async def check(self) -> bool:
        """Read the policy once and act on any change; returns whether new work may be taken."""
        verdict = eviction_verdict(await self._read_policy(), self.allow_eviction)
        change = eviction_change(self.verdict, verdict, self.recheck)
        self.verdict = verdict
        if change.level is not None:
            log.log(change.level, "%s", change.line)
        if change.action is EvictionAction.PAUSE:
            self.safe = False
            self._resumed.clear()
            self.paused.set()
        elif change.action is EvictionAction.RESUME:
            self.safe = True
            self.paused.clear()
            self._resumed.set()
        return self.safe

    async def until_safe(self) -> bool:
        """Before serving: read the policy until it is safe (True), or until a stop (False)."""
        while not await self.check():
            await self._sleep(self.recheck)
            if self._stop.is_set():
                return False
        return True

    async def run(self, beat: Callable[[], None]) -> None:
        """While serving: read the policy again every ``recheck`` seconds, until the stop. Redis being away is
        the reader's concern: the last reading stands until the next one."""
        while not self._stop.is_set():
            await self._sleep(self.recheck)
            if self._stop.is_set():
                return
            with contextlib.suppress(*UNREACHABLE):
                await self.check()
            beat()

    async def resumed(self, at_most: float) -> None:
        """Wait until new work may be taken again, a stop, or ``at_most`` seconds, whichever comes first."""
        waits = [asyncio.ensure_future(event.wait()) for event in (self._resumed, self._stop)]
        try:
            await asyncio.wait(waits, timeout=at_most, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
