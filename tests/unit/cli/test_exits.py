"""The exit codes of the task commands (tierpool.cli.exits) and the decision behind each cancel report
(tierpool.client.cancels.decide), as tables."""

from __future__ import annotations

import json

import pytest

from tierpool.cli.exits import Exit, for_cancel, for_status, overall
from tierpool.cli.task_commands import cancel_line
from tierpool.client.cancels import decide
from tierpool.model.keys import RETRY_CONSUMER
from tierpool.protocol.task_state import CancelState, EntryState

# command, outcome -> code: one table for result, watch, submit --wait and cancel
TABLE = [
    ("result/watch", for_status("succeeded"), 0),
    ("result/watch", for_status("cancelled"), 4),
    ("result/watch", for_status("dead_lettered"), 6),
    ("result", for_status(None), 3),
    ("result/watch", for_status("from a newer version"), 1),
    ("cancel", for_cancel(CancelState.WAITING), 0),
    ("cancel", for_cancel(CancelState.RUNNING), 0),
    ("cancel", for_cancel(CancelState.UNKNOWN), 3),
    ("cancel", for_cancel(CancelState.FINISHED), 7),
    ("any", Exit.TIMED_OUT, 5),
    ("any", Exit.USAGE, 2),
]


@pytest.mark.parametrize(("command", "found", "code"), TABLE, ids=[f"{c}-{code}" for c, _, code in TABLE])
def test_exit_code_table(command: str, found: int, code: int) -> None:
    assert int(found) == code


@pytest.mark.parametrize(("codes", "code"), [([], 0), ([0, 0], 0), ([0, 3], 3), ([7, 3, 0], 7), ([4], 4)])
def test_several_tasks_exit_with_the_largest_code(codes: list[int], code: int) -> None:
    assert overall(codes) == code


RECORD = json.dumps({"task_id": "t", "status": "succeeded"})
DECISIONS = [
    ("nothing anywhere", [], None, None, False, CancelState.UNKNOWN, "drop"),
    ("held for its tenant", [], None, None, True, CancelState.WAITING, None),
    ("in the due index", [], None, 5_000, False, CancelState.WAITING, "extend"),
    ("waiting in its stream", [EntryState(None, False)], None, None, False, CancelState.WAITING, None),
    ("waiting for a retry", [EntryState(RETRY_CONSUMER, True)], None, None, False, CancelState.WAITING, None),
    ("running", [EntryState("w1", True)], None, None, False, CancelState.RUNNING, None),
    ("acked, result expired", [EntryState(None, True)], None, None, False, CancelState.FINISHED, None),
    ("acked, long retry in the index", [EntryState(None, True)], None, 9, False, CancelState.WAITING, "extend"),
    ("finished with a record", [EntryState(None, True)], RECORD, None, False, CancelState.FINISHED, None),
    ("a reply that failed", [], ValueError("x"), None, False, CancelState.UNKNOWN, "drop"),
]


@pytest.mark.parametrize(
    ("case", "found", "raw", "due", "held", "state", "marker"), DECISIONS, ids=[d[0] for d in DECISIONS]
)
def test_cancel_decision(
    case: str, found: list[EntryState], raw: object, due: int | None, held: bool, state: CancelState, marker: str | None
) -> None:
    report, what = decide("t", found, raw, due, held)
    assert (report.state, what) == (state, marker)
    assert cancel_line(report).startswith("task t ")
