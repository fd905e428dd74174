"""The producer's side of protocol 4: cancel a task, follow its events, wait for its result without polling.

Sync and async twins: :class:`tierpool.client.producer.Client` uses the ``*_sync`` functions, ``AsyncClient``
the others.

**Following.** A follower of an unfinished task first appends a ``follow`` event to the task's event stream
(creating it; outcome scripts append their final event only to a stream that exists), then reads the result
record, then blocks on
the stream (XREAD BLOCK) for the next events. The final event wakes it at once; the result record is read again
at least every second as well, which covers outcomes that append no event (workers older than protocol 4, and
tasks dead-lettered by a reclaim past ``maxDeliveries``). Once the result record is seen, the follower reads the
stream to its end (batch after batch, without blocking) before it yields the result, so no event is dropped.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from tierpool.model.keys import PoolKeys
from tierpool.protocol.submission import TaskResult
from tierpool.protocol.task_state import EVENTS_MAXLEN, CancelState, TaskEvent, parse_event
from tierpool.store.connection import AsyncRedis, SyncRedis

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


def _follow_fields() -> Any:
    return {"type": "follow", "at": str(int(time.time() * 1000))}


def _events(reply: Any) -> list[TaskEvent]:
    return [parse_event(str(entry_id), fields) for _, entries in reply or [] for entry_id, fields in entries]


async def follow_async(
    client: AsyncRedis, keys: PoolKeys, task_id: str, timeout: float, ttl_ms: int
) -> AsyncIterator[TaskEvent | TaskResult]:
    """The task's events as they come (progress and the final one), then its result record; TimeoutError after
    ``timeout`` seconds without a result."""
    key, deadline, last = keys.events(task_id), time.monotonic() + timeout, "0-0"
    if not await client.exists(keys.result(task_id)):  # finished tasks need no follow event
        pipe = client.pipeline(transaction=True)
        pipe.xadd(key, _follow_fields(), maxlen=EVENTS_MAXLEN, approximate=True)
        pipe.pexpire(key, ttl_ms)
        await pipe.execute()
    while True:
        raw = await client.get(keys.result(task_id))
        block = None if raw else _block_ms(deadline)
        if block == 0:
            raise TimeoutError(f"no result for task {task_id} within {timeout:g}s")
        while True:  # with the result seen: every event left, then the result (a batch per round trip)
            events = _events(await client.xread({key: last}, count=EVENT_BATCH, block=block))
            for event in events:
                last = event.id
                if event.type != "follow":
                    yield event
            if not raw or not events:
                break
        if raw:
            yield TaskResult.from_json(str(raw))
            return


def follow_sync(
    client: SyncRedis, keys: PoolKeys, task_id: str, timeout: float, ttl_ms: int
) -> Iterator[TaskEvent | TaskResult]:
    """:func:`follow_async` for a sync client."""
    key, deadline, last = keys.events(task_id), time.monotonic() + timeout, "0-0"
    if not client.exists(keys.result(task_id)):
        pipe = client.pipeline(transaction=True)
        pipe.xadd(key, _follow_fields(), maxlen=EVENTS_MAXLEN, approximate=True)
        pipe.pexpire(key, ttl_ms)
        pipe.execute()
    while True:
        raw = client.get(keys.result(task_id))
        block = None if raw else _block_ms(deadline)
        if block == 0:
            raise TimeoutError(f"no result for task {task_id} within {timeout:g}s")
        while True:  # with the result seen: every event left, then the result (a batch per round trip)
            events = _events(client.xread({key: last}, count=EVENT_BATCH, block=block))
            for event in events:
                last = event.id
                if event.type != "follow":
                    yield event
            if not raw or not events:
                break
        if raw:
            yield TaskResult.from_json(str(raw))
            return


def _block_ms(deadline: float) -> int:
    """How long the next blocking read may wait: 0 when the time is up (XREAD BLOCK 0 would wait forever)."""
    left = deadline - time.monotonic()
    return 0 if left <= 0 else max(1, min(int(left * 1000), BLOCK_SLICE_MS))
