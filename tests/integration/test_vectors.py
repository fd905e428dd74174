"""The conformance vectors of schemas/vectors/ run against the real Python client: each submit writes exactly the
envelope, keys and index entries its vector says (the TypeScript client's tests run the same files), or fails with
its error before anything is written. Format: schemas/vectors/README.md."""

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
from tierpool.model.keys import PoolKeys
from tierpool.model.spec import PoolSpec
from tierpool.protocol.submission import SubmitError, TaskRequest

VECTORS = Path(__file__).resolve().parents[2] / "schemas" / "vectors" / "submit.json"
BODY = json.loads(VECTORS.read_text(encoding="utf-8"))
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
    for name, ttl in expect.get("ttl", {}).items():
        left = await connection.pttl(keys.prefix + m.text(name))
        assert ttl - TTL_SLACK_MS <= left <= ttl, f"{name} lives {left} ms, expected about {ttl}"
    for name in expect.get("absent", []):
        assert not await connection.exists(keys.prefix + m.text(name)), f"{name} exists"
    for name, templates in expect.get("members", {}).items():
        members = await connection.zrange(keys.prefix + m.text(name), 0, -1)
        assert len(members) == len(templates) and all(map(m.matches, templates, members)), f"{name}: {members}"


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
