"""Stranded scheduled tasks (protocol 7): which tier a member names, and MOVE_DUE's keys and args."""

from __future__ import annotations

import pytest

from tierpool.model.keys import PoolKeys
from tierpool.protocol.members import by_tier, tier_of
from tierpool.store.due import move_due_call
from tierpool.store.streams import PoolStreams


@pytest.mark.parametrize(
    ("member", "tier"),
    [
        ('["p1", ["task_id", "a"]]', "p1"),
        ('["p1"]', None),
        ("[1, []]", None),
        ("not json", None),
        ('{"tier": "p1"}', None),
    ],
)
def test_tier_of(member: str, tier: str | None) -> None:
    assert tier_of(member) == tier


def test_by_tier_counts_undecodable_under_a_question_mark() -> None:
    assert by_tier(['["a", []]', '["a", []]', '["b", []]', "x"]) == {"a": 2, "b": 1, "?": 1}


def test_move_due_declares_every_tiers_stream_and_tenant_keys() -> None:
    keys = PoolKeys("ns", "pool")
    streams = PoolStreams(None, keys, ["p0", "p1"], [None, 3])  # type: ignore[arg-type]
    name, names, args = move_due_call(streams, 500, 10_000)
    assert name == "MOVE_DUE"
    assert names[:7] == [
        keys.due,
        keys.throttled,
        keys.stranded,
        keys.dlq,
        keys.reentered,
        keys.tier("p0"),
        keys.tier("p1"),
    ]
    for start, tier in ((7, "p0"), (12, "p1")):
        tenant_keys = [keys.tenants(tier), keys.admitted(tier), keys.queued(tier), keys.held(tier)]
        assert names[start : start + 5] == [*tenant_keys, keys.held_seq(tier)]
    assert names[17:] == [keys.where]  # the task-id index, written for each task it moves
    assert args == [500, 10_000, "p0", -1, "p1", 3]
    assert all(key.startswith("tierpool:{ns/pool}:") for key in names)
