"""An App for the integration tests of typed tasks (tests/integration/test_apps.py), importable as the pool's
handler ``tests.integration.typed_app:app`` by a CLI run from the repository's root."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

import tierpool


class Dispute(BaseModel):
    ticket: int


class Verdict(BaseModel):
    refund: bool
    ticket: int


class Wait(BaseModel):
    seconds: float
    steps: int = 1


app = tierpool.App()


@app.task(tier="p0", timeout="30s")
async def resolve(task: tierpool.Task, inp: Dispute) -> Verdict:
    return Verdict(refund=inp.ticket % 2 == 0, ticket=inp.ticket)


@app.task(tier="p2", timeout="200ms")
async def linger(task: tierpool.Task, inp: Wait) -> int:
    """Reports a progress event per step, then sleeps: cancelled, or past its 200ms default timeout."""
    for step in range(inp.steps):
        await task.progress({"step": step})
    await asyncio.sleep(inp.seconds)
    return inp.steps
