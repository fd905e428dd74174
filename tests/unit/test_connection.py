"""The asyncio client's hiredis command packing must write exactly the bytes redis-py's own packing writes."""

from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.exceptions import DataError

from tierpool.connection import RedisSettings, async_client
from tierpool.spec import RedisMode

COMMANDS: list[tuple[Any, ...]] = [
    ("PING",),
    ("SET", "key", "value"),
    ("EVALSHA", "abc", 2, "k1", "k2", b'{"a":1}', 86_400_000, -1, 0),
    ("SET", "k", 0.1),
    ("SET", "k", 1e20),
    ("SET", "k", "caf\u00e9 \u2603"),
    ("SET", "k", b"\x00\xff raw"),
    ("SET", "k", memoryview(b"view")),
    ("SET", "k", ""),
    ("CONFIG GET", "maxmemory"),
    (b"CONFIG GET", "maxmemory"),
    (b"GET", "k"),
    ("XADD", "s", "*", "f", "x" * 10_000),
]


def _ours(url: str) -> aioredis.Connection:
    client = async_client(RedisSettings(url=url))
    return client.connection_pool.make_connection()  # type: ignore[return-value]


@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "rediss://localhost:6380/0", "unix:///tmp/r.sock"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: str(command[0]))
def test_hiredis_packing_matches_redis_py(url: str, command: tuple[Any, ...]) -> None:
    ours = _ours(url)
    assert type(ours).__name__.endswith("HiredisPacking")
    reference = aioredis.Connection()
    assert b"".join(ours.pack_command(*command)) == b"".join(reference.pack_command(*command))


@pytest.mark.parametrize("bad", [None, True])
def test_unpackable_arguments_still_raise_redis_py_errors(bad: object) -> None:
    with pytest.raises(DataError):
        _ours("redis://localhost:6379/0").pack_command("SET", "k", bad)


def test_the_pipeline_packs_through_the_same_path() -> None:
    ours, reference = _ours("redis://localhost:6379/0"), aioredis.Connection()
    commands = [(("SET", "a", 1), {}), (("GET", "a"), {})]
    packed = b"".join(ours.pack_commands([args for args, _ in commands]))
    assert packed == b"".join(reference.pack_commands([args for args, _ in commands]))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("redis://:hunter2@redis:6379/0", "redis://:***@redis:6379/0"),
        ("rediss://app:hunter2@redis:6380/1", "rediss://app:***@redis:6380/1"),
        ("redis://hunter2@redis/0", "redis://***@redis/0"),
        ("redis://redis:6379/0?password=hunter2", "redis://redis:6379/0?password=***"),
        (
            "redis://redis/0?socket_timeout=5&password=hunter2&db=1",
            "redis://redis/0?socket_timeout=5&password=***&db=1",
        ),
        ("redis://app:p%40ss@redis/0?Password=hunter2", "redis://app:***@redis/0?Password=***"),
    ],
)
def test_every_form_of_password_is_redacted(url: str, shown: str) -> None:
    assert RedisSettings(url=url).redacted_url() == shown
    assert "hunter2" not in shown


@pytest.mark.parametrize(
    ("flag", "environ", "pool_mode", "expected"),
    [
        (None, {}, RedisMode.STANDALONE, RedisMode.STANDALONE),
        (None, {}, RedisMode.CLUSTER, RedisMode.CLUSTER),
        (None, {"TIERPOOL_REDIS_MODE": "cluster"}, RedisMode.STANDALONE, RedisMode.CLUSTER),
        (None, {"TIERPOOL_REDIS_MODE": "standalone"}, RedisMode.CLUSTER, RedisMode.STANDALONE),
        ("standalone", {"TIERPOOL_REDIS_MODE": "cluster"}, RedisMode.CLUSTER, RedisMode.STANDALONE),
        ("cluster", {}, RedisMode.STANDALONE, RedisMode.CLUSTER),
    ],
)
def test_the_mode_comes_from_the_flag_then_the_environment_then_the_pool(
    flag: str | None, environ: dict[str, str], pool_mode: RedisMode, expected: RedisMode
) -> None:
    assert RedisSettings.from_env(environ, mode=flag, fallback_mode=pool_mode).mode is expected


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="sentinel"):
        RedisSettings.from_env({"TIERPOOL_REDIS_MODE": "sentinel"})


@pytest.mark.parametrize(
    ("mode", "kind"),
    [(RedisMode.STANDALONE, aioredis.Redis), (RedisMode.CLUSTER, AsyncRedisCluster)],
)
def test_the_mode_chooses_the_client(mode: RedisMode, kind: type) -> None:
    """(The sync cluster client reads the slot map when it is built, so it is checked on a real cluster.)"""
    assert isinstance(async_client(RedisSettings(url="redis://seed:7000/0", mode=mode)), kind)
