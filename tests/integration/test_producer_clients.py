"""The producer clients against a real Valkey and a running worker: ``Client`` and ``AsyncClient`` built the
same way (a client of the caller's, or ``from_url``; an AgentPool, a pool file or a published pool's name), and
every operation working on a redis-py client that decodes replies and on one that does not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from tierpool import AgentPool, AsyncClient, CancelState, Client, UnknownPool

from .support import FAST_RECOVERY, Recorder, make_pool, running_worker

pytestmark = pytest.mark.redis

SLOW = {"work_s": 0.3}
"""A task still running when the producer starts to wait: its wait reads the event stream (XREAD by id)."""


def exercise_sync(producer: Client) -> None:
    task_id = producer.submit("p0", SLOW)
    done = producer.wait_result(task_id, 15)
    assert done.ok and done.result == {"seen": task_id}, done
    assert producer.result(task_id) == done
    followed = producer.submit("p1", SLOW)
    items = list(producer.follow(followed, 15))
    assert items[-1].ok and items[-1].task_id == followed, items  # type: ignore[union-attr]
    long = producer.submit("p0", {"work_s": 60})
    assert producer.cancel(long).cancelled
    assert producer.wait_result(long, 15).status == "cancelled"
    finished = producer.cancel(task_id)
    assert finished.state is CancelState.FINISHED and finished.result == done


async def exercise_async(producer: AsyncClient) -> None:
    task_id = await producer.submit("p0", SLOW)
    done = await producer.wait_result(task_id, 15)
    assert done.ok and done.result == {"seen": task_id}, done
    assert await producer.result(task_id) == done
    followed = await producer.submit("p1", SLOW)
    items = [item async for item in producer.follow(followed, 15)]
    assert items[-1].ok and items[-1].task_id == followed, items  # type: ignore[union-attr]
    long = await producer.submit("p0", {"work_s": 60})
    assert (await producer.cancel(long)).cancelled
    assert (await producer.wait_result(long, 15)).status == "cancelled"
    finished = await producer.cancel(task_id)
    assert finished.state is CancelState.FINISHED and finished.result == done


def pool_for(pool_name: str) -> AgentPool:
    return make_pool(pool_name, recovery=FAST_RECOVERY)


@pytest.mark.parametrize("decode", [True, False], ids=["decoding", "bytes"])
async def test_client_on_the_callers_redis_client(redis_url: str, pool_name: str, decode: bool) -> None:
    """``Client(redis.Redis.from_url(url), pool)``: a bytes-returning client once submitted, then failed in
    ``wait_result`` with ``Invalid stream ID`` (it read ``b"1-0"`` as the id ``"b'1-0'"``)."""
    pool = pool_for(pool_name)

    def produce() -> None:
        with Client(redis.Redis.from_url(redis_url, decode_responses=decode), pool) as producer:
            exercise_sync(producer)

    async with running_worker(pool, redis_url, Recorder()):
        await asyncio.to_thread(produce)  # the sync client blocks: not on the worker's loop


@pytest.mark.parametrize("decode", [True, False], ids=["decoding", "bytes"])
async def test_async_client_on_the_callers_redis_client(redis_url: str, pool_name: str, decode: bool) -> None:
    pool = pool_for(pool_name)
    connection = aioredis.Redis.from_url(redis_url, decode_responses=decode)
    async with running_worker(pool, redis_url, Recorder()), AsyncClient(connection, pool) as producer:
        await exercise_async(producer)


async def test_from_url_takes_a_pool_file_or_a_published_name(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    """Both classes have the same ``from_url(url, pool)``; the worker published the spec that a name reads."""
    pool = pool_for(pool_name)
    path = tmp_path / "pool.yaml"
    path.write_text(pool.model_dump_json(by_alias=True))

    def produce() -> None:
        with Client.from_url(redis_url, path) as producer:
            assert producer.spec == pool.spec
            exercise_sync(producer)
        with Client.from_url(redis_url, pool.ref) as by_name:
            assert by_name.spec == pool.spec

    async with running_worker(pool, redis_url, Recorder()):
        await asyncio.to_thread(produce)
        async with AsyncClient.from_url(redis_url, pool.ref) as producer:
            await exercise_async(producer)
            assert producer.spec == pool.spec
        async with AsyncClient.from_url(redis_url, path) as from_file:
            assert from_file.spec == pool.spec


async def test_a_name_nobody_published_is_an_unknown_pool(redis_url: str, pool_name: str) -> None:
    with pytest.raises(UnknownPool, match=f"nowhere/{pool_name} is not known"):
        Client.from_url(redis_url, f"nowhere/{pool_name}")
    async with AsyncClient.from_url(redis_url, f"nowhere/{pool_name}") as producer:  # read on first use
        with pytest.raises(UnknownPool):
            await producer.submit("p0", {})
        with pytest.raises(UnknownPool):
            await AsyncClient.create(producer.redis, f"nowhere/{pool_name}")
    with pytest.raises(ValueError, match="looks like a file"):
        Client.from_url(redis_url, "pool.yaml")
