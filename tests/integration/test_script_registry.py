"""The Lua scripts on a real Valkey: the server compiles every assembled source and names it by the loader's SHA1,
and the registry (tierpool.store.script_registry) loads them again after the server lost them (SCRIPT FLUSH)."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aioredis

from tierpool import scripts
from tierpool.model.keys import PoolKeys
from tierpool.store import script_registry

pytestmark = pytest.mark.redis


async def test_the_server_compiles_every_script_and_names_it_by_the_loaders_sha(client: aioredis.Redis) -> None:
    found = scripts.by_name()
    assert len(found) > 20
    for name, script in found.items():
        assert await client.script_load(script.source) == script.sha, name
    assert all(await client.script_exists(*[script.sha for script in found.values()]))


async def test_after_a_flush_one_run_loads_the_script_and_those_named_to_reload(
    client: aioredis.Redis, pool_name: str
) -> None:
    keys = PoolKeys("test", pool_name)
    await client.script_flush()
    reply = await script_registry.run_async(client, "RELEASE", [keys.escalator_lease], ["nobody"], reload=["LEASE"])
    assert reply == 0
    loaded = await client.script_exists(scripts.sha("RELEASE"), scripts.sha("LEASE"), scripts.sha("TAKE"))
    assert loaded == [True, True, False]


async def test_after_a_flush_a_batch_loads_what_it_was_refused_and_runs_every_call(
    client: aioredis.Redis, pool_name: str
) -> None:
    keys = PoolKeys("test", pool_name)
    await client.script_flush()
    calls: list[script_registry.ScriptCall] = [
        ("LEASE", [keys.escalator_lease], ["me", 10_000]),
        ("RELEASE", [keys.escalator_lease], ["me"]),
    ]
    assert await script_registry.run_batch_async(client, calls) == [1, 1]
    assert await client.exists(keys.escalator_lease) == 0


def test_a_sync_pipeline_runs_what_was_loaded(redis_url: str, pool_name: str) -> None:
    keys = PoolKeys("test", pool_name)
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    connection.script_flush()
    script_registry.load_sync(connection, ["LEASE"])
    pipe = connection.pipeline(transaction=False)
    script_registry.queue(pipe, "LEASE", [keys.escalator_lease], ["me", 10_000])
    pipe.execute_command(*scripts.eval_command("RELEASE", [keys.escalator_lease], ["me"]))
    assert pipe.execute() == [1, 1]
    connection.close()
