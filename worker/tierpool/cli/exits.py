"""Exit codes of the commands about one task (``tierpool result``, ``watch``, ``cancel``, ``submit --wait``): one
table for all of them. Pure.

| code | meaning |
|------|---------|
| 0 | ok: the task succeeded; for ``cancel``, the cancel was recorded (the task was waiting or running) |
| 1 | error: the command could not do its job (Redis unreachable, a bad pool file or payload, a taken port) |
| 2 | usage: bad arguments (argparse), no pool named, or ``dlq purge`` with no terminal to ask on and no ``--yes`` |
| 3 | not found: no such task, or its result record expired (``cancel``, ``result``) |
| 4 | the task was cancelled |
| 5 | timed out waiting (``result --wait``, ``watch --timeout``, ``submit --wait``) |
| 6 | the task was dead-lettered |
| 7 | ``cancel``: nothing cancelled, the task had finished already (its status is printed) |

With several task IDs (``cancel ID ID ...``) the exit code is 0 when every one is 0, else the largest.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum

from tierpool.protocol.task_state import CancelState


class Exit(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    NOT_FOUND = 3
    CANCELLED = 4
    TIMED_OUT = 5
    DEAD_LETTERED = 6
    FINISHED = 7


STATUS_EXITS = {"succeeded": Exit.OK, "cancelled": Exit.CANCELLED, "dead_lettered": Exit.DEAD_LETTERED}
CANCEL_EXITS = {
    CancelState.WAITING: Exit.OK,
    CancelState.RUNNING: Exit.OK,
    CancelState.FINISHED: Exit.FINISHED,
    CancelState.UNKNOWN: Exit.NOT_FOUND,
}


def for_status(status: str | None) -> Exit:
    """A task's final status (None: no result record) as an exit code; a status this version does not know is
    an error."""
    if status is None:
        return Exit.NOT_FOUND
    return STATUS_EXITS.get(status, Exit.ERROR)


def for_cancel(state: CancelState) -> Exit:
    return CANCEL_EXITS[state]


def overall(codes: Iterable[int]) -> int:
    """One exit code for several tasks: 0 when all are 0, else the largest."""
    return max(codes, default=0)
