"""Cancelling and taking a cancel back (tierpool.client.cancels), as plans driven by hand: the round trips a cancel
makes for what it finds, and what becomes of the marker. ``marked`` is the CANCEL script's answer for a task the
task-id index does not know: only such a task is looked for by scanning."""

from __future__ import annotations

import json

import pytest
from redis.exceptions import NoScriptError, ResponseError

from tierpool.client.cancels import cancel_call, cancel_plan, uncancel_plan
from tierpool.client.tracking import CancelReport
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.submission import TaskResult
from tierpool.protocol.task_state import CancelState

from .conversation import Exchange, converse, named

KEYS = PoolKeys("team", "agents")
RECORD = json.dumps({"task_id": "t1", "status": "succeeded"})
SETS = "ZSCAN + ZSCAN + ZSCAN + ZSCAN"  # the due-time index, throttled, stranded, held for p0
NOTHING_IN_SETS = [(0, [])] * 4
GROUPS = [[{"name": GROUP, "last-delivered-id": "5-0"}]]
ENTRY = [("4-0", {"task_id": "t1"})]
NO_STREAM = ResponseError("no such key")

CANCELS: dict[str, tuple[list[Exchange], CancelReport]] = {
    "finished: one round trip, the record is reported": (
        [("EVALSHA cancel", [["finished", RECORD]])],
        CancelReport("t1", CancelState.FINISHED, TaskResult.from_json(RECORD)),
    ),
    "nowhere: the marker is taken back": (
        [
            ("EVALSHA cancel", [["marked"]]),
            ("exists", [0]),
            (SETS, NOTHING_IN_SETS),
            ("xinfo_groups", [NO_STREAM]),
            ("get + exists", [None, 0]),
            ("delete", [1]),
        ],
        CancelReport("t1", CancelState.UNKNOWN),
    ),
    "parked in a gather: waiting, the marker stays (its children see it)": (
        [
            ("EVALSHA cancel", [["marked"]]),
            ("exists", [0]),
            (SETS, NOTHING_IN_SETS),
            ("xinfo_groups", [NO_STREAM]),
            ("get + exists", [None, 1]),
        ],
        CancelReport("t1", CancelState.WAITING),
    ),
    "resumed from its gather between the reads: the parked hash before the scan counts (the marker stays)": (
        [
            ("EVALSHA cancel", [["marked"]]),
            ("exists", [1]),
            (SETS, NOTHING_IN_SETS),
            ("xinfo_groups", [NO_STREAM]),
            ("get + exists", [None, 0]),
        ],
        CancelReport("t1", CancelState.WAITING),
    ),
    "delivered and pending: running, the marker stays": (
        [
            ("EVALSHA cancel", [["marked"]]),
            ("exists", [0]),
            (SETS, NOTHING_IN_SETS),
            ("xinfo_groups", GROUPS),
            ("XRANGE", [ENTRY]),
            ("XRANGE", [[]]),
            ("xpending_range + get + exists", [[{"consumer": "w1"}], None, 0]),
        ],
        CancelReport("t1", CancelState.RUNNING),
    ),
    "in a stream, through the task-id index: one round trip": (
        [("EVALSHA cancel", [["waiting"]])],
        CancelReport("t1", CancelState.WAITING),
    ),
    "owned by a worker, through the task-id index: running, one round trip": (
        [("EVALSHA cancel", [["running"]])],
        CancelReport("t1", CancelState.RUNNING),
    ),
    "taken out of a set with its record written: waiting (never runs), one round trip": (
        [("EVALSHA cancel", [["cancelled"]])],
        CancelReport("t1", CancelState.WAITING),
    ),
    "due later: waiting, the marker outlives the due time": (
        [
            ("EVALSHA cancel", [["marked"]]),
            ("exists", [0]),
            (SETS, [(0, [('["p0",["task_id","t1"]]', 9_000.0)]), (0, []), (0, []), (0, [])]),
            ("xinfo_groups", [NO_STREAM]),
            ("get + exists", [None, 0]),
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
        converse(cancel_plan(KEYS, ["p0"], ["t1"], 60_000), [("EVALSHA cancel", [ResponseError("READONLY")])], named)


@pytest.mark.parametrize(("deleted", "had_marker"), [(1, True), (0, False)])
def test_uncancel(deleted: int, had_marker: bool) -> None:
    assert converse(uncancel_plan(KEYS, "t1"), [("delete", deleted)], named) is had_marker


def test_only_the_tasks_the_index_does_not_know_are_scanned_for() -> None:
    exchanges = [
        ("EVALSHA cancel + EVALSHA cancel + EVALSHA cancel", [["finished", RECORD], ["running"], ["marked"]]),
        ("exists", [0]),
        (SETS, NOTHING_IN_SETS),
        ("xinfo_groups", [NO_STREAM]),
        ("get + exists", [None, 0]),
        ("delete", [1]),
    ]
    reports = converse(cancel_plan(KEYS, ["p0"], ["t1", "t2", "t3", "t2"], 60_000), exchanges, named)
    assert [(r.task_id, r.state) for r in reports] == [
        ("t1", CancelState.FINISHED),
        ("t2", CancelState.RUNNING),
        ("t3", CancelState.UNKNOWN),
        ("t2", CancelState.RUNNING),
    ]


def test_the_cancel_script_declares_the_pools_keys_with_the_index_last() -> None:
    keys, args = cancel_call(KEYS, ["p0", "p1"], "t1", 60_000, 3_600_000)
    assert keys[:5] == [KEYS.result("t1"), KEYS.cancel("t1"), KEYS.events("t1"), KEYS.checkpoint("t1"), KEYS.errors]
    assert keys[5:8] == [KEYS.due, KEYS.throttled, KEYS.stranded]
    assert keys[8:12] == [KEYS.tier("p0"), KEYS.held("p0"), KEYS.tier("p1"), KEYS.held("p1")]
    assert keys[-1] == KEYS.where and len(keys) == 8 + 2 * 2 + 1
    assert all(key.startswith(KEYS.prefix) for key in keys)  # one hash tag: one slot
    # no tenant count: a producer may not write them (the lease holder's repair releases a throttled task's slot)
    assert not any(":tenants:" in key or ":admitted:" in key for key in keys)
    assert args[:3] == ["t1", 60_000, 3_600_000] and args[-2:] == ["p0", "p1"]


def test_the_calls_refused_with_noscript_go_once_more_after_loading_the_script() -> None:
    refused = NoScriptError("No matching script")
    exchanges = [
        ("EVALSHA cancel + EVALSHA cancel", [["running"], refused]),
        ("script_load cancel", "sha"),
        ("EVALSHA cancel", [["waiting"]]),
    ]
    reports = converse(cancel_plan(KEYS, ["p0"], ["t1", "t2"], 60_000), exchanges, named)
    assert [r.state for r in reports] == [CancelState.RUNNING, CancelState.WAITING]
