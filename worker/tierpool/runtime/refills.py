"""Refills go before outcome writes.

When equal tasks end together, the writer's batch of their outcomes (one script call, about 25 µs of server time a
task) and the reader's refill (TAKE, then the screen of what it took) race to the server, and the server runs them
in the order they arrive. A refill that queues behind a batch of 64 outcomes starts its tasks milliseconds late:
that wait was most of what a freed slot lost on an I/O-bound load (bench/refill.py). A finished task's outcome is
already off its slot, so the writer can wait for the refill instead: a slot that frees while the reader waits
for room makes the next batch wait until the reader's pass has started what it read, at most ``longest`` seconds.
Writes are never held back otherwise: an idle or blocking reader, or one busy with a pass already, lets them go.
"""

from __future__ import annotations

import asyncio
import contextlib

LONGEST_WAIT = 0.005
"""Seconds a batch of outcomes waits at most for a refill (a pass takes about a round trip or two)."""


class RefillFirst:
    """The reader's marks and the writer's wait (see the module). Used from the event loop only."""

    def __init__(self, longest: float = LONGEST_WAIT) -> None:
        self.longest = longest
        self._passed = asyncio.Event()
        self._passed.set()
        self.waiting_for_room = False
        """Set by the reader while every slot is busy and it waits for one to free."""
        self._closed = False

    async def wait_for_room(self, changed: asyncio.Event, longest: float) -> None:
        """The reader's wait while every slot is busy: until ``changed`` is set (a slot freed), at most ``longest``."""
        changed.clear()
        self.waiting_for_room = True
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(longest):
                    await changed.wait()
        finally:
            self.waiting_for_room = False

    def slot_freed(self) -> None:
        """A run ended: when the reader was waiting for room, a refill is due before the next write."""
        if self.waiting_for_room and not self._closed:
            self._passed.clear()

    def close(self) -> None:
        """The worker stops reading (its drain): no refill will come, so writes never wait for one again."""
        self._closed = True
        self._passed.set()

    def passed(self) -> None:
        """The reader's pass is over (or it blocks, or finds no room): writes may go."""
        self._passed.set()

    @property
    def due(self) -> bool:
        return not self._passed.is_set()

    async def turn(self) -> None:
        """The writer's wait before a batch: until a due refill has passed, at most ``longest`` seconds."""
        if self._passed.is_set():
            return
        try:
            async with asyncio.timeout(self.longest):
                await self._passed.wait()
        except TimeoutError:
            self._passed.set()  # a pass this slow (a reclaim, an outage) holds one batch, not every later one
