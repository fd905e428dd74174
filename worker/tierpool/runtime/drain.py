"""The graceful drain after a stop request: wait for the runs within the grace period, then stop what is left
and hand it back, and wait (bounded) for the queued outcomes.

A run that really stopped (its task is done and no thread runs its handler) is handed back at once: a retry mark
whose idle time is claimIdle, so that another worker can claim it immediately. A run that did not stop (an async
handler that swallows ``CancelledError``, or a sync handler whose thread goes on) is *stuck*: its entry gets the
same mark but with its idle time reset, so nobody claims it before claimIdle, and the process must exit at once
(``Worker.stuck``) so that its user code stops with it. Every wait here is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from tierpool.model.durations import ms
from tierpool.model.spec import RecoverySpec
from tierpool.runtime.ledger import Key, SlotLedger
from tierpool.runtime.writer import CompletionWriter
from tierpool.store.connection import UNREACHABLE
from tierpool.store.streams import PoolStreams

log = logging.getLogger("tierpool.worker")
CANCEL_WAIT_SECONDS = 2.0
"""After the grace period, how long cancelled runs get to end."""
HAND_BACK_SECONDS = 2.0
"""How long the hand-back write may take."""
DRAIN_WRITE_SECONDS = 2.0
"""After the grace period, how long the drain still waits for queued outcomes to land."""
EXIT_SECONDS = 1.0
"""What the process needs after that to release its lease and exit."""
AFTER_GRACE_SECONDS = CANCEL_WAIT_SECONDS + HAND_BACK_SECONDS + DRAIN_WRITE_SECONDS + EXIT_SECONDS
"""The longest the drain takes past its grace period: what the pod's termination grace must leave for it."""
INTERRUPTED = "interrupted: the worker shut down before the task finished"


@dataclass
class Drain:
    streams: PoolStreams
    ledger: SlotLedger
    writer: CompletionWriter
    consumer: str
    recovery: RecoverySpec

    async def run(self, grace: float) -> list[Key]:
        """Drain; returns the entries whose runs could not be stopped (the process must exit at once)."""
        deadline = time.monotonic() + grace
        stuck: list[Key] = []
        while runs := self.ledger.runs():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning("%d task(s) did not finish within %.0fs; handing them back", len(runs), grace)
                stuck = await self.hand_back(runs)
                break
            await asyncio.wait(runs.values(), timeout=remaining)
        stuck = sorted({*stuck, *self.ledger.zombies()})
        if not await self.writer.wait_idle(timeout=max(deadline - time.monotonic(), DRAIN_WRITE_SECONDS)):
            log.warning("%d outcome(s) not written; their entries will be reclaimed after claimIdle", len(self.writer))
        return stuck

    async def hand_back(self, runs: dict[Key, asyncio.Future[None]], wait: float = CANCEL_WAIT_SECONDS) -> list[Key]:
        """Cancel the runs that outlived the grace period; hand back those that stopped, claimable at once (an
        idle time of claimIdle, without counting a delivery). Returns the others (stuck)."""
        task_ids = {key: slot.task_id for key, slot in self.ledger.slots.items() if key in runs}
        for run in runs.values():
            run.cancel()
        await asyncio.wait(runs.values(), timeout=wait)
        zombies = set(self.ledger.zombies())
        stuck = [key for key, run in runs.items() if not run.done() or key in zombies]
        for key in stuck:
            self.ledger.abandon(key)
        if stuck:
            log.warning("%d task(s) still running user code after cancellation: not handed back", len(stuck))
        idle = ms(self.recovery.claim_idle)
        calls = [
            self.streams.retry_later_call(
                key[0], self.consumer, key[1], task_ids.get(key, ""), INTERRUPTED, 0 if key in stuck else idle
            )
            for key in runs
        ]
        try:
            await asyncio.wait_for(self.streams.run_batch(calls), timeout=HAND_BACK_SECONDS)
        except (*UNREACHABLE, TimeoutError):
            log.warning("could not hand back %d task(s); they will be reclaimed after claimIdle", len(calls))
        return stuck
