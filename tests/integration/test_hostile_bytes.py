"""Entries whose bytes are not UTF-8, written by a plain producer (issue #23), against a real Valkey: each is
dead-lettered once, with a reason naming the field, its bytes kept; no loop restarts and nothing else waits."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.protocol.task_state import CancelState
from tierpool.runtime.worker import Worker
from tierpool.store.connection import RedisSettings, async_client
from tierpool.store.observe import observe

from .support import FAST_RECOVERY, Recorder, async_wait_until, make_pool, running_worker
from .test_cli import tierpool

pytestmark = pytest.mark.redis

BAD = {  # what is not UTF-8 -> the fields that make it so, each with bytes no UTF-8 decoder accepts
    "payload": {b"payload": b"\xff\xfe"},
    "task_id": {b"task_id": b"bad-\xff"},
    "tier": {b"tier": b"p\xc3"},  # a two-byte sequence cut short
    "field name": {b"\xff\xfe": b"1"},
}
REASONS = {
    "payload": "bad envelope: not UTF-8: payload (byte 0xff at 0)",
    "task_id": "bad envelope: not UTF-8: task_id (byte 0xff at 4)",
    "tier": "bad envelope: not UTF-8: tier (byte 0xc3 at 1)",
    "field name": "bad envelope: not UTF-8: field name b'\\xff\\xfe'",
}


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A plain producer's client: bytes in, bytes out, no decoding."""
    connection = aioredis.Redis.from_url(redis_url)
    yield connection
    await connection.aclose()


def raw_envelope(what: str) -> dict[bytes, bytes]:
    """A valid envelope but for the bytes of ``what`` (see BAD)."""
    return {b"task_id": f"bad-{what}".encode(), b"tier": b"p0", b"payload": b"{}", b"created_at": b"1"} | BAD[what]


def pool_file(tmp_path: Path, pool: AgentPool) -> str:
    path = tmp_path / "pool.json"
    path.write_text(pool.model_dump_json(by_alias=True))
    return str(path)


async def all_succeeded(client: aioredis.Redis, keys: PoolKeys, task_ids: list[str]) -> bool:
    records = await client.mget([keys.result(task_id) for task_id in task_ids])
    return all(record and json.loads(record)["status"] == "succeeded" for record in records)


def no_restarts(worker: Worker) -> dict[str, int]:
    return {name: state.failures for name, state in worker.loops.loops.items() if state.failures}


async def test_bad_entries_at_the_head_are_dead_lettered_once_and_every_other_task_runs(
    client: aioredis.Redis, raw: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    keys = PoolKeys.parse(pool.ref)
    producer = AsyncClient(client, pool, pool.spec)
    bad_ids = {what: await raw.xadd(keys.tier("p0"), raw_envelope(what)) for what in BAD}
    good = [await producer.submit("p0", {"i": i}) for i in range(20)]  # in the same reads as the bad ones
    good += [await producer.submit("p1", {"i": i}) for i in range(20)]
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder) as worker:
        assert await async_wait_until(lambda: all_succeeded(client, keys, good), 10), "a good task got no outcome"
        assert await async_wait_until(lambda: _length(client, keys.dlq, len(BAD)), 5)
        await asyncio.sleep(0.5)  # a few more passes of every loop
        assert no_restarts(worker) == {}
        assert worker.reads.handed_back == 0
    assert sorted(task.id for task in recorder.calls) == sorted(good)
    dead = {entry_id.decode(): fields for entry_id, fields in await raw.xrange(keys.dlq)}
    assert len(dead) == len(BAD), dead
    by_source = {fields[b"source_id"].decode(): fields for fields in dead.values()}
    for what, entry_id in bad_ids.items():
        letter = by_source[entry_id.decode()]
        assert letter[b"reason"].decode() == REASONS[what]
        assert {k: v for k, v in letter.items() if k in raw_envelope(what)} == raw_envelope(what)  # byte for byte
    record = json.loads(await client.get(keys.result("bad-payload")) or "{}")
    assert record["status"] == "dead_lettered" and record["reason"] == REASONS["payload"]
    assert b'"status":"dead_lettered"' in (await raw.get(keys.result("").encode() + b"bad-\xff") or b"")
    for tier in ("p0", "p1"):
        assert (await client.xpending(keys.tier(tier), GROUP))["pending"] == 0


async def _length(client: aioredis.Redis, stream: str, count: int) -> bool:
    return int(await client.xlen(stream)) >= count


@pytest.mark.parametrize(("deliveries", "recorded"), [(1, 2), (5, 5)], ids=["claimed", "past-maxDeliveries"])
async def test_a_bad_entry_pending_for_a_dead_consumer_is_dead_lettered_by_reclaim(
    client: aioredis.Redis, raw: aioredis.Redis, redis_url: str, pool_name: str, deliveries: int, recorded: int
) -> None:
    """The claim's reply held the bad bytes: every reclaim pass failed, and the entry was adopted again forever.
    Claimed, it is dead-lettered as it is launched (with its deliveries, as any malformed entry); past
    maxDeliveries, by the claimer at once (the claim's own delivery not counted), with the same reason."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)  # claimIdle 1 s, maxDeliveries 5
    keys = PoolKeys.parse(pool.ref)
    stream = keys.tier("p0")
    await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    entry_id = await raw.xadd(stream, raw_envelope("payload"))
    await raw.xreadgroup(GROUP, "dead-worker", {stream: ">"}, count=1)
    await raw.xclaim(stream, GROUP, "dead-worker", 0, [entry_id], retrycount=deliveries, justid=True)
    good = [await AsyncClient(client, pool, pool.spec).submit("p0", {}) for _ in range(3)]
    await asyncio.sleep(1.1)  # idle past claimIdle
    async with running_worker(pool, redis_url, Recorder()) as worker:
        assert await async_wait_until(lambda: _length(client, keys.dlq, 1), 10), "never dead-lettered"
        assert await async_wait_until(lambda: all_succeeded(client, keys, good), 5)
        await asyncio.sleep(2.5)  # past two more claimIdle: no second dead letter, no restart
        assert no_restarts(worker) == {}
    [(_, letter)] = await raw.xrange(keys.dlq)
    assert letter[b"reason"].decode() == REASONS["payload"] and letter[b"payload"] == b"\xff\xfe"
    assert letter[b"source_id"] == entry_id and int(letter[b"deliveries"]) == recorded
    assert (await client.xpending(stream, GROUP))["pending"] == 0


async def test_the_due_time_mover_brings_a_bad_member_to_the_dead_letter_stream(
    client: aioredis.Redis, raw: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    keys = PoolKeys.parse(pool.ref)
    member = b'["p1",["task_id","due-bad","tier","p1","payload","\xff","created_at","1"]]'
    await raw.zadd(keys.due, {member: 0})
    later = await AsyncClient(client, pool, pool.spec).submit("p1", {}, delay=0.2)
    async with running_worker(pool, redis_url, Recorder()) as worker:
        assert await async_wait_until(lambda: all_succeeded(client, keys, [later]), 10)
        assert await async_wait_until(lambda: _length(client, keys.dlq, 1), 5)
        assert no_restarts(worker) == {}
    [(_, letter)] = await raw.xrange(keys.dlq)
    assert letter[b"reason"] == b"bad envelope: not UTF-8: payload (byte 0xff at 0)"
    assert letter[b"task_id"] == b"due-bad" and letter[b"payload"] == b"\xff"


async def test_status_observation_cancel_and_dlq_list_read_past_bad_bytes(
    client: aioredis.Redis, raw: aioredis.Redis, redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    """The operator's observation raised on a bad head entry (every scaling pass failed, a pool at zero never
    woke), and so did ``tierpool status``, a cancel's lookup and ``tierpool dlq list``. The observation reads its
    heads undecoded, so even a strict client (local mode's) is fine; so does a cancel's lookup (see the test after
    the next one)."""
    pool = make_pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    path = pool_file(tmp_path, pool)
    await raw.xadd(keys.tier("p0"), raw_envelope("payload"))
    waiting = await AsyncClient(client, pool, pool.spec).submit("p0", {})
    await raw.zadd(keys.stranded, {b'["p\xff",["task_id","lost","payload","{}"]]': 9e12})  # a tier not UTF-8
    operator_client = async_client(RedisSettings(url=redis_url))
    producer = AsyncClient(operator_client, pool, pool.spec)
    try:
        for grouped in (False, True):  # a stream's first entry (no group yet), then the group's next one
            if grouped:
                await client.xgroup_create(keys.tier("p0"), GROUP, id="0")
            for reader in (client, operator_client):
                p0 = (await observe(reader, keys, pool.spec.tier_names, 10.0, 60.0)).tiers[0]
                assert (p0.length, p0.backlog) == (2, 2) and 0 <= p0.oldest_age_seconds < 30, p0
            status = tierpool("status", "-f", path, "--json", url=redis_url)
            assert status.returncode == 0, status.stderr
            body = json.loads(status.stdout)
            assert body["tiers"][0]["lag"] == 2
            assert body["stranded"] == {"total": 1, "tiers": {"p\ufffd": 1}}
            table = tierpool("status", "-f", path, url=redis_url)
            assert table.returncode == 0 and "stranded: 1" in table.stdout, table.stderr
        assert (await producer.cancel(waiting)).state is CancelState.WAITING
        assert (await producer.cancel("bad-payload")).state is CancelState.WAITING
    finally:
        await operator_client.aclose()

    await raw.xadd(keys.dlq, raw_envelope("task_id") | {b"reason": REASONS["task_id"].encode(), b"deliveries": b"1"})
    listed = tierpool("dlq", "list", "-f", path, "--json", url=redis_url)
    assert listed.returncode == 0, listed.stderr
    [letter] = json.loads(listed.stdout)
    assert letter["task_id"] == "bad-\ufffd" and letter["reason"] == REASONS["task_id"]
    assert letter["not_utf8"] == {"task_id": base64.b64encode(b"bad-\xff").decode()}
    table = tierpool("dlq", "list", "-f", path, url=redis_url)
    assert table.returncode == 0 and "bad-" in table.stdout, table.stderr
    replay = tierpool("dlq", "replay", "-f", path, letter["id"], url=redis_url)
    assert replay.returncode == 1 and "not UTF-8" in replay.stderr, replay.stderr
    assert await client.xlen(keys.dlq) == 1


async def test_text_with_escaped_bytes_is_written_back_as_those_bytes(
    raw: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """A worker's client decodes bad bytes to lone surrogates (surrogateescape); what it writes back from them
    (a key made from a bad task_id, a script argument) must be the original bytes again, not an error."""
    worker_client = async_client(RedisSettings(url=redis_url))
    key = f"{pool_name}:k\udcff"
    try:
        await worker_client.set(key, "v\udcfe")
        assert await raw.get(f"{pool_name}:k".encode() + b"\xff") == b"v\xfe"
        assert await worker_client.get(key) == "v\udcfe"
        pipe = worker_client.pipeline(transaction=False)
        pipe.execute_command("EVAL", "return {redis.call('GET', KEYS[1]), ARGV[1]}", 1, key, "a\udcc3")
        assert await pipe.execute() == [["v\udcfe", "a\udcc3"]]
    finally:
        await worker_client.aclose()


async def test_a_cancel_on_a_strict_application_client_reads_past_bad_bytes(
    client: aioredis.Redis, raw: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """An application's own client (``decode_responses=True``, strict) raised in a cancel's lookup on a byte that is
    not UTF-8 in any entry of a scanned page or member of a scanned set: the lookup reads them undecoded."""
    pool = make_pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    plain = {b"tier": b"p0", b"payload": b"{}", b"created_at": b"1"}  # a plain XADD: no task-id index entry
    await raw.xadd(keys.tier("p0"), raw_envelope("payload"))
    await raw.xadd(keys.tier("p0"), {b"task_id": b"plain-1"} | plain)
    await raw.xadd(keys.tier("p0"), {b"task_id": b"plain-2"} | plain)
    await raw.zadd(keys.stranded, {b'["p\xff",["task_id","lost","payload","{}"]]': 9e12})
    strict_sync = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        reports = await AsyncClient(client, pool, pool.spec).cancel_many(["plain-1", "nowhere"])
        assert [r.state for r in reports] == [CancelState.WAITING, CancelState.UNKNOWN]
        assert Client(strict_sync, pool, pool.spec).cancel("plain-2").state is CancelState.WAITING
    finally:
        strict_sync.close()
