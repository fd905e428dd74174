"""The sync and the async driver (tierpool.store.drivers) on recording clients: both make the same calls for the same
plan, hand back the same replies, emit and return the same, and close the plan when it cannot go on."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tierpool.store import drivers
from tierpool.store.plans import Batch, Emit, Plan, call

Record = list[tuple[Any, ...]]


class Pipe:
    def __init__(self, record: Record, replies: list[Any]) -> None:
        self.record, self.replies = record, replies

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self.record.append(("queue", name, args, kwargs))

    def execute(self, raise_on_error: bool = True) -> Any:
        self.record.append(("execute", raise_on_error))
        return self.replies.pop(0)


class SyncClient:
    """Answers each call and each pipeline with the next scripted reply; records what it was asked."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies
        self.record: Record = []

    def pipeline(self, transaction: bool = True) -> Any:
        self.record.append(("pipeline", transaction))
        return Pipe(self.record, self.replies)

    def __getattr__(self, name: str) -> Any:
        def called(*args: Any, **kwargs: Any) -> Any:
            self.record.append(("call", name, args, kwargs))
            reply = self.replies.pop(0)
            if isinstance(reply, Exception):
                raise reply
            return reply

        return called


class AsyncClient(SyncClient):
    def pipeline(self, transaction: bool = True) -> Any:
        pipe = super().pipeline(transaction)
        execute = pipe.execute

        async def executed(raise_on_error: bool = True) -> Any:
            return execute(raise_on_error)

        pipe.execute = executed
        return pipe

    def __getattr__(self, name: str) -> Any:
        called = super().__getattr__(name)

        async def awaited(*args: Any, **kwargs: Any) -> Any:
            return called(*args, **kwargs)

        return awaited


def sample(closed: list[bool]) -> Plan[str]:
    try:
        value = yield call("get", "k", keep=True)
        yield Emit(f"got {value}")
        replies = yield Batch([call("incr", "n"), call("expire", "n", 5)], transaction=True, raise_on_error=True)
        yield Emit(replies)
        more = yield Batch([call("get", "n")])
        return f"done {more}"
    finally:
        closed.append(True)


REPLIES = ["v", [1, True], ["1"]]
CALLS = [
    ("call", "get", ("k",), {"keep": True}),
    ("pipeline", True),
    ("queue", "incr", ("n",), {}),
    ("queue", "expire", ("n", 5), {}),
    ("execute", True),
    ("pipeline", False),
    ("queue", "get", ("n",), {}),
    ("execute", False),
]


def run(kind: str, client: SyncClient, plan: Plan[Any]) -> Any:
    if kind == "sync":
        return drivers.run_sync(client, plan)  # type: ignore[arg-type]
    return asyncio.run(drivers.run_async(client, plan))  # type: ignore[arg-type]


def stream(kind: str, client: SyncClient, plan: Plan[Any], first: int | None = None) -> list[Any]:
    """What the stream yields (the first ``first`` items only, then the caller stops)."""
    if kind == "sync":
        items: Iterator[Any] = drivers.stream_sync(client, plan)  # type: ignore[arg-type]
        return [item for _, item in zip(range(first or 99), items, strict=False)]

    async def collect() -> list[Any]:
        found = []
        items = drivers.stream_async(client, plan)  # type: ignore[arg-type]
        async for item in items:
            found.append(item)
            if len(found) == first:
                await items.aclose()  # type: ignore[attr-defined]
                break
        return found

    return asyncio.run(collect())


def client_for(kind: str, replies: list[Any]) -> SyncClient:
    return SyncClient(list(replies)) if kind == "sync" else AsyncClient(list(replies))


KINDS = pytest.mark.parametrize("kind", ["sync", "async"])


@KINDS
def test_run_makes_each_call_and_returns_the_result(kind: str) -> None:
    client, closed = client_for(kind, REPLIES), []
    assert run(kind, client, sample(closed)) == "done ['1']"
    assert client.record == CALLS
    assert closed == [True]


@KINDS
def test_stream_yields_what_the_plan_emits(kind: str) -> None:
    client, closed = client_for(kind, REPLIES), []
    assert stream(kind, client, sample(closed)) == ["got v", [1, True]]
    assert client.record == CALLS


@KINDS
def test_nothing_is_sent_before_the_stream_is_read(kind: str) -> None:
    client = client_for(kind, REPLIES)
    if kind == "sync":
        drivers.stream_sync(client, sample([]))  # type: ignore[arg-type]
    else:
        drivers.stream_async(client, sample([]))  # type: ignore[arg-type]
    assert client.record == []


@KINDS
def test_a_caller_that_stops_reading_closes_the_plan(kind: str) -> None:
    client, closed = client_for(kind, REPLIES), []
    assert stream(kind, client, sample(closed), first=1) == ["got v"]
    assert closed == [True]
    assert client.record == CALLS[:1]


@KINDS
def test_an_error_raised_by_a_call_ends_the_plan(kind: str) -> None:
    client, closed = client_for(kind, [ConnectionError("gone")]), []
    with pytest.raises(ConnectionError, match="gone"):
        run(kind, client, sample(closed))
    assert closed == [True]


def reads_back(closed: list[bool]) -> Plan[Any]:
    try:
        one = yield call("xread", {"s": "0-0"})
        many = yield Batch([call("get", "k"), call("xinfo_groups", "s"), call("incr", "n")])
        return one, many
    finally:
        closed.append(True)


BYTES_REPLIES = [
    [[b"s", [(b"1-0", {b"type": b"follow", b"bad": b"\xff"})]]],
    [b'{"a": 1}', [{"name": b"workers", "lag": 0}], 3],
]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_client_that_does_not_decode_hands_the_plan_text(kind: str) -> None:
    """A redis-py client without ``decode_responses`` answers bytes: the plan gets them as text (bytes that are
    not UTF-8 as lone surrogates, as tierpool's own clients decode), so a stream id is ``"1-0"``, not ``b"1-0"``."""
    closed: list[bool] = []
    client = (SyncClient if kind == "sync" else AsyncClient)([*BYTES_REPLIES])
    one, many = run(kind, client, reads_back(closed))
    assert one == [["s", [("1-0", {"type": "follow", "bad": "\udcff"})]]]
    assert many == ['{"a": 1}', [{"name": "workers", "lag": 0}], 3]
    assert closed == [True]
