"""What the Python client and a real worker actually store, validated against the JSON Schemas in schemas/:
envelopes of every kind of submit, due-index members, result records of each status, dead letters and events.

Each is validated twice: against the published schema (open: readers must accept fields a newer protocol adds)
and against its closed variant (tierpool.protocol.wire_schemas.closed), which forbids any field the schema does not
name, so a field the code writes without documenting it fails here; and the same instance with one stray field
must fail the closed variant, or the check would prove nothing."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis
from jsonschema import Draft202012Validator

from tierpool import AsyncClient, NonRetryable, Task, TaskRequest
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.protocol.version import PROTOCOL
from tierpool.protocol.wire_schemas import closed

from .support import FAST_RECOVERY, ROOT, async_wait_until, make_pool, running_worker

pytestmark = pytest.mark.redis

TIERS = [
    {"name": "p0", "weight": 70, "sla": "30s"},
    {"name": "p1", "weight": 25, "tenantConcurrency": 2},
    {"name": "p2", "weight": 5},
]
LIMITS = [{"name": "ai", "perMinute": 6000, "tokensPerMinute": 60000}, {"name": "slow", "perMinute": 1}]


def schema(name: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((ROOT / "schemas" / name).read_text(encoding="utf-8")))


def valid(name: str, instance: Any) -> None:
    """``instance`` is valid against the published schema and its closed variant; with a stray field (an object's)
    it is still valid against the first, not against the second."""
    strict = Draft202012Validator(closed(name))
    for validator, what in ((schema(name), name), (strict, f"closed {name}")):
        errors = [f"{list(error.path)}: {error.message}" for error in validator.iter_errors(instance)]
        assert errors == [], f"{what} refuses {instance!r}: {errors}"
    if isinstance(instance, dict):
        stray = {**instance, "undocumented": "1"}
        assert schema(name).is_valid(stray), f"{name} is no longer open to new fields"
        assert not strict.is_valid(stray), f"closed {name} accepts an undocumented field"


def pool_of(name: str) -> AgentPool:
    return make_pool(name, tiers=TIERS, recovery=FAST_RECOVERY, rateLimits=LIMITS, tasks={"maxPayloadBytes": 1024})


async def entries(client: aioredis.Redis, keys: PoolKeys) -> list[dict[str, str]]:
    found = []
    for tier in ("p0", "p1", "p2"):
        found += [fields for _, fields in await client.xrange(keys.tier(tier))]
    return found


def member_fields(member: str) -> dict[str, str]:
    _, flat = json.loads(member)
    return dict(zip(flat[::2], flat[1::2], strict=True))


async def test_every_kind_of_submit_writes_a_valid_envelope(pool_name: str, client: aioredis.Redis) -> None:
    pool = pool_of(pool_name)
    keys = PoolKeys.parse(pool.ref)
    producer = AsyncClient(client, pool)
    await producer.submit_many(
        [
            TaskRequest("p0", {"plain": True}),
            TaskRequest("p0", ["chosen id"], task_id="order-42"),  # through the dedupe script
            TaskRequest("p2", None, deadline=timedelta(minutes=5), timeout=30),
            TaskRequest("p1", {"t": 1}, tenant="acme"),  # through the tenant gate
            TaskRequest("p0", "x", rate_limit="ai", cost=7),
        ]
    )
    await producer.submit("p0", {"later": True}, delay=60)
    await producer.submit("p1", {"later": True}, tenant="acme", not_before="2099-01-01T00:00:00Z")
    await producer.submit("p0", {"later": True}, task_id="dedupe-later", delay=timedelta(seconds=90))
    written = await entries(client, keys)
    assert len(written) == 5
    for fields in written:
        valid("envelope.schema.json", fields)
        assert fields["protocol"] == str(PROTOCOL)
    members = await client.zrange(keys.due, 0, -1)
    assert len(members) == 3
    for member in members:
        valid("due-member.schema.json", json.loads(member))
        valid("envelope.schema.json", member_fields(member))


async def handler(task: Task) -> Any:
    payload = task.payload if isinstance(task.payload, dict) else {}
    if payload.get("progress"):
        await task.progress({"pct": 50})
    if payload.get("fail"):
        raise NonRetryable("no")
    await asyncio.sleep(payload.get("sleep", 0))
    return {"ok": task.id}


async def seed_faults(client: aioredis.Redis, keys: PoolKeys, producer: AsyncClient) -> str:
    """Before the worker starts: a waiting task cancelled, a due member that is not an envelope, a malformed entry,
    an oversized one and one of a newer protocol. Returns the cancelled task's id."""
    waiting = await producer.submit("p0", {})
    await producer.cancel(waiting)
    await client.zadd(keys.due, {"not an envelope": 0})
    base = {"tier": "p0", "created_at": "1700000000000"}
    await client.xadd(keys.tier("p0"), {**base, "task_id": "malformed", "payload": "{nope"})
    await client.xadd(keys.tier("p0"), {**base, "task_id": "huge", "payload": json.dumps("x" * 5000)})
    await client.xadd(keys.tier("p0"), {**base, "task_id": "newer", "payload": "{}", "protocol": str(PROTOCOL + 1)})
    return waiting


async def test_what_a_worker_stores_is_valid(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = pool_of(pool_name)
    keys = PoolKeys.parse(pool.ref)
    producer = AsyncClient(client, pool)
    waiting = await seed_faults(client, keys, producer)
    later = await producer.submit("p0", {}, delay=60)
    async with running_worker(pool, redis_url, handler):
        ok = await producer.submit("p0", {"progress": True})
        failed = await producer.submit("p0", {"fail": True})
        running = await producer.submit("p0", {"progress": True, "sleep": 30})
        assert await async_wait_until(lambda: client.exists(keys.events(running)), 10)
        await producer.cancel(running)  # stopped by its worker
        await producer.cancel(later)  # taken out of the due set by CANCEL
        slow = await producer.submit_many([TaskRequest("p2", {}, rate_limit="slow") for _ in range(3)])
        outcomes = {task_id: await producer.wait_result(task_id, 20) for task_id in (ok, failed, running, later)}
        outcomes |= {task_id: await producer.wait_result(task_id, 20) for task_id in ("malformed", "huge", "newer")}
        outcomes[waiting] = await producer.wait_result(waiting, 20)
        await producer.wait_result(slow[0], 20)
        assert await async_wait_until(lambda: client.zcard(keys.throttled), 10)
        throttled = await client.zrange(keys.throttled, 0, -1)
    statuses = {task_id: outcome.status for task_id, outcome in outcomes.items()}
    assert statuses == {
        ok: "succeeded", failed: "dead_lettered", running: "cancelled", later: "cancelled", waiting: "cancelled",
        "malformed": "dead_lettered", "huge": "dead_lettered", "newer": "dead_lettered",
    }  # fmt: skip
    for task_id in outcomes:
        valid("result.schema.json", json.loads(await client.get(keys.result(task_id))))
    dead = [fields for _, fields in await client.xrange(keys.dlq)]
    assert {fields.get("task_id") for fields in dead} == {failed, "malformed", "huge", "newer", None}
    assert any("truncated" in fields for fields in dead) and any("traceback" in fields for fields in dead)
    for fields in dead:
        valid("dead-letter.schema.json", fields)
    events = [fields for task_id in (ok, running) for _, fields in await client.xrange(keys.events(task_id))]
    assert {fields["type"] for fields in events} == {"follow", "progress", "outcome"}
    for fields in events:
        valid("event.schema.json", fields)
    assert throttled
    for member in throttled:
        valid("due-member.schema.json", json.loads(member))
        valid("envelope.schema.json", member_fields(member))
