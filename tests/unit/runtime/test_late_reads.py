"""tierpool.runtime.late_reads without a server: the check's calls, and which entries a late read keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tierpool.model.keys import GROUP, PoolKeys
from tierpool.runtime.late_reads import LateReads, ownership_calls
from tierpool.runtime.metrics import TierSeries
from tierpool.store.streams import HEARTBEAT_CHUNK, Entry, PoolStreams, ScriptCall

KEYS = PoolKeys("ns", "pool")


class FakeStreams(PoolStreams):
    """Answers HEARTBEAT calls from a table of (tier, entry id) -> "mine" | "taken" | "gone"."""

    def __init__(self, state: dict[tuple[int, str], str]) -> None:
        super().__init__(None, KEYS, ["p0", "p1"])  # type: ignore[arg-type]
        self.state = state
        self.round_trips: list[Sequence[ScriptCall]] = []

    async def run_batch(self, calls: Sequence[ScriptCall], gate: Any = None) -> list[Any]:
        self.round_trips.append(calls)
        replies = []
        for name, keys, args in calls:
            assert name == "HEARTBEAT"
            tier = self.streams.index(keys[0])
            ids = [str(entry_id) for entry_id in args[2:]]
            found = [self.state.get((tier, entry_id), "gone") for entry_id in ids]
            replies.append(
                [[i for i, f in zip(ids, found) if f == "taken"], [i for i, f in zip(ids, found) if f == "gone"]]
            )
        return replies


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_ownership_calls_one_per_tier_in_tier_order_chunked() -> None:
    streams = FakeStreams({})
    entries = [Entry(1, f"{i}-0", {}) for i in range(HEARTBEAT_CHUNK + 1)] + [Entry(0, "7-0", {})]
    calls = ownership_calls(streams, "w1", entries)
    assert [(index, len(call[2]) - 2) for index, call in calls] == [(0, 1), (1, HEARTBEAT_CHUNK), (1, 1)]
    assert calls[0] == (0, ("HEARTBEAT", [KEYS.tier("p0")], [GROUP, "w1", "7-0"]))
    assert calls[2][1][2][2:] == [f"{HEARTBEAT_CHUNK}-0"]


def late_reads(state: dict[tuple[int, str], str]) -> tuple[LateReads, FakeStreams, Clock, list[TierSeries]]:
    streams, clock, series = FakeStreams(state), Clock(), [TierSeries(), TierSeries()]
    return LateReads(streams, "w1", 25.0, series, clock), streams, clock, series


async def test_a_prompt_read_starts_everything_without_a_round_trip() -> None:
    guard, streams, clock, _ = late_reads({})  # nothing is "mine": a check would drop everything
    entries = [Entry(0, "1-0", {}), Entry(1, "2-0", {})]
    sent_at = guard.now()
    clock.now += 25.0
    assert await guard.confirm(entries, sent_at) == entries
    assert streams.round_trips == [] and guard.checks == 0


@pytest.mark.parametrize("waited", [25.001, 600.0])
async def test_a_late_read_starts_only_the_entries_still_its_own(waited: float) -> None:
    state = {(0, "1-0"): "mine", (0, "2-0"): "taken", (1, "3-0"): "gone", (1, "4-0"): "mine"}
    guard, streams, clock, series = late_reads(state)
    entries = [
        Entry(0, "1-0", {"task_id": "a"}),
        Entry(0, "2-0", {"task_id": "b"}),
        Entry(1, "3-0", {}),
        Entry(1, "4-0", {}),
    ]
    sent_at = guard.now()
    clock.now += waited
    kept = await guard.confirm(entries, sent_at)
    assert [entry.id for entry in kept] == ["1-0", "4-0"]
    assert len(streams.round_trips) == 1 and guard.checks == 1  # both tiers in one round trip
    assert [s.stale_skipped.value for s in series] == [1, 1]


async def test_a_failed_check_raises_and_starts_nothing() -> None:
    guard, streams, clock, _ = late_reads({})

    async def refused(calls: Sequence[ScriptCall], gate: Any = None) -> list[Any]:
        return [RuntimeError("NOGROUP")]

    streams.run_batch = refused  # type: ignore[method-assign]
    sent_at = guard.now()
    clock.now += 60.0
    with pytest.raises(RuntimeError, match="NOGROUP"):
        await guard.confirm([Entry(0, "1-0", {})], sent_at)
