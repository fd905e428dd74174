"""What every contender of bench/refill.py shares: the record each task writes, and the P0 arrival schedule.

Each task appends one line to a file, from the handler (the one way every contender is timed).

A line is ``<kind> <sent> <started> <ended>`` (epoch seconds from this machine's clock; ``sent`` is the producer's
time just before it sent the task). The file is opened with ``O_APPEND`` once per process and each line is one
``write``, so lines from threads and processes do not interleave. Stdlib only: the tierpool handler here and the
peers' tasks and producers (bench/peers/) import it alike, and it runs on any revision of the worker.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

LOG_ENV = "REFILL_BENCH_LOG"
_fd: int | None = None
_lock = threading.Lock()


def record(kind: str, sent: float, started: float, ended: float) -> None:
    global _fd
    if _fd is None:
        with _lock:
            if _fd is None:
                _fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, f"{kind} {sent:.6f} {started:.6f} {ended:.6f}\n".encode())


def read(path: str | os.PathLike[str]) -> list[tuple[str, float, float, float]]:
    """The lines written so far: (kind, sent, started, ended)."""
    lines: list[tuple[str, float, float, float]] = []
    try:
        with open(path, encoding="ascii") as file:
            for line in file:
                parts = line.split()
                if len(parts) == 4:
                    lines.append((parts[0], float(parts[1]), float(parts[2]), float(parts[3])))
    except FileNotFoundError:
        pass
    return lines


async def timed(task: Any) -> None:
    """The tierpool handler: ``{"kind": ..., "sent": <epoch s>, "work_ms": N}``, an ``asyncio.sleep`` of work_ms."""
    started = time.time()
    payload = task.payload if isinstance(task.payload, dict) else {}
    work_ms = float(payload.get("work_ms", 0))
    if work_ms > 0:
        await asyncio.sleep(work_ms / 1000)
    record(str(payload.get("kind", "task")), float(payload.get("sent", started)), started, time.time())


def poisson(send: Callable[[float], None], seed: int, interval: float, seconds: float) -> tuple[float, float, int]:
    """Call ``send(sent)`` at exponential gaps of mean ``interval`` for ``seconds`` (the same seed, the same
    schedule); ``sent`` is the epoch time just before the send. Returns (epoch start, epoch end, tasks sent)."""
    rng = random.Random(seed)
    wall_start, start = time.time(), time.monotonic()
    sent = 0
    next_at = start + rng.expovariate(1 / interval)
    while next_at < start + seconds:
        time.sleep(max(next_at - time.monotonic(), 0))
        send(time.time())
        sent += 1
        next_at += rng.expovariate(1 / interval)
    time.sleep(max(start + seconds - time.monotonic(), 0))
    return wall_start, time.time(), sent
