"""tierpool.testing.run: an App task run eagerly, in-process, as a worker runs it (no Redis)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

import tierpool.testing
from tierpool import App, InvalidInput, NonRetryable, Task
from tierpool.protocol.apps import InvalidOutput
from tierpool.protocol.errors import TaskTimedOut

app = App()


class Stamp(BaseModel):
    at: datetime


class Seen(BaseModel):
    id: str
    tier: str
    name: str | None
    attempt: int
    state: Any
    timeout_ms: int | None


@app.task(tier="p1", timeout="5s")
async def inspect_task(task: Task, inp: Stamp) -> Seen:
    await task.checkpoint({"at": inp.at.isoformat()})
    await task.progress("half")
    return Seen(id=task.id, tier=task.tier, name=task.name, attempt=task.attempt, state=task.checkpoint_state,
                timeout_ms=task.timeout_ms)  # fmt: skip


@app.task(timeout="50ms")
async def slow(task: Task, inp: int) -> int:
    await asyncio.sleep(inp)
    return inp


@app.task()
async def refuses(task: Task, inp: int) -> int:
    raise NonRetryable("no")


@app.task()
async def returns_garbage(task: Task, inp: int) -> Stamp:
    return {"at": "not a time"}  # type: ignore[return-value]


async def test_a_task_runs_on_a_task_built_as_a_worker_builds_it() -> None:
    recorder = tierpool.testing.Recorder()
    at = datetime(2026, 1, 2, tzinfo=UTC)
    seen = await tierpool.testing.run(inspect_task, {"at": "2026-01-02T00:00:00Z"}, task_id="t-1", attempt=2,
                                      recorder=recorder)  # fmt: skip
    assert seen == Seen(id="t-1", tier="p1", name="inspect_task", attempt=2, state={"at": at.isoformat()},
                        timeout_ms=5000)  # fmt: skip
    assert recorder.events == ["half"] and recorder.checkpoints == [{"at": "2026-01-02T00:00:00+00:00"}]


async def test_a_re_run_starts_from_its_checkpoint_state_and_the_tier_can_be_chosen() -> None:
    @App().task()
    async def peek(task: Task, inp: int) -> Any:
        return [task.checkpoint_state, task.tier]

    assert await tierpool.testing.run(peek, 1, tier="p9", checkpoint_state={"n": 1}) == [{"n": 1}, "p9"]


async def test_what_a_worker_refuses_is_raised() -> None:
    with pytest.raises(InvalidInput, match="invalid input: at"):
        await tierpool.testing.run(inspect_task, {"at": "yesterday"})
    with pytest.raises(NonRetryable, match="no"):
        await tierpool.testing.run(refuses, 1)
    with pytest.raises(InvalidOutput, match="task 'returns_garbage': invalid output: at"):
        await tierpool.testing.run(returns_garbage, 1)


async def test_the_tasks_timeout_holds_as_on_a_worker() -> None:
    with pytest.raises(TaskTimedOut, match=r"timed out after 0\.05s"):
        await tierpool.testing.run(slow, 5)
    assert await tierpool.testing.run(slow, 0) == 0
