"""Load profiles: deterministic arrival schedules (pure), and a producer that replays one in real time.

``seed`` reproduces the seed article's mix, time-compressed: steady customer-facing (P0), operational (P1) and
batch (P2) arrivals of different costs, then a burst (a batch dump plus a P0 spike) that needs several replicas,
then a quiet tail in which the pool scales back down. Times are fractions of the run's duration.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tierpool.client.producer import AsyncClient
from tierpool.protocol.submission import TaskRequest


@dataclass(frozen=True)
class Arrival:
    at: float
    """Seconds from the start of the run."""
    tier: str
    work_ms: int


def _poisson(rng: random.Random, rate: float, start: float, end: float) -> list[float]:
    times: list[float] = []
    t = start
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= end:
            return times
        times.append(t)
    return times


def seed_profile(duration: float, tiers: Sequence[str], rng_seed: int = 7) -> list[Arrival]:
    """The seed article's three-tier mix with a burst between 15% and 35% of the run."""
    rng = random.Random(rng_seed)
    top, mid, low = (list(tiers) + [tiers[-1]] * 3)[:3]
    steady_until = duration * 0.8  # the last fifth is quiet so the pool can scale down
    cost = {top: (150, 600), mid: (400, 1500), low: (800, 2500)}
    arrivals = [
        Arrival(t, tier, rng.randint(*cost[tier]))
        for tier, rate in ((top, 1.5), (mid, 1.0), (low, 1.0))
        for t in _poisson(rng, rate, 0.0, steady_until)
    ]
    burst_start, burst_end = duration * 0.15, duration * 0.35
    arrivals += [Arrival(t, top, rng.randint(150, 600)) for t in _poisson(rng, 10.0, burst_start, burst_end)]
    arrivals += [Arrival(burst_start + i * 0.002, low, rng.randint(800, 2500)) for i in range(300)]
    arrivals += [Arrival(burst_start + 1 + i * 0.002, mid, rng.randint(400, 1500)) for i in range(100)]
    return sorted(arrivals, key=lambda a: a.at)


def burst_profile(duration: float, tiers: Sequence[str], rng_seed: int = 7) -> list[Arrival]:
    """One burst of 500 short tasks spread over every tier at 10% of the run, then nothing."""
    rng = random.Random(rng_seed)
    return [Arrival(duration * 0.1 + i * 0.001, tiers[i % len(tiers)], rng.randint(100, 400)) for i in range(500)]


PROFILES: dict[str, Callable[[float, Sequence[str]], list[Arrival]]] = {
    "seed": seed_profile,
    "burst": burst_profile,
    "none": lambda duration, tiers: [],
}


async def replay(
    producer: AsyncClient,
    schedule: Sequence[Arrival],
    start: float,
    submitted: dict[str, str],
    clock: Callable[[], float] = time.monotonic,
    fifo_tier: str | None = None,
) -> None:
    """Submit each arrival at its time (batched when several are due); records task_id -> its tier in ``submitted``.

    With ``fifo_tier`` every task goes into that one tier (a FIFO baseline) but is still recorded under its class.
    """
    index = 0
    while index < len(schedule):
        now = clock() - start
        due = []
        while index < len(schedule) and schedule[index].at <= now:
            due.append(schedule[index])
            index += 1
        if due:
            requests = [TaskRequest(fifo_tier or a.tier, {"work_ms": a.work_ms}) for a in due]
            for task_id, arrival in zip(await producer.submit_many(requests), due, strict=True):
                submitted[task_id] = arrival.tier
            continue
        await asyncio.sleep(min(max(schedule[index].at - now, 0.0), 0.05))
