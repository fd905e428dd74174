"""Following a task and reading its result (tierpool.client.tracking), as plans driven by hand: which reads they make,
how long each blocking read may wait, and what they emit and return."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from tierpool.client.tracking import follow_plan, result_plan
from tierpool.model.keys import PoolKeys
from tierpool.protocol.submission import TaskResult
from tierpool.protocol.task_state import EVENTS_MAXLEN, TaskEvent
from tierpool.store.plans import Batch, Emit, call

from .conversation import Exchange, converse

KEYS = PoolKeys("team", "agents")
EVENTS, RESULT_KEY = KEYS.events("t1"), KEYS.result("t1")
RECORD = json.dumps({"task_id": "t1", "status": "succeeded", "result": 42})
RESULT = TaskResult.from_json(RECORD)
WALL = 1_700_000_000.0
FOLLOW = Batch(
    [
        call("xadd", EVENTS, {"type": "follow", "at": "1700000000000"}, maxlen=EVENTS_MAXLEN, approximate=True),
        call("pexpire", EVENTS, 60_000),
    ],
    transaction=True,
    raise_on_error=True,
)
PROGRESS = TaskEvent("2-0", "progress", None, {"step": 1})
OUTCOME = TaskEvent("3-0", "outcome", None, None, "succeeded")


def entries(*items: tuple[str, dict[str, str]]) -> list[Any]:
    return [[EVENTS, list(items)]]


def read(after: str, block: int | None) -> Any:
    return call("xread", {EVENTS: after}, count=100, block=block)


def plan(clock_times: Sequence[float], timeout: float = 5.0) -> Any:
    return follow_plan(KEYS, "t1", timeout, 60_000, iter(clock_times).__next__, lambda: WALL)


FOLLOWED: dict[str, tuple[list[float], list[Exchange]]] = {
    "finished already: no follow event, one read, the result": (
        [0.0],
        [
            (call("exists", RESULT_KEY), 1),
            (call("get", RESULT_KEY), RECORD),
            (read("0-0", None), []),
            (Emit(RESULT), None),
        ],
    ),
    "unfinished: a follow event, blocking reads until the final event, the stream to its end, the result": (
        [0.0, 0.0, 1.0],
        [
            (call("exists", RESULT_KEY), 0),
            (FOLLOW, ["1-0", 1]),
            (call("get", RESULT_KEY), None),
            (
                read("0-0", 1000),
                entries(("1-0", {"type": "follow"}), ("2-0", {"type": "progress", "data": '{"step":1}'})),
            ),
            (Emit(PROGRESS), None),
            (call("get", RESULT_KEY), None),
            (read("2-0", 1000), entries(("3-0", {"type": "outcome", "status": "succeeded"}))),
            (Emit(OUTCOME), None),
            (call("get", RESULT_KEY), RECORD),
            (read("3-0", None), None),
            (Emit(RESULT), None),
        ],
    ),
    "the last blocking read waits only for what is left of the timeout": (
        [0.0, 4.75],
        [
            (call("exists", RESULT_KEY), 0),
            (FOLLOW, ["1-0", 1]),
            (call("get", RESULT_KEY), None),
            (read("0-0", 250), []),
            (call("get", RESULT_KEY), RECORD),
            (read("0-0", None), []),
            (Emit(RESULT), None),
        ],
    ),
    "with the result seen, batch after batch until the stream is read to its end": (
        [0.0],
        [
            (call("exists", RESULT_KEY), 1),
            (call("get", RESULT_KEY), RECORD),
            (read("0-0", None), entries(("2-0", {"type": "progress", "data": '{"step":1}'}))),
            (Emit(PROGRESS), None),
            (read("2-0", None), entries(("3-0", {"type": "outcome", "status": "succeeded"}))),
            (Emit(OUTCOME), None),
            (read("3-0", None), []),
            (Emit(RESULT), None),
        ],
    ),
}


@pytest.mark.parametrize(("clock_times", "exchanges"), FOLLOWED.values(), ids=FOLLOWED.keys())
def test_follow(clock_times: list[float], exchanges: list[Exchange]) -> None:
    assert converse(plan(clock_times), exchanges) == RESULT


UNFINISHED: list[Exchange] = [(call("exists", RESULT_KEY), 0), (FOLLOW, ["1-0", 1]), (call("get", RESULT_KEY), None)]


@pytest.mark.parametrize(
    ("clock_times", "exchanges"),
    [
        ([0.0, 5.0], UNFINISHED),
        ([0.0, 0.0, 7.5], [*UNFINISHED, (read("0-0", 1000), []), (call("get", RESULT_KEY), None)]),
    ],
    ids=["time up at the first read of the result", "time up after a blocking read"],
)
def test_no_result_within_the_timeout_is_a_timeout_error(clock_times: list[float], exchanges: list[Exchange]) -> None:
    with pytest.raises(TimeoutError, match="no result for task t1 within 5s"):
        converse(plan(clock_times), exchanges)


@pytest.mark.parametrize(("record", "result"), [(None, None), (RECORD, RESULT)], ids=["none yet", "finished"])
def test_result(record: str | None, result: TaskResult | None) -> None:
    assert converse(result_plan(KEYS, "t1"), [(call("get", RESULT_KEY), record)]) == result
