"""Checked by ``make typecheck`` (mypy --strict), never run: the types a handler sees from ``task.spawn`` and
``task.gather``. A wrong annotation in tierpool.protocol.envelope.Task fails an ``assert_type`` here."""

from __future__ import annotations

from typing import Any, assert_type

from pydantic import BaseModel

import tierpool
from tierpool.protocol.gather import Child, ChildFailed

app = tierpool.App()


class Query(BaseModel):
    q: str


class Report(BaseModel):
    hits: int


@app.task(tier="p2")
async def search(task: tierpool.Task, inp: Query) -> Report:
    return Report(hits=len(inp.q))


@app.task(tier="p0")
async def research(task: tierpool.Task, inp: Query) -> int:
    child = await task.spawn(search, Query(q=inp.q))
    assert_type(child, Child[Report])
    assert_type(await task.spawn(search, {"q": "as a mapping"}), Child[Report])
    assert_type(await task.spawn("search", {"q": "by name"}), Child[Any])
    found = await task.gather(child, child)
    assert_type(found, list[Report])
    assert_type(await task.gather(child, return_exceptions=True), list[Report | ChildFailed])
    return sum(report.hits for report in found)
