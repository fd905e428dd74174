"""The conformance vectors of schemas/vectors/ run against the real Python client (the TypeScript client's tests run
the same files; format: schemas/vectors/README.md): each submit writes exactly the envelope, keys and index entries
its vector says, or fails with its error before anything is written; each cancel reports and writes what its vector
says; each result record and event stream reads back, through result, wait_result and follow, as its vector says."""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.client.tracking import CancelReport
from tierpool.model.keys import PoolKeys
from tierpool.model.spec import PoolSpec
from tierpool.protocol.submission import SubmitError, TaskRequest, TaskResult
from tierpool.protocol.task_state import TaskEvent

VECTORS = Path(__file__).resolve().parents[2] / "schemas" / "vectors"
BODY = json.loads((VECTORS / "submit.json").read_text(encoding="utf-8"))
CANCELS = json.loads((VECTORS / "cancel.json").read_text(encoding="utf-8"))
RESULTS = json.loads((VECTORS / "results.json").read_text(encoding="utf-8"))
TOKEN = re.compile(r"<(any|task-id|entry-id|now(?:\+[0-9]+)?)>")
CLOCK_SLACK_MS = 2000
"""A ``<now…>`` value lies within this long of the submit (Redis' clock writes due times, the client's the rest)."""
TTL_SLACK_MS = 5000


def _request(given: dict[str, Any]) -> TaskRequest:
    """The vector's input as the Python client's request (``*_s`` are seconds)."""
    deadline = given.get("deadline_s")
    return TaskRequest(
        given["tier"],
        given["payload"],
        given.get("task_id"),
        timedelta(seconds=deadline) if deadline is not None else None,
        given.get("timeout_s"),
        delay=given.get("delay_s"),
        not_before=given.get("not_before"),
        rate_limit=given.get("rate_limit"),
        cost=given.get("cost"),
        tenant=given.get("tenant"),
    )


class Matcher:
    """Matches a vector's template against what was written: literal text with placeholders, ``<task-id>`` and
    ``<entry-id>`` bound to the submit's task_id and the entry it wrote, ``<now>`` and ``<now+N>`` a time in ms
    within ``CLOCK_SLACK_MS`` of the submit (plus N), ``<any>`` anything."""

    def __init__(self, before_ms: int, after_ms: int, task_id: str) -> None:
        self.before, self.after = before_ms, after_ms
        self.bound = {"task-id": task_id}

    def text(self, template: str) -> str:
        """The template with its bound placeholders filled in (for key names)."""
        return TOKEN.sub(lambda m: self.bound.get(m.group(1), m.group(0)), template)

    def matches(self, template: str, actual: str) -> bool:
        parts, pattern, times = TOKEN.split(template), "", []
        for i, part in enumerate(parts):
            if i % 2 == 0:
                pattern += re.escape(part)
            elif part in self.bound:
                pattern += re.escape(self.bound[part])
            elif part == "any":
                pattern += "(?:.*)"
            elif part == "entry-id":
                pattern += "(?:[0-9]+-[0-9]+)"
            else:
                pattern += "([0-9]+)"
                times.append(int(part.partition("+")[2] or 0))
        found = re.fullmatch(pattern, actual, re.DOTALL)
        if found is None:
            return False
        return all(
            self.before + plus - CLOCK_SLACK_MS <= int(value) <= self.after + plus + CLOCK_SLACK_MS
            for value, plus in zip(found.groups(), times, strict=True)
        )

    def value(self, template: Any, actual: Any) -> bool:
        """A JSON value: a text with a placeholder matches a text or a whole number as its digits; else equal."""
        if isinstance(template, str) and TOKEN.search(template) and type(actual) in (str, int):
            return self.matches(template, str(actual))
        return bool(template == actual)

    def record(self, expected: dict[str, Any], actual: dict[str, Any]) -> None:
        assert sorted(actual) == sorted(expected), f"fields {sorted(actual)}, expected {sorted(expected)}"
        for name, template in expected.items():
            assert self.value(template, actual[name]), f"{name}={actual[name]!r} does not match {template!r}"

    def fields(self, expected: dict[str, str], actual: dict[str, str]) -> None:
        assert sorted(actual) == sorted(expected), f"fields {sorted(actual)}, expected {sorted(expected)}"
        for name, template in expected.items():
            assert self.matches(template, actual[name]), f"{name}={actual[name]!r} does not match {template!r}"


async def _check(connection: aioredis.Redis, keys: PoolKeys, expect: dict[str, Any], m: Matcher) -> None:
    written = expect["written"]
    key = keys.prefix + written["key"]
    if written["kind"] == "stream":
        entries = await connection.xrange(key)
        assert len(entries) == 1, f"{key} holds {len(entries)} entries"
        entry_id, fields = entries[0]
        m.bound["entry-id"] = entry_id
        m.fields(written["fields"], fields)
    else:
        members = await connection.zrange(key, 0, -1, withscores=True)
        assert len(members) == 1, f"{key} holds {len(members)} members"
        member, score = members[0]
        tier, flat = json.loads(member)
        assert tier == written["tier"]
        assert m.matches(written["score"], str(int(score)))
        m.fields(written["fields"], dict(zip(flat[::2], flat[1::2], strict=True)))
    where = await connection.hget(keys.where, m.bound["task-id"])
    assert where is not None and m.matches(expect["where"], where), f"where {where!r}"
    await _check_common(connection, keys, expect, m)


@pytest.mark.parametrize("vector", BODY["vectors"], ids=[v["name"] for v in BODY["vectors"]])
async def test_vector(client: aioredis.Redis, pool_name: str, vector: dict[str, Any]) -> None:
    keys = PoolKeys("vectors", pool_name)
    producer = AsyncClient(client, keys, PoolSpec.model_validate(BODY["spec"]))
    request = _request(vector["input"])
    if "error" in vector:
        with pytest.raises(SubmitError, match=re.escape(vector["error"])):
            await producer.submit_many([request])
        assert await client.keys(f"{keys.prefix}*") == []
        return
    before = int(time.time() * 1000)
    ids = [(await producer.submit_many([request]))[0] for _ in range(vector.get("repeat", 1))]
    after = int(time.time() * 1000)
    assert len(set(ids)) == 1
    matcher = Matcher(before, after, ids[0])
    expected_id = vector["expect"]["task_id"]
    if expected_id == "<task-id>":  # generated: a UUID4 as 32 hex digits
        assert re.fullmatch("[0-9a-f]{32}", ids[0]), ids[0]
    else:
        assert ids[0] == expected_id
    await _check(client, keys, vector["expect"], matcher)


def test_vectors_cover_every_submit_script() -> None:
    """The vectors write through each of the four submit paths and refuse each kind of bad input."""
    inputs = [v["input"] for v in BODY["vectors"] if "error" not in v]
    assert any("delay_s" in i for i in inputs) and any("not_before" in i for i in inputs)
    assert any("task_id" in i for i in inputs) and any("tenant" in i and i["tier"] == "p0" for i in inputs)
    assert sum("error" in v for v in BODY["vectors"]) >= 8


def result_json(result: TaskResult | None) -> dict[str, Any] | None:
    """A result as the vectors write it (every field, null when absent)."""
    if result is None:
        return None
    return {**{name: getattr(result, name) for name in result.__dataclass_fields__}, "ok": result.ok}


def event_json(event: TaskEvent) -> dict[str, Any]:
    return {"type": event.type, "at": event.at, "data": event.data, "status": event.status, "final": event.final}


def report_json(report: CancelReport) -> dict[str, Any]:
    return {
        "state": str(report.state), "found": report.found, "cancelled": report.cancelled,
        "result": result_json(report.result),
    }  # fmt: skip


async def _check_keys(connection: aioredis.Redis, keys: PoolKeys, expect: dict[str, Any], m: Matcher) -> None:
    """The keys a cancel or a follower wrote (or left alone), as a vector's ``expect`` gives them."""
    for name, template in expect.get("strings", {}).items():
        value = await connection.get(keys.prefix + m.text(name))
        assert value is not None and m.matches(template, value), f"{name}={value!r}"
    for name, record in expect.get("records", {}).items():
        text = await connection.get(keys.prefix + m.text(name))
        assert text is not None, f"{name} is missing"
        m.record(record, json.loads(text))
    for name, events in expect.get("events", {}).items():
        entries = await connection.xrange(keys.prefix + m.text(name))
        assert len(entries) == len(events), f"{name}: {entries}"
        for (_, fields), template in zip(entries, events, strict=True):
            m.fields(template, fields)
    for name, count in expect.get("entries", {}).items():
        assert await connection.xlen(keys.prefix + m.text(name)) == count, name
    if "where" in expect:
        where = await connection.hget(keys.where, m.bound["task-id"])
        template = expect["where"]
        assert (where is None) if template is None else (where is not None and m.matches(template, where)), where
    await _check_common(connection, keys, expect, m)


async def _check_common(connection: aioredis.Redis, keys: PoolKeys, expect: dict[str, Any], m: Matcher) -> None:
    """A vector's ``ttl``, ``absent`` and ``members``."""
    for name, ttl in expect.get("ttl", {}).items():
        left = await connection.pttl(keys.prefix + m.text(name))
        assert ttl - TTL_SLACK_MS <= left <= ttl, f"{name} lives {left} ms, expected about {ttl}"
    for name in expect.get("absent", []):
        assert not await connection.exists(keys.prefix + m.text(name)), f"{name} exists"
    for name, templates in expect.get("members", {}).items():
        members = await connection.zrange(keys.prefix + m.text(name), 0, -1)
        assert len(members) == len(templates) and all(map(m.matches, templates, members)), f"{name}: {members}"


@pytest.mark.parametrize("vector", CANCELS["vectors"], ids=[v["name"] for v in CANCELS["vectors"]])
async def test_cancel_vector(client: aioredis.Redis, pool_name: str, vector: dict[str, Any]) -> None:
    keys = PoolKeys("vectors", pool_name)
    producer = AsyncClient(client, keys, PoolSpec.model_validate(CANCELS["spec"]))
    before = int(time.time() * 1000)
    task_id = vector.get("task_id") or (await producer.submit_many([_request(vector["submit"])]))[0]
    if "record" in vector:
        await client.set(keys.result(task_id), json.dumps(vector["record"]))
    if "xadd" in vector:
        await client.xadd(keys.tier(vector["xadd"]["tier"]), vector["xadd"]["fields"])
    if "zadd" in vector:
        score = int(time.time() * 1000) + vector["zadd"]["in_ms"]
        await client.zadd(keys.prefix + vector["zadd"]["key"], {vector["zadd"]["member"]: score})
    if "hset" in vector:
        await client.hset(keys.prefix + vector["hset"]["key"], mapping=vector["hset"]["fields"])
    tier = (vector.get("submit") or vector.get("xadd") or {}).get("tier")
    if "take" in vector:
        stream = keys.tier(tier)
        await client.xgroup_create(stream, keys.group, "0")
        assert await client.xreadgroup(keys.group, vector["take"], {stream: ">"}, count=1)
    if vector.get("followed"):
        with pytest.raises(TimeoutError):
            await producer.wait_result(task_id, 0.1)
    m = Matcher(before, 0, task_id)
    entries = await client.xrange(keys.tier(tier)) if tier else []
    if entries:
        m.bound["entry-id"] = entries[0][0]
    report = await producer.cancel(task_id)
    m.after = int(time.time() * 1000)
    assert report_json(report) == vector["expect"]["report"]
    await _check_keys(client, keys, vector["expect"], m)


async def _collect(producer: AsyncClient, task_id: str, timeout: float, into: list[dict[str, Any]]) -> None:
    """Follow the task, each event into ``into``, until it ends (a TimeoutError for a task without a result)."""
    async for item in producer.follow(task_id, timeout):
        assert isinstance(item, TaskEvent)
        into.append(event_json(item))


@pytest.mark.parametrize("vector", RESULTS["vectors"], ids=[v["name"] for v in RESULTS["vectors"]])
async def test_result_vector(client: aioredis.Redis, pool_name: str, vector: dict[str, Any]) -> None:
    keys = PoolKeys("vectors", pool_name)
    producer = AsyncClient(client, keys, PoolSpec.model_validate(RESULTS["spec"]))
    task_id, expect = vector["task_id"], vector["expect"]
    if "record" in vector:
        await client.set(keys.result(task_id), json.dumps(vector["record"]), px=3_600_000)
    for fields in vector["events"]:
        await client.xadd(keys.events(task_id), fields)
    before = int(time.time() * 1000)
    assert result_json(await producer.result(task_id)) == expect["result"]
    timeout = vector.get("timeout_s", 5)
    followed: list[dict[str, Any]] = []
    if expect["result"] is None:
        with pytest.raises(TimeoutError):
            await producer.wait_result(task_id, timeout)
        with pytest.raises(TimeoutError):
            await _collect(producer, task_id, timeout, followed)
        assert followed == expect["follow"]
    else:
        assert result_json(await producer.wait_result(task_id, timeout)) == expect["result"]
        items = [item async for item in producer.follow(task_id, timeout)]
        assert isinstance(items[-1], TaskResult) and result_json(items[-1]) == expect["result"]
        assert all(isinstance(item, TaskEvent) for item in items[:-1])
        assert [event_json(item) for item in items[:-1] if isinstance(item, TaskEvent)] == expect["follow"]
    m = Matcher(before, int(time.time() * 1000), task_id)
    await _check_keys(client, keys, {"events": {"events:<task-id>": expect.get("events", vector["events"])}}, m)
    await _check_common(client, keys, expect, m)
