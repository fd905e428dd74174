"""How late ``asyncio.sleep(0.05)`` returns with 64 sleepers on one loop and nothing else running: the part of a
slot's time on the I/O-bound refill load (bench/refill.py) that no worker change can take out.

Reproduce:  .venv/bin/python bench/asyncio_sleep.py
"""

from __future__ import annotations

import asyncio
import statistics
import time


async def sleeper(late: list[float]) -> None:
    started = time.monotonic()
    await asyncio.sleep(0.05)
    late.append(time.monotonic() - started - 0.05)


async def main() -> None:
    late: list[float] = []
    for _ in range(20):
        await asyncio.gather(*(sleeper(late) for _ in range(64)))
    mean, most = statistics.mean(late) * 1000, max(late) * 1000
    print(f"asyncio.sleep(0.05) returns late by {mean:.2f} ms on average (max {most:.2f})")


if __name__ == "__main__":
    asyncio.run(main())
