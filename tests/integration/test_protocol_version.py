"""The protocol version on the wire, through a real worker and real clients: a worker refuses an entry of a newer
protocol at once (never run), a producer refuses a pool whose published spec speaks a newer one, and what this
release writes names its own."""

from __future__ import annotations

import json

import pytest
import redis
import redis.asyncio as aioredis

from tierpool import AsyncClient, Client, NewerProtocol
from tierpool.model.keys import PoolKeys
from tierpool.protocol.version import PROTOCOL
from tierpool.store.dlq import list_dead
from tierpool.store.registry import spec_json, spec_key

from .support import FAST_RECOVERY, Recorder, async_wait_until, make_pool, running_worker, sync_redis

pytestmark = pytest.mark.redis


async def test_a_worker_dead_letters_an_entry_of_a_newer_protocol_unrun(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    keys = PoolKeys.parse(pool.ref)
    handler = Recorder()
    async with running_worker(pool, redis_url, handler):
        producer = AsyncClient(client, pool)
        fields = {"task_id": "from-the-future", "tier": "p0", "payload": "{}", "created_at": "1700000000000"}
        await client.xadd(keys.tier("p0"), {**fields, "protocol": str(PROTOCOL + 1)})
        current = await producer.submit("p0", {"n": 1})  # this protocol's entry, after it, runs
        done = await producer.wait_result(current, 20)
        assert done.ok
        refused = await producer.wait_result("from-the-future", 20)
    reason = f"bad envelope: protocol {PROTOCOL + 1} is newer than this worker's ({PROTOCOL})"
    assert (refused.status, refused.reason, refused.attempts) == ("dead_lettered", reason, 1)
    assert [task.id for task in handler.calls] == [current]
    [dead] = await list_dead(client, keys)
    assert dead.task_id == "from-the-future" and dead.fields["protocol"] == str(PROTOCOL + 1)
    assert dead.fields["reason"] == reason and dead.fields["deliveries"] == "1"


async def test_a_worker_publishes_its_protocol_with_the_spec(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    async with running_worker(pool, redis_url, Recorder()):
        assert await async_wait_until(lambda: client.exists(spec_key(keys)), 10)
        published = json.loads(await client.get(spec_key(keys)))
        producer = await AsyncClient.create(client, pool.ref)
        task_id = await producer.submit("p0", {})
        assert (await producer.wait_result(task_id, 20)).ok
    assert published["protocol"] == PROTOCOL
    assert producer.spec == pool.spec


def _publish(client: redis.Redis, keys: PoolKeys, protocol: int) -> None:
    document = json.loads(spec_json(make_pool(keys.name).spec))
    document["protocol"] = protocol
    client.set(spec_key(keys), json.dumps(document))


async def test_a_producer_refuses_a_pool_of_a_newer_protocol_before_it_writes(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    keys = PoolKeys("test", pool_name)
    sync = sync_redis(redis_url)
    _publish(sync, keys, PROTOCOL + 1)
    with pytest.raises(NewerProtocol, match=f"speaks protocol {PROTOCOL + 1}, newer than this tierpool's"):
        Client(sync, keys.ref)
    lazy = AsyncClient(client, keys.ref)
    with pytest.raises(NewerProtocol, match=rf"\({PROTOCOL}\)"):
        await lazy.submit("p0", {})
    assert await client.exists(keys.tier("p0"), keys.where) == 0  # nothing written
    _publish(sync, keys, PROTOCOL)  # an older or equal protocol is fine
    task_id = Client(sync, keys.ref).submit("p0", {})
    [(_, fields)] = sync.xrange(keys.tier("p0"))
    assert fields["task_id"] == task_id and fields["protocol"] == str(PROTOCOL)
    sync.close()
