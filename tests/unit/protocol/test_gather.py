"""Spawn and gather, the pure parts (tierpool.protocol.gather): child ids, priority inheritance, deadlines, and what
a gather returns or raises for its children's records; and the eager spawn of tierpool.testing."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

import tierpool
from tierpool import testing
from tierpool.protocol.envelope import MAX_ANCESTORS, MalformedEntry, decode, encode
from tierpool.protocol.gather import (
    Child,
    ChildFailed,
    Gathering,
    child_ancestors,
    child_id,
    gathered,
    inherited_deadline,
    inherited_tier,
    lineage_of,
)
from tierpool.protocol.submission import TaskResult

TIERS = ["p0", "p1", "p2"]


def test_child_ids_are_the_parents_and_the_ordinal() -> None:
    assert [child_id("job-1", n) for n in range(3)] == ["job-1.0", "job-1.1", "job-1.2"]
    assert child_id("job-1.0", 4) == "job-1.0.4"  # a grandchild


@pytest.mark.parametrize(
    ("parent", "ancestors", "child_gets"),
    [
        (None, (), ()),  # a producer's task: its children name only it, as their parent
        ("root", (), ("root",)),  # a child: its children name the root above their parent
        ("root.0", ("root",), ("root", "root.0")),
        ("x", tuple(f"a{n}" for n in range(MAX_ANCESTORS)), (*(f"a{n}" for n in range(1, MAX_ANCESTORS)), "x")),
    ],
)
def test_a_childs_ancestors_are_its_parents_lineage(
    parent: str | None, ancestors: tuple[str, ...], child_gets: tuple[str, ...]
) -> None:
    assert child_ancestors(parent, ancestors) == child_gets


@pytest.mark.parametrize(
    ("fields", "lineage"),
    [
        ({}, ()),
        ({"parent": "p"}, ("p",)),
        ({"parent": "p", "ancestors": '["root", "q"]'}, ("p", "root", "q")),
        ({"parent": "p", "ancestors": "not json"}, ("p",)),
        ({"parent": "p", "ancestors": '{"a": 1}'}, ("p",)),
        ({"parent": "p", "ancestors": '["", 3, "r"]'}, ("p", "r")),
        ({"ancestors": '["root"]'}, ()),  # no parent: not spawned, whatever else it says
        ({"parent": "p", "ancestors": "[" * 1000}, ("p",)),  # too deep for the parser: no RecursionError
        ({"parent": "p", "ancestors": json.dumps(["a"] * 50_000)}, ("p",)),  # longer than any valid one
        (
            {"parent": "p", "ancestors": json.dumps([f"a{n}" for n in range(20)])},
            ("p", *(f"a{n}" for n in range(4, 20))),
        ),
        ({"parent": "p", "ancestors": json.dumps(["x" * 201, "ok"])}, ("p", "ok")),
    ],
)
def test_an_entrys_lineage_is_its_parent_and_the_tasks_above(fields: dict[str, str], lineage: tuple[str, ...]) -> None:
    assert lineage_of(fields) == lineage


@pytest.mark.parametrize(
    ("extra", "deliveries", "resumes"),
    [
        ({}, 1, False),  # never parked
        ({"parked": "0"}, 1, True),  # put back by PARK or GATHERED, taken once
        ({"parked": "0"}, 2, False),  # the resumed run's worker died: a redelivery, an attempt of its own
        ({"parked": "0", "attempts": "2"}, 1, False),  # the resumed run failed and was retried since
        ({"parked": "2", "attempts": "2"}, 1, True),  # parked again by its retry
    ],
)
def test_a_run_resumes_a_gather_only_on_the_entry_its_park_put_back(
    extra: dict[str, str], deliveries: int, resumes: bool
) -> None:
    task = decode("1-0", {**encode("t", "p0", "{}", 1), **extra}, deliveries)
    assert task.resumes_gather is resumes


def test_the_ancestors_travel_in_the_envelope_nearest_kept() -> None:
    above = [f"a{n}" for n in range(MAX_ANCESTORS + 3)]
    fields = encode("t.0.1", "p0", "{}", 1, parent="t.0", ancestors=above)
    task = decode("1-0", fields, 1)
    assert task.ancestors == tuple(above[-MAX_ANCESTORS:])
    assert task.lineage == ("t.0", *reversed(above[-MAX_ANCESTORS:]))
    assert "ancestors" not in encode("t", "p0", "{}", 1)
    with pytest.raises(MalformedEntry, match="ancestors"):
        decode("1-0", {**fields, "ancestors": "nope"}, 1)  # dead-lettered with the field named


@pytest.mark.parametrize(
    ("own", "parent", "runs"),
    [
        ("p2", "p0", "p0"),  # raised to its parent's
        ("p1", "p2", "p1"),  # its own is higher: kept
        ("p0", "p0", "p0"),
        ("p2", "p1", "p1"),
        ("gpu", "p0", "gpu"),  # not the pool's: the submit refuses it, naming it
    ],
)
def test_a_child_never_runs_below_its_parent(own: str, parent: str, runs: str) -> None:
    assert inherited_tier(TIERS, own, parent) == runs


def test_a_child_has_the_earlier_deadline() -> None:
    early, late = datetime(2030, 1, 1, tzinfo=UTC), datetime(2031, 1, 1, tzinfo=UTC)
    early_ms = int(early.timestamp() * 1000)
    assert inherited_deadline(None, None) is None
    assert inherited_deadline(late, None) == late
    assert inherited_deadline(None, early_ms) == early
    assert inherited_deadline(late, early_ms) == early
    assert inherited_deadline(early, int(late.timestamp() * 1000)) == early


def _done(task_id: str, result: int) -> TaskResult:
    return TaskResult(task_id, "succeeded", result)


def test_gather_returns_the_outputs_in_order() -> None:
    children: list[Child[int]] = [Child("p.0"), Child("p.1")]
    assert gathered(children, [_done("p.0", 1), _done("p.1", 2)], False) == [1, 2]
    assert gathered([], [], False) == []


def test_gather_parks_while_a_child_has_no_outcome() -> None:
    with pytest.raises(Gathering) as parked:
        gathered([Child("p.0"), Child("p.1")], [_done("p.0", 1), None], False)
    assert parked.value.children == ["p.0", "p.1"]
    assert not isinstance(parked.value, Exception)  # a handler's `except Exception` lets it through


@pytest.mark.parametrize("status", ["dead_lettered", "cancelled"])
def test_a_failed_child_raises_the_first_in_order_or_takes_its_place(status: str) -> None:
    children: list[Child[int]] = [Child("p.0"), Child("p.1"), Child("p.2")]
    records = [_done("p.0", 1), TaskResult("p.1", status, error="boom"), TaskResult("p.2", "cancelled")]
    with pytest.raises(ChildFailed) as failed:
        gathered(children, records, False)
    assert (failed.value.child_id, failed.value.status) == ("p.1", status)
    values = gathered(children, records, True)
    assert values[0] == 1 and [(v.child_id, v.status) for v in values[1:]] == [("p.1", status), ("p.2", "cancelled")]


class Num(BaseModel):
    x: int


app = tierpool.App()


@app.task(tier="p2")
async def square(task: tierpool.Task, inp: Num) -> int:
    if inp.x < 0:
        raise ValueError("negative")
    return inp.x * inp.x


@app.task(tier="p0")
async def total(task: tierpool.Task, inp: Num) -> list[int | str]:
    children = [await task.spawn(square, Num(x=x)) for x in (inp.x, -1, 3)]
    found = await task.gather(*children, return_exceptions=True)
    return [v if isinstance(v, int) else f"{v.child_id}:{v.status}" for v in found]


async def test_an_eager_run_spawns_and_gathers_in_process() -> None:
    recorder = testing.Recorder()
    out = await testing.run(total, Num(x=2), task_id="t", recorder=recorder)
    assert out == [4, "t.1:dead_lettered", 9]
    assert list(recorder.children) == ["t.0", "t.1", "t.2"]
