"""Refills before outcome writes (tierpool.runtime.refills): when a batch of outcomes waits, and for how long."""

from __future__ import annotations

import asyncio
import time

from tierpool.runtime.ledger import SlotLedger
from tierpool.runtime.refills import RefillFirst


async def test_writes_go_at_once_when_no_refill_is_due() -> None:
    refill = RefillFirst(longest=1.0)
    refill.slot_freed()  # the reader is not waiting for room (busy with a pass, or blocking on empty tiers)
    started = time.monotonic()
    await refill.turn()
    assert time.monotonic() - started < 0.05 and not refill.due


async def test_a_slot_freed_while_the_reader_waits_for_room_holds_writes_until_the_pass() -> None:
    refill = RefillFirst(longest=5.0)
    refill.waiting_for_room = True
    refill.slot_freed()
    assert refill.due
    turn = asyncio.ensure_future(refill.turn())
    await asyncio.sleep(0.02)
    assert not turn.done()  # the writer waits for the refill...
    refill.passed()
    await asyncio.wait_for(turn, 1.0)  # ...and goes as soon as the reader's pass is over
    assert not refill.due


async def test_a_due_refill_holds_writes_at_most_longest() -> None:
    refill = RefillFirst(longest=0.05)
    refill.waiting_for_room = True
    refill.slot_freed()
    started = time.monotonic()
    await refill.turn()  # the reader never passes (stuck on Redis, say): the batch goes anyway
    assert 0.04 <= time.monotonic() - started < 0.5


def test_the_ledger_reports_every_run_that_stops_counting() -> None:
    ledger = SlotLedger(concurrency=2, tiers=1)
    ended: list[int] = []
    ledger.on_run_ended = lambda: ended.append(ledger.free())
    ledger.start((0, "1-0"), "a")
    ledger.start((0, "1-1"), "b")
    ledger.run_ended((0, "1-0"), outcome_queued=True)
    ledger.run_ended((0, "1-1"), outcome_queued=False)
    assert ended == [1, 2]  # called once the slot is free, before the reader wakes


async def test_once_the_worker_stops_reading_writes_never_wait() -> None:
    """A drain: the reader makes no further pass, so a refill marked due (or freed later) must not hold writes."""
    refill = RefillFirst(longest=5.0)
    refill.waiting_for_room = True
    refill.slot_freed()
    refill.close()
    refill.slot_freed()  # a run that ends during the drain, the reader still marked as waiting
    started = time.monotonic()
    await refill.turn()
    assert time.monotonic() - started < 0.05 and not refill.due


async def test_a_held_batch_that_times_out_holds_no_later_batch() -> None:
    refill = RefillFirst(longest=0.05)
    refill.waiting_for_room = True
    refill.slot_freed()
    await refill.turn()  # waits the 50 ms once
    started = time.monotonic()
    await refill.turn()  # the reader still has not passed: the next batch goes at once
    assert time.monotonic() - started < 0.02
