"""Integration-tier fixtures shared by the test modules (the server itself comes from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """An asyncio connection to the test server, closed after the test."""
    connection = aioredis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    await connection.aclose()
