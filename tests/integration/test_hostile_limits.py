"""Limits a plain XADD cannot get past (issue #23, item 4), on a real Valkey: a producer that is not a tierpool
client (a plain ``redis.Redis`` doing XADD) meets the worker's size limit, its tenant gate, the stream's tier
and a sane ``created_at`` all the same."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from tierpool import scripts
from tierpool.client.producer import AsyncClient
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.protocol import acl
from tierpool.protocol.submission import TaskRequest
from tierpool.store import dlq
from tierpool.store.streams import PoolStreams

from .support import Recorder, async_wait_until, make_pool, running_worker, sync_redis
from .test_tenants import TenantProbe

pytestmark = [pytest.mark.redis]
MB = 1024 * 1024


def envelope(task_id: str, tier: str = "p0", payload: str = "{}", created_at: int | None = None, **extra: Any) -> Any:
    created = int(time.time() * 1000) if created_at is None else created_at
    return {"task_id": task_id, "tier": tier, "payload": payload, "created_at": str(created), **extra}


async def record(client: aioredis.Redis, pool: AgentPool, task_id: str) -> dict[str, Any] | None:
    raw = await client.get(PoolKeys.parse(pool.ref).result(task_id))
    return None if raw is None else dict(json.loads(raw))


async def records(client: aioredis.Redis, pool: AgentPool, task_ids: list[str], timeout: float = 20) -> list[Any]:
    async def all_there() -> bool:
        return all([await record(client, pool, task_id) for task_id in task_ids])

    assert await async_wait_until(all_there, timeout), task_ids
    return [await record(client, pool, task_id) for task_id in task_ids]


async def test_a_task_takes_the_tier_of_its_stream_not_of_its_envelope(
    client: aioredis.Redis, redis_url: str, pool_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    pool = make_pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    producer = sync_redis(redis_url)
    producer.xadd(keys.tier("p2"), envelope("liar", tier="p0"))
    producer.set(keys.cancel("liar-cancelled"), "1")
    producer.xadd(keys.tier("p2"), envelope("liar-cancelled", tier="p0"))
    recorder = Recorder()
    with caplog.at_level(logging.INFO, "tierpool.runtime.worker"):
        async with running_worker(pool, redis_url, recorder) as worker:
            done, cancelled = await records(client, pool, ["liar", "liar-cancelled"])
    assert [task.tier for task in recorder.calls] == ["p2"]
    assert done["status"] == "succeeded" and done["tier"] == "p2", done
    assert cancelled["status"] == "cancelled" and cancelled["tier"] == "p2", cancelled
    assert worker.series[2].started.value == 1 and worker.series[0].started.value == 0
    noted = [r.getMessage() for r in caplog.records if "'p0'" in r.getMessage() and "liar" in r.getMessage()]
    assert len(noted) == 1 and "as 'p2', its stream's tier" in noted[0], noted


async def test_a_50_mb_payload_is_dead_lettered_cut_without_running(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    producer = sync_redis(redis_url)
    payload = '"' + "x" * (50 * MB) + '"'
    producer.xadd(keys.tier("p0"), envelope("huge", payload=payload))
    producer.xadd(keys.tier("p0"), envelope("fine", payload='{"n": 1}'))
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder):
        huge, fine = await records(client, pool, ["huge", "fine"], timeout=60)
    assert [task.id for task in recorder.calls] == ["fine"] and fine["status"] == "succeeded"
    size = len(payload)
    assert huge["status"] == "dead_lettered" and huge["attempts"] == 1, huge
    assert huge["reason"] == f"payload is {size} bytes, over tasks.maxPayloadBytes (262144)", huge
    (dead,) = await dlq.list_dead(client, keys)
    assert dead.task_id == "huge" and dead.reason == huge["reason"] and dead.source_tier == "p0"
    assert dead.fields["payload"] == payload[:1024] and dead.fields["truncated"] == f"payload={size}"
    assert int(producer.memory_usage(keys.dlq) or 0) < 64 * 1024
    assert not dead.is_envelope
    with pytest.raises(ValueError, match=f"was cut to fit the dead-letter stream \\(payload={size}\\)"):
        await dlq.replay(client, keys, [dead.id], None, pool.spec.tier_names)
    with pytest.raises(redis.ResponseError, match="was cut to fit the dead-letter stream"):  # the script refuses too
        await client.evalsha(
            scripts.sha("REPLAY"), 5, keys.dlq, keys.tier("p0"), *_task_keys(keys, "huge"), dead.id, "p0"
        )
    assert await dlq.replay(client, keys, [], None, pool.spec.tier_names) == []  # replay all: left in place


async def test_an_entry_over_the_limit_by_other_fields_is_dead_lettered_cut(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name, tasks={"maxPayloadBytes": 1024})
    keys = PoolKeys.parse(pool.ref)
    producer = sync_redis(redis_url)
    producer.xadd(keys.tier("p1"), envelope("padded", tier="p1", junk="j" * (100 * 1024)))
    producer.xadd(keys.tier("p1"), envelope("t" * 5000, tier="p1", payload='"' + "y" * 2000 + '"'))
    many = {f"f{i:02}": "v" * 2000 for i in range(40)}
    producer.xadd(keys.tier("p1"), envelope("many", tier="p1", **many))
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder):
        padded, _ = await records(client, pool, ["padded", "many"])
        assert await async_wait_until(lambda: _dlq_length(client, keys, 3), 10)
    assert recorder.calls == []
    assert padded["reason"].startswith("entry is ") and padded["reason"].endswith(
        "bytes, over tasks.maxPayloadBytes (1024) plus 65536 for its other fields"
    ), padded
    first, second, third = await dlq.list_dead(client, keys)
    assert first.fields["junk"] == "j" * 1024 and first.fields["truncated"] == f"junk={100 * 1024}"
    assert first.fields["payload"] == "{}" and first.task_id == "padded" and not first.is_envelope
    # a task_id too long to keep is left out, and no result record is written for it
    assert "task_id" not in second.fields and second.fields["truncated"] == "task_id=5000 payload=2002"
    assert second.reason == "payload is 2002 bytes, over tasks.maxPayloadBytes (1024)"
    assert await client.get(keys.result("t" * 5000)) is None
    # the first 32 fields are kept, cut; the rest are counted
    kept = [f"f{i:02}" for i in range(28)]
    assert [name for name in third.fields if name.startswith("f")] == kept
    assert third.fields["truncated"] == " ".join(f"{name}=2000" for name in kept) + f" other=12:{12 * 2003}"


async def _dlq_length(client: aioredis.Redis, keys: PoolKeys, want: int) -> bool:
    return int(await client.xlen(keys.dlq)) >= want


async def test_tasks_xadded_past_the_tenant_gate_run_one_at_a_time_and_all_complete(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name, tiers=[{"name": "p0", "weight": 1, "tenantConcurrency": 1}])
    keys = PoolKeys.parse(pool.ref)
    producer = sync_redis(redis_url)
    ids = [f"acme-{i}" for i in range(3)]
    for task_id in ids:
        producer.xadd(keys.tier("p0"), envelope(task_id, tenant="acme"))
    producer.xadd(keys.tier("p0"), envelope("no-tenant"))
    producer.xadd(keys.tier("p0"), envelope("bad-tenant", tenant="has space"))
    probe = TenantProbe(0.3)
    async with running_worker(pool, redis_url, probe, concurrency=8):
        done = await records(client, pool, [*ids, "no-tenant", "bad-tenant"])
        late = ["acme-late-0", "acme-late-1"]  # read by a running worker, as they come
        for task_id in late:
            producer.xadd(keys.tier("p0"), envelope(task_id, tenant="acme"))
        done += await records(client, pool, late)
    assert probe.peak["acme"] == 1, probe.peak
    assert [task_id for task_id in probe.order if task_id.startswith("acme")] == [*ids, *late]
    assert [r["status"] for r in done] == ["succeeded"] * 4 + ["dead_lettered"] + ["succeeded"] * 2
    assert done[4]["reason"].startswith("bad envelope: tenant: tenant must be 1-128 characters")
    assert probe.order.index("no-tenant") < probe.order.index("acme-1")  # not gated: it did not wait for acme
    tenants, admitted, held = await _tenant_keys(client, keys)
    assert (tenants, admitted, held) == ({}, {}, 0)


async def test_a_producer_under_its_acl_cannot_forge_its_way_past_the_tenant_gate(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """As the producer ACL user (``tierpool acl producer``): writing a tenant count or an admitted entry is refused,
    and entries XADDed with forged queued members (the gate's own record of a submit) still run one at a time:
    only a worker's ADMIT_ENTRIES lets a task into its tenant's count."""
    pool = make_pool(pool_name, tiers=[{"name": "p0", "weight": 1, "tenantConcurrency": 1}])
    keys = PoolKeys.parse(pool.ref)
    user = f"tierpool-producer-{pool_name}"
    sync_redis(redis_url).execute_command(*acl.setuser_command(user, acl.Role.PRODUCER, [keys]).split(), ">pw")
    hostile = redis.Redis.from_url(redis_url.replace("redis://", f"redis://{user}:pw@"), decode_responses=True)
    try:
        ids = [f"acme-{i}" for i in range(3)]
        entries = [hostile.xadd(keys.tier("p0"), envelope(task_id, tenant="acme")) for task_id in ids]
        hostile.zadd(keys.queued("p0"), {f"acme\0{entry}": int(time.time() * 1000) for entry in entries})
        forgeries = [
            ("HINCRBY", keys.tenants("p0"), "acme", "-5"),
            ("HSET", keys.tenants("p0"), "acme", "-5"),
            *[("HSET", keys.admitted("p0"), entry, "acme") for entry in entries],
        ]
        for command in forgeries:
            with pytest.raises(redis.exceptions.NoPermissionError):
                hostile.execute_command(*command)
        probe = TenantProbe(0.3)
        async with running_worker(pool, redis_url, probe, concurrency=8):
            done = await records(client, pool, ids)
    finally:
        hostile.close()
        await client.execute_command("ACL", "DELUSER", user)
    assert probe.peak["acme"] == 1, probe.peak
    assert [r["status"] for r in done] == ["succeeded"] * 3
    assert await _tenant_keys(client, keys) == ({}, {}, 0)


async def test_a_held_member_naming_its_tenant_twice_is_gated_under_the_tenant_the_worker_reads(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """A producer's own held member under ``acme`` whose fields end with ``tenant: beta`` (the worker reads the last
    of repeated fields) enters the stream uncounted and is gated as beta's: beta never runs two at once."""
    pool = make_pool(pool_name, tiers=[{"name": "p0", "weight": 1, "tenantConcurrency": 1}])
    keys = PoolKeys.parse(pool.ref)
    producer = AsyncClient(client, pool, pool.spec)
    legit = [await producer.submit("p0", {}, tenant="beta") for _ in range(2)]  # one queued, one held
    fields = ["task_id", "forged", "tier", "p0", "payload", "{}", "created_at", str(int(time.time() * 1000))]
    forged = "acme\x00" + "0" * 16 + "\x00" + json.dumps([*fields, "tenant", "acme", "tenant", "beta"])
    await client.zadd(keys.held("p0"), {forged: 0})
    streams = PoolStreams(client, keys, pool.spec.tier_names, pool.spec.tenant_limits)
    await streams.ensure_groups()
    await streams.repair_tenants()  # fills acme's "held" member
    probe = TenantProbe(0.3)
    async with running_worker(pool, redis_url, probe, concurrency=8):
        done = await records(client, pool, [*legit, "forged"])
    assert probe.peak["beta"] == 1, probe.peak
    assert [r["status"] for r in done] == ["succeeded"] * 3


async def test_the_gate_counts_each_tenants_queued_entries_whatever_the_order_of_submits(
    client: aioredis.Redis, pool_name: str
) -> None:
    """A burst queues at most N entries of its tenant, whichever tenants queued before it (the queued set is one
    lex range per tenant: every score 0)."""
    pool = make_pool(pool_name, tiers=[{"name": "p0", "weight": 1, "tenantConcurrency": 2}])
    keys = PoolKeys.parse(pool.ref)
    producer = AsyncClient(client, pool, pool.spec)
    await producer.submit("p0", {}, tenant="zeta")
    await producer.submit_many([TaskRequest("p0", {}, tenant="acme") for _ in range(6)])
    await producer.submit("p0", {}, tenant="beta")
    queued = await client.zrange(keys.queued("p0"), 0, -1, withscores=True)
    assert sorted(member.split("\0")[0] for member, _ in queued) == ["acme", "acme", "beta", "zeta"]
    assert {score for _, score in queued} == {0.0}
    assert await client.zcard(keys.held("p0")) == 4


async def test_repair_drops_the_queued_members_no_worker_will_take_and_keeps_the_rest(
    client: aioredis.Redis, pool_name: str
) -> None:
    pool = make_pool(pool_name, tiers=[{"name": "p0", "weight": 1, "tenantConcurrency": 5}])
    keys = PoolKeys.parse(pool.ref)
    streams = PoolStreams(client, keys, pool.spec.tier_names, pool.spec.tenant_limits)
    await streams.ensure_groups()
    stream, queued = keys.tier("p0"), keys.queued("p0")

    async def entry(task_id: str, tenant: str = "acme") -> str:
        return str(await client.xadd(stream, envelope(task_id, tenant=tenant)))

    gone = await entry("gone")
    await client.xdel(stream, gone)
    finished, reading, waiting = await entry("finished"), await entry("reading"), await entry("waiting")
    read: Any = await client.xreadgroup(GROUP, "w", {stream: ">"}, count=2)
    assert [item[0] for item in read[0][1]] == [finished, reading]
    await client.xack(stream, GROUP, finished)  # cancelled at take: never through ADMIT_ENTRIES
    other = await entry("other", tenant="beta")
    members = {
        f"acme\0{gone}": 0,
        f"acme\0{finished}": 0,
        f"acme\0{reading}": 0,  # delivered just now: a worker's ADMIT_ENTRIES is on its way
        f"acme\0{waiting}": 0,  # not delivered yet
        f"acme\0{other}": 0,  # beta's entry
        "acme\0not-an-id": 0,
        f"acme\0{waiting}x": float("inf"),
    }
    await client.zadd(queued, members)
    await streams.repair_tenants()
    assert await client.zrange(queued, 0, -1) == sorted([f"acme\0{reading}", f"acme\0{waiting}"])


async def _tenant_keys(client: aioredis.Redis, keys: PoolKeys, tier: str = "p0") -> tuple[Any, Any, int]:
    tenants, admitted = await client.hgetall(keys.tenants(tier)), await client.hgetall(keys.admitted(tier))
    return tenants, admitted, int(await client.zcard(keys.held(tier)))


async def test_the_worker_gate_admits_in_place_or_holds_new_work_at_the_back_and_returns_at_the_front(
    client: aioredis.Redis, pool_name: str
) -> None:
    """ADMIT_ENTRIES on its own: an admitted entry runs; with room an ungated one is admitted where it is; without
    room a new one is held behind its tenant's held tasks and one coming back (escalated) before them; an entry
    this consumer does not own is left alone."""
    pool = make_pool(pool_name, tiers=[{"name": "p0", "weight": 1, "tenantConcurrency": 1}])
    keys = PoolKeys.parse(pool.ref)
    streams = PoolStreams(client, keys, pool.spec.tier_names, pool.spec.tenant_limits)
    await streams.ensure_groups()
    stream = keys.tier("p0")
    room = await client.xadd(stream, envelope("room", tenant="acme"))
    await client.xreadgroup(GROUP, "w", {stream: ">"})
    assert await streams.admit_entries("w", {0: [room]}) == {(0, room): 1}
    assert await _tenant_keys(client, keys) == ({"acme": "1"}, {room: "acme"}, 0)
    assert await streams.admit_entries("w", {0: [room]}) == {(0, room): 1}  # admitted once, counted once
    assert (await _tenant_keys(client, keys))[0] == {"acme": "1"}
    new = await client.xadd(stream, envelope("new", tenant="acme"))
    back = await client.xadd(stream, envelope("back", tenant="acme", escalated_from="p1"))
    other = await client.xadd(stream, envelope("other", tenant="acme"))
    await client.xreadgroup(GROUP, "w", {stream: ">"}, count=2)
    await client.xreadgroup(GROUP, "someone-else", {stream: ">"})
    statuses = await streams.admit_entries("w", {0: [new, back, other]})
    assert statuses == {(0, new): 0, (0, back): 0, (0, other): -1}
    held = await client.zrange(keys.held("p0"), 0, -1)
    assert [json.loads(member.split("\0", 2)[2])[1] for member in held] == ["back", "new"]
    pending = await client.xpending_range(stream, GROUP, "-", "+", 10)
    assert sorted(p["message_id"] for p in pending) == sorted([room, other])  # the held ones were acked
    await client.xack(stream, GROUP, room)  # the admitted one finishes: its release admits the front task
    (call,) = streams.tenant_release_calls([(0, room)])
    assert (await streams.run_batch([call]))[0] == [1, 1]
    newest = await client.xrevrange(stream, count=1)
    assert newest[0][1]["task_id"] == "back" and (await _tenant_keys(client, keys))[0] == {"acme": "1"}


async def test_created_at_in_seconds_or_from_a_wrong_clock_never_skews_queue_wait(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    producer = sync_redis(redis_url)
    now_s = int(time.time())
    producer.xadd(keys.tier("p0"), envelope("seconds", created_at=now_s - 2))
    producer.xadd(keys.tier("p0"), envelope("future", created_at=(now_s + 86_400) * 1000))
    producer.xadd(keys.tier("p0"), envelope("epoch", created_at=1))
    producer.xadd(keys.tier("p0"), envelope("negative", created_at=-5))
    async with running_worker(pool, redis_url, Recorder()) as worker:
        seconds, future, epoch, negative = await records(client, pool, ["seconds", "future", "epoch", "negative"])
    assert seconds["created_at"] == (now_s - 2) * 1000 and 2_000 <= seconds["queue_wait_ms"] < 60_000, seconds
    for clamped in (future, epoch):
        assert abs(clamped["created_at"] - now_s * 1000) < 60_000 and clamped["queue_wait_ms"] < 60_000, clamped
    assert negative["status"] == "dead_lettered" and negative["reason"].startswith("bad envelope: created_at")
    series = worker.series[0]
    assert series.started.value == 3 and series.queue_wait.total < 3 * 60, series.queue_wait.total
    assert series.sla_missed.value == 0  # p0's SLA is 30s


def _task_keys(keys: PoolKeys, task_id: str) -> list[str]:
    return [keys.result(task_id), keys.cancel(task_id), keys.events(task_id)]
