"""tierpool.testing against a real Valkey: its own embedded server, a worker for a given pool, and a worker whose
start fails."""

from __future__ import annotations

import pytest
import redis

import tierpool.testing
from tierpool import AsyncClient
from tierpool.runtime.handler_loading import HandlerNotFound

from .support import make_pool
from .typed_app import Dispute, Verdict, Wait, app, linger, resolve

pytestmark = pytest.mark.redis


def test_valkey_serves_an_embedded_server() -> None:
    with tierpool.testing.valkey() as url:
        assert redis.Redis.from_url(url).ping()


async def test_a_worker_for_a_given_pool_serves_its_tiers(redis_url: str, pool_name: str) -> None:
    pool = make_pool(pool_name)
    async with tierpool.testing.worker(app, redis_url, pool, concurrency=1) as client:
        assert isinstance(client, AsyncClient) and client.keys.ref == pool.ref
        handle = await client.submit(resolve.using(tier="p2"), Dispute(ticket=8))
        assert await handle.result(timeout=10) == Verdict(refund=True, ticket=8)
        lingered = await client.submit(linger, Wait(seconds=0, steps=3))
        assert await lingered.result(timeout=10) == 3


def test_the_default_pool_has_a_tier_for_each_default_tier() -> None:
    pool = tierpool.testing.pool_for(app, "mine")
    assert (pool.ref, pool.spec.tier_names) == ("testing/mine", ["p0", "p2"])
    assert tierpool.testing.pool_for(tierpool.App()).spec.tier_names == ["default"]


async def test_a_worker_that_cannot_serve_says_why(redis_url: str) -> None:
    with pytest.raises(HandlerNotFound, match="the app has no tasks"):
        async with tierpool.testing.worker(tierpool.App(), redis_url):
            pass
    with pytest.raises(TimeoutError, match=r"did not serve within 0\.3s"):
        async with tierpool.testing.worker(app, "redis://127.0.0.1:1/0", start_timeout=0.3):
            pass
