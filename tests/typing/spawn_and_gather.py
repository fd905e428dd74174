"""Checked by ``make typecheck`` (mypy --strict), never run: the types a handler sees from ``task.spawn`` and
``task.gather``. A wrong annotation in tierpool.protocol.envelope.Task fails an ``assert_type`` here."""

from __future__ import annotations

from typing import Any, assert_type

from pydantic import BaseModel

import tierpool
from tierpool.protocol.envelope import Spawned
from tierpool.protocol.gather import Child

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
    assert_type(child, Spawned[Report])
    assert_type(await task.spawn(search, {"q": "as a mapping"}), Spawned[Report])
    assert_type(await task.spawn("search", {"q": "by name"}), Spawned[Any])
    found = await task.gather(child, child)
    assert_type(found, list[Report])
    results = await task.gather(child, return_exceptions=True)
    assert_type(results, list[Report | BaseException])
    assert_type([r for r in results if not isinstance(r, BaseException)], list[Report])  # as the docs narrow them
    return sum(report.hits for report in found)


def a_child_is_what_spawn_returns(child: Child[Report]) -> Spawned[Report]:
    return child  # tierpool.protocol.gather.Child meets the Spawned protocol
