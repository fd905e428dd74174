"""The slot ledger: one slot per held entry; reads and claims share one free-slot count."""

from __future__ import annotations

import asyncio

from tierpool.runtime.ledger import SlotLedger


def test_reservations_and_runs_share_one_count() -> None:
    ledger = SlotLedger(concurrency=4, tiers=2)
    assert ledger.reserve(3) == 3  # a read in flight
    assert ledger.reserve(64) == 1  # a claim gets only what is left, not a count of its own
    assert ledger.free() == 0
    ledger.unreserve(3)
    assert ledger.start((0, "1-0"), "a") and ledger.start((1, "1-1"), "b")
    assert ledger.free() == 1 and ledger.running == [1, 1]


def test_an_entry_is_held_once() -> None:
    ledger = SlotLedger(concurrency=4, tiers=1)
    assert ledger.start((0, "1-0"), "a")
    assert not ledger.start((0, "1-0"), "a")  # a second delivery of an entry it holds starts nothing
    assert not ledger.hold((0, "1-0"), "a")
    assert ledger.running == [1] and len(ledger) == 1


def test_finished_entries_stay_held_until_their_outcome_lands() -> None:
    ledger = SlotLedger(concurrency=1, tiers=1)
    ledger.start((0, "1-0"), "a")
    ledger.run_ended((0, "1-0"), outcome_queued=True)
    assert ledger.free() == 1  # the slot is free for new work...
    assert ledger.ids_by_tier() == {0: ["1-0"]}  # ...but the entry is still heartbeated
    assert ledger.release((0, "1-0")) is not None
    assert ledger.ids_by_tier() == {} and ledger.running == [0]


def test_a_cancelled_run_frees_its_slot_once() -> None:
    ledger = SlotLedger(concurrency=2, tiers=1)
    ledger.start((0, "1-0"), "a")
    ledger.release((0, "1-0"))  # lost to another worker
    ledger.run_ended((0, "1-0"), outcome_queued=False)  # the cancelled run's own cleanup changes nothing
    assert ledger.running == [0] and ledger.free() == 2 and len(ledger) == 0


def test_runs_lists_only_running_handlers() -> None:
    async def scenario() -> None:
        ledger = SlotLedger(concurrency=2, tiers=1)
        run: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ledger.start((0, "1-0"), "a")
        ledger.attach((0, "1-0"), run)
        ledger.hold((0, "1-1"), "b")  # a dead letter on its way
        assert ledger.runs() == {(0, "1-0"): run}
        run.cancel()

    asyncio.run(scenario())


def test_a_stopped_sync_run_keeps_its_slot_until_its_thread_returns() -> None:
    ledger = SlotLedger(concurrency=2, tiers=1)
    ledger.start((0, "1-0"), "a")
    ledger.thread_started((0, "1-0"))
    ledger.stop((0, "1-0"))  # taken over: the thread cannot be stopped
    ledger.run_ended((0, "1-0"), outcome_queued=False)  # its cancelled run ends, the thread goes on
    assert ledger.zombies() == [(0, "1-0")] and ledger.holds((0, "1-0"))
    assert ledger.free() == 1 and ledger.running == [1]
    assert ledger.ids_by_tier() == {} and ledger.runs() == {}  # no longer heartbeated nor drained
    assert not ledger.start((0, "1-0"), "a")  # never started twice while its thread runs
    ledger.thread_ended((0, "1-0"))
    assert len(ledger) == 0 and ledger.free() == 2 and ledger.running == [0]


def test_a_stopped_async_run_lets_go_of_its_slot_at_once() -> None:
    ledger = SlotLedger(concurrency=1, tiers=1)
    ledger.start((0, "1-0"), "a")
    ledger.stop((0, "1-0"))
    assert len(ledger) == 0 and ledger.free() == 1


def test_a_thread_that_outlives_its_run_counts_against_concurrency_until_it_returns() -> None:
    ledger = SlotLedger(concurrency=1, tiers=1)
    first, second = object(), object()
    ledger.start((0, "1-0"), "a", first)
    assert ledger.thread_started((0, "1-0"), first)
    ledger.run_ended((0, "1-0"), outcome_queued=True)  # timed out: its outcome is queued, its thread runs on
    ledger.release((0, "1-0"))  # the outcome landed
    assert len(ledger) == 0 and ledger.running_total == 0 and ledger.free() == 0  # the thread is still busy
    ledger.start((0, "1-0"), "a", second)  # a later run of the same entry (forced here)
    assert ledger.current((0, "1-0"), second) is not None and ledger.current((0, "1-0"), first) is None
    ledger.thread_ended((0, "1-0"), first)  # the stale thread returns: the later run's slot is untouched
    assert ledger.holds((0, "1-0")) and ledger.running_total == 1 and ledger.detached_threads == 0
    ledger.release((0, "1-0"))
    assert ledger.free() == 1
