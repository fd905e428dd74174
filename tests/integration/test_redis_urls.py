"""A real server behind a password that holds ``/``, ``?`` and ``@``, given in the URL as users write it."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis

from tierpool.store.connection import RedisSettings, async_client, sync_client

pytestmark = pytest.mark.redis
PASSWORD = "Zm9v/YmFy?cXV4@eA=="  # base64-like, with / ? @ and =


async def test_a_password_with_url_characters_authenticates(client: aioredis.Redis, redis_url: str) -> None:
    user = f"app-{uuid.uuid4().hex[:8]}"
    await client.acl_setuser(user, enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"], commands=["+@all"])
    address = redis_url.split("://", 1)[1].rpartition("@")[2]
    settings = RedisSettings(url=f"redis://{user}:{PASSWORD}@{address}")
    worker = async_client(settings)
    try:
        assert await worker.ping()
        assert (await worker.acl_whoami()) == user
        assert sync_client(settings).ping()
    finally:
        await worker.aclose()
        await client.acl_deluser(user)
