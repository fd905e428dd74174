"""The eviction watch: a refused policy pauses new work, a safe one resumes it, each change is logged once."""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from tierpool.runtime.eviction_watch import EvictionWatch


class Server:
    """Scripted readings of ``maxmemory-policy``; the stop is set once they run out."""

    def __init__(self, *readings: str | Exception | None) -> None:
        self.readings = list(readings)
        self.reads = 0
        self.stop = asyncio.Event()

    async def read(self) -> str | None:
        self.reads += 1
        reading = self.readings.pop(0)
        if not self.readings:
            self.stop.set()
        if isinstance(reading, Exception):
            raise reading
        return reading

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)


def watch_of(server: Server, allow_eviction: bool = False) -> EvictionWatch:
    return EvictionWatch(server.read, allow_eviction, 0.2, server.stop, server.sleep)


async def run(watch: EvictionWatch) -> list[bool]:
    """The watch's run, with whether it was safe after each reading."""
    seen: list[bool] = []
    await asyncio.wait_for(watch.run(lambda: seen.append(watch.safe)), 5)
    return seen


async def test_a_refused_policy_pauses_and_a_safe_one_resumes(caplog: pytest.LogCaptureFixture) -> None:
    server = Server("allkeys-lru", "allkeys-lru", "noeviction", "noeviction")
    watch = watch_of(server)
    with caplog.at_level(logging.INFO, "tierpool.eviction"):
        assert await run(watch) == [False, False, True, True]
    lines = [(record.levelno, record.getMessage()) for record in caplog.records]
    assert [level for level, _ in lines] == [logging.ERROR, logging.INFO]
    assert lines[0][1].startswith("not serving: the server's maxmemory-policy is allkeys-lru")
    assert "set maxmemory-policy noeviction" in lines[0][1]
    assert lines[1][1] == "serving again: the server's maxmemory-policy is noeviction"
    assert not watch.paused.is_set()


async def test_the_paused_event_follows_the_policy() -> None:
    server = Server("allkeys-lfu")
    watch = watch_of(server)
    await run(watch)
    assert (watch.safe, watch.paused.is_set()) == (False, True)


async def test_allow_eviction_only_warns(caplog: pytest.LogCaptureFixture) -> None:
    server = Server("allkeys-lru", "allkeys-lru")
    with caplog.at_level(logging.INFO, "tierpool.eviction"):
        assert await run(watch_of(server, allow_eviction=True)) == [True, True]
    assert [record.levelno for record in caplog.records] == [logging.WARNING]
    assert "accepted: spec.redis.allowEviction" in caplog.records[0].getMessage()


async def test_volatile_and_unreadable_policies_warn_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    server = Server("volatile-lru", "volatile-lru", None, None, "noeviction")
    with caplog.at_level(logging.INFO, "tierpool.eviction"):
        assert await run(watch_of(server)) == [True] * 5
    levels = [record.levelno for record in caplog.records]
    assert levels == [logging.WARNING, logging.WARNING, logging.INFO]


async def test_redis_away_keeps_the_last_reading() -> None:
    server = Server("allkeys-lru", RedisConnectionError("gone"), "allkeys-lru")
    watch = watch_of(server)
    assert await run(watch) == [False, False, False]
    assert server.reads == 3


async def test_until_safe_waits_for_a_safe_policy_then_the_run_goes_on_from_it() -> None:
    server = Server("allkeys-lru", "allkeys-lru", "noeviction", "noeviction")
    watch = watch_of(server)
    assert await watch.until_safe()
    assert server.reads == 3
    assert await run(watch) == [True]


async def test_until_safe_gives_up_on_a_stop() -> None:
    server = Server("allkeys-lru")
    assert not await watch_of(server).until_safe()


async def test_resumed_returns_on_a_resume_or_a_stop_before_its_bound() -> None:
    server = Server("allkeys-lru", "noeviction", "noeviction")
    watch = watch_of(server)
    await watch.check()
    waiting = asyncio.ensure_future(watch.resumed(60))
    await asyncio.sleep(0)
    assert not waiting.done()
    await watch.check()
    await asyncio.wait_for(waiting, 5)
    assert not server.stop.is_set()
    stop = Server("allkeys-lru")
    paused = watch_of(stop)
    await paused.check()
    await asyncio.wait_for(paused.resumed(60), 5)  # the script ran out: its stop is set
