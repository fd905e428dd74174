"""Cancelling and taking a cancel back (tierpool.client.cancels), as plans driven by hand: the round trips a cancel
makes for what it finds, and what becomes of the marker."""

from __future__ import annotations

import json

import pytest
from redis.exceptions import ResponseError

from tierpool.client.cancels import cancel_plan, uncancel_plan
from tierpool.client.tracking import CancelReport
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.submission import TaskResult
from tierpool.protocol.task_state import CancelState

from .conversation import Exchange, converse, named

KEYS = PoolKeys("team", "agents")
RECORD = json.dumps({"task_id": "t1", "status": "succeeded"})
SETS = "zscan + zscan + zscan + zscan"  # the due-time index, throttled, stranded, held for p0
NOTHING_IN_SETS = [(0, [])] * 4
GROUPS = [[{"name": GROUP, "last-delivered-id": "5-0"}]]
ENTRY = [("4-0", {"task_id": "t1"})]
NO_STREAM = ResponseError("no such key")

CANCELS: dict[str, tuple[list[Exchange], CancelReport]] = {
    "finished: one round trip, the record is reported": (
        [("EVAL cancel", [["finished", RECORD]])],
        CancelReport("t1", CancelState.FINISHED, TaskResult.from_json(RECORD)),
    ),
    "nowhere: the marker is taken back": (
        [
            ("EVAL cancel", [["marked"]]),
            (SETS, NOTHING_IN_SETS),
            ("xinfo_groups", [NO_STREAM]),
            ("get", [None]),
            ("delete", [1]),
        ],
        CancelReport("t1", CancelState.UNKNOWN),
    ),
    "delivered and pending: running, the marker stays": (
        [
            ("EVAL cancel", [["marked"]]),
            (SETS, NOTHING_IN_SETS),
            ("xinfo_groups", GROUPS),
            ("xrange", [ENTRY]),
            ("xrange", [[]]),
            ("xpending_range + get", [[{"consumer": "w1"}], None]),
        ],
        CancelReport("t1", CancelState.RUNNING),
    ),
    "due later: waiting, the marker outlives the due time": (
        [
            ("EVAL cancel", [["marked"]]),
            (SETS, [(0, [('["p0",["task_id","t1"]]', 9_000.0)]), (0, []), (0, []), (0, [])]),
            ("xinfo_groups", [NO_STREAM]),
            ("get", [None]),
            ("pexpireat", [1]),
        ],
        CancelReport("t1", CancelState.WAITING),
    ),
}


@pytest.mark.parametrize(("exchanges", "report"), CANCELS.values(), ids=CANCELS.keys())
def test_cancel(exchanges: list[Exchange], report: CancelReport) -> None:
    assert converse(cancel_plan(KEYS, ["p0"], ["t1"], 60_000), exchanges, named) == [report]


def test_a_marker_that_could_not_be_written_ends_the_cancel() -> None:
    with pytest.raises(ResponseError, match="READONLY"):
        converse(cancel_plan(KEYS, ["p0"], ["t1"], 60_000), [("EVAL cancel", [ResponseError("READONLY")])], named)


@pytest.mark.parametrize(("deleted", "had_marker"), [(1, True), (0, False)])
def test_uncancel(deleted: int, had_marker: bool) -> None:
    assert converse(uncancel_plan(KEYS, "t1"), [("delete", deleted)], named) is had_marker
