"""The gate every handler run passes: it counts the runs in flight (a scaling pass gives way to reconciles), and
once the replica is stopping it lets none start (``handover``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator

log = logging.getLogger("tierpool.operator")


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
