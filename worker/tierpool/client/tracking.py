"""The producer's side of task control: cancel a task, follow its events, wait for its result without polling.

Written once as plans (tierpool.store.plans): :class:`tierpool.client.producer.Client` runs them with the sync
driver, ``AsyncClient`` with the async one (tierpool.store.drivers).

**Following.** A follower of an unfinished task first appends a ``follow`` event to the task's event stream
(creating it; outcome scripts append their final event only to a stream that exists), then reads the result
record, then blocks on
the stream (XREAD BLOCK) for the next events. The final event wakes it at once; the result record is read again
at least every second as well, which covers outcomes that append no event (workers from before task control, and
tasks dead-lettered by a reclaim past ``maxDeliveries``). Once the result record is seen, the follower reads the
stream to its end (batch after batch, without blocking) before it yields the result, so no event is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tierpool.model.durations import ms_floor, now_ms
from tierpool.model.keys import PoolKeys
from tierpool.protocol.submission import TaskResult
from tierpool.protocol.task_state import EVENTS_MAXLEN, CancelState, TaskEvent, parse_event
from tierpool.store.plans import Batch, Emit, Plan, call

BLOCK_SLICE_MS = 1000
"""A follower reads the result record again at least this often."""
EVENT_BATCH = 100
SCAN_PAGE = 1000


@dataclass(frozen=True)
class CancelReport:
    """What :meth:`Client.cancel` found and did."""

    task_id: str
    state: CancelState
    result: TaskResult | None = None
    """The result record, when the task had finished already."""

    @property
    def found(self) -> bool:
        return self.state is not CancelState.UNKNOWN

    @property
    def cancelled(self) -> bool:
        """A cancel was recorded: the task will not run (again), and its result will say ``cancelled``."""
        return self.state in (CancelState.WAITING, CancelState.RUNNING)


# --- following ------------------------------------------------------------------------------------------------


def result_plan(keys: PoolKeys, task_id: str) -> Plan[TaskResult | None]:
    """The task's result record, None while it has none."""
    raw = yield call("get", keys.result(task_id))
    return TaskResult.from_json(str(raw)) if raw else None


def _events(reply: Any) -> list[TaskEvent]:
    return [parse_event(str(entry_id), fields) for _, entries in reply or [] for entry_id, fields in entries]


def follow_plan(
    keys: PoolKeys,
    task_id: str,
    timeout: float,
    ttl_ms: int,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> Plan[TaskResult]:
    """Emit the task's events as they come (progress and the final one), then its result record, which it also
    returns; TimeoutError after ``timeout`` seconds (on ``clock``) without a result."""
    key, deadline, last = keys.events(task_id), clock() + timeout, "0-0"
    if not (yield call("exists", keys.result(task_id))):  # finished tasks need no follow event
        fields = {"type": "follow", "at": str(now_ms(wall_clock))}
        add = call("xadd", key, fields, maxlen=EVENTS_MAXLEN, approximate=True)
        yield Batch([add, call("pexpire", key, ttl_ms)], transaction=True, raise_on_error=True)
    while True:
        raw = yield call("get", keys.result(task_id))
        block = None if raw else _block_ms(deadline - clock())
        if block == 0:
            raise TimeoutError(f"no result for task {task_id} within {timeout:g}s")
        while True:  # with the result seen: every event left, then the result (a batch per round trip)
            events = _events((yield call("xread", {key: last}, count=EVENT_BATCH, block=block)))
            for event in events:
                last = event.id
                if event.type != "follow":
                    yield Emit(event)
            if not raw or not events:
                break
        if raw:
            result = TaskResult.from_json(str(raw))
            yield Emit(result)
            return result


def _block_ms(left: float) -> int:
    """How long the next blocking read may wait, with ``left`` seconds to the deadline: 0 when the time is up
    (XREAD BLOCK 0 would wait forever)."""
    return 0 if left <= 0 else max(1, min(ms_floor(left), BLOCK_SLICE_MS))
