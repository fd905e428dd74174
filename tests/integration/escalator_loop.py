"""Runs escalation sweeps in small batches, forever (or --once), so a test can SIGKILL it mid-sweep."""

import asyncio
import os
import sys

import redis.asyncio as aioredis

from tierpool.model.keys import PoolKeys
from tierpool.model.resource import load_pool_env
from tierpool.runtime import maintenance
from tierpool.runtime.maintenance import Maintainer
from tierpool.store.streams import PoolStreams


async def main(once: bool) -> None:
    pool = load_pool_env(os.environ)
    client = aioredis.Redis.from_url(os.environ["TIERPOOL_REDIS_URL"], decode_responses=True)
    streams = PoolStreams(client, PoolKeys.parse(pool.ref), pool.spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()
    maintenance.ESCALATE_BATCH = 7
    maintainer = Maintainer(streams, pool.spec, "escalator-test")
    while True:
        await maintainer.escalate_all()
        if once:
            break
    await client.aclose()


asyncio.run(main("--once" in sys.argv))
