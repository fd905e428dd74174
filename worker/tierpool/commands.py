"""The CLI commands. Each reads its configuration once, here at the edge, then calls the library."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import socket
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from rich.console import Console
from rich.table import Table

from tierpool import dlq as dead_letters
from tierpool import logs
from tierpool.client import AsyncClient
from tierpool.connection import RedisSettings, async_client, wait_until_reachable
from tierpool.durations import parse_duration
from tierpool.handlers import HandlerNotFound, load_handler
from tierpool.health import HealthServer
from tierpool.keys import PoolKeys
from tierpool.metrics import WorkerMetrics
from tierpool.observation import PoolObservation
from tierpool.observe import observe
from tierpool.registry import UnknownPool, load_spec_async
from tierpool.resource import SPEC_ENV_VAR, AgentPool, SpecError, load_pool_env, load_pool_file, pool_from_spec
from tierpool.submission import SubmitError, TaskRequest, TaskResult
from tierpool.worker import Worker, WorkerSettings

console = Console()
errors = Console(stderr=True)


def fail(message: str, code: int = 1) -> int:
    errors.print(f"[bold red]error:[/] {message}", highlight=False)
    return code


def redis_settings(args: argparse.Namespace) -> RedisSettings:
    return RedisSettings.from_env(os.environ, url=getattr(args, "redis_url", None))


async def resolve_pool(args: argparse.Namespace, connection: Any) -> AgentPool:
    """--file, else the spec in the environment (how the operator starts workers), else the published spec."""
    if args.file:
        return load_pool_file(args.file)
    if os.environ.get(SPEC_ENV_VAR):
        return load_pool_env(os.environ)
    if not args.pool:
        raise SpecError([("--file/--pool", "say which pool: --file pool.yaml or --pool NAMESPACE/NAME")], "arguments")
    keys = PoolKeys.parse(args.pool)
    return pool_from_spec(keys.name, keys.namespace, await load_spec_async(connection, keys))


def run_async(coro: Any) -> int:
    """Run a command coroutine, turning the expected user errors into one clear line and exit code 1."""
    try:
        return int(asyncio.run(coro))
    except (SpecError, SubmitError, UnknownPool, ValueError, TimeoutError) as error:
        return fail(str(error))
    except (ConnectionError, RedisConnectionError) as error:
        return fail(f"cannot reach redis: {error}")
    except ResponseError as error:
        return fail(f"redis refused the command: {error}")


# --- worker ----------------------------------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> int:
    logs.configure(args.log_format or os.environ.get("TIERPOOL_LOG_FORMAT", "text"), args.log_level)
    return run_async(_worker(args, redis_settings(args)))


async def _worker(args: argparse.Namespace, settings: RedisSettings) -> int:
    client = async_client(settings, max_connections=(args.concurrency or 64) + 16)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if not await wait_until_reachable(client.ping, settings.redacted_url(), stop=stop.is_set):
        return 0
    pool = await resolve_pool(args, client)
    try:
        handler = load_handler(args.handler or pool.spec.worker.handler)
    except HandlerNotFound as error:
        return fail(str(error), 2)
    grace_default = pool.spec.worker.termination_grace_period_seconds
    worker_settings = WorkerSettings(
        pool=pool,
        redis=settings,
        handler=args.handler or pool.spec.worker.handler,
        concurrency=args.concurrency or pool.spec.worker.concurrency,
        consumer=args.consumer or _consumer_name(os.environ.get("TIERPOOL_CONSUMER")),
        grace_seconds=args.grace if args.grace is not None else max(1.0, grace_default - min(5.0, grace_default * 0.1)),
        metrics_port=pool.spec.worker.metrics_port if args.metrics_port is None else (args.metrics_port or None),
        maintenance=not args.no_maintenance,
    )
    registry = CollectorRegistry()
    instance = Worker(worker_settings, handler, client, WorkerMetrics(registry))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, instance.request_stop)
    if stop.is_set():
        instance.request_stop()
    server = None
    if worker_settings.metrics_port:
        server = HealthServer(
            registry, live=lambda: True, ready=lambda: instance.ready, port=worker_settings.metrics_port
        )
        server.start()
    try:
        return await instance.run()
    finally:
        if server:
            server.stop()
        await client.aclose()


def _consumer_name(pod_name: str | None) -> str:
    """The pod name when the operator passes it (unique per pod), else host-pid-random."""
    base = pod_name or f"{socket.gethostname()}-{os.getpid()}"
    return f"{base}-{secrets.token_hex(2)}"


# --- producer commands -----------------------------------------------------------------------------------------


def submit(args: argparse.Namespace) -> int:
    return run_async(_submit(args))


def _jsonl_requests(path: str) -> Iterator[TaskRequest]:
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    try:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                yield TaskRequest(item["tier"], item.get("payload", {}), item.get("task_id"))
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                raise SubmitError(f'{path}:{number}: expected {{"tier", "payload", "task_id"?}}: {error}') from None
    finally:
        if stream is not sys.stdin:
            stream.close()


async def _submit(args: argparse.Namespace) -> int:
    client = async_client(redis_settings(args))
    try:
        producer = await AsyncClient.create(client, await resolve_pool(args, client))
        if args.from_jsonl:
            ids = await producer.submit_many(list(_jsonl_requests(args.from_jsonl)))
            console.print(f"submitted {len(ids)} task(s) to {producer.keys.ref}")
            return 0
        if not args.tier:
            raise SubmitError("--tier is required (or use --from-jsonl)")
        try:
            payload = json.loads(args.payload)
        except json.JSONDecodeError as error:
            raise SubmitError(f"--payload is not JSON: {error}") from None
        deadline = timedelta(seconds=parse_duration(args.deadline)) if args.deadline else None
        task_id = await producer.submit(args.tier, payload, args.task_id, deadline)
        print(task_id)
        if args.wait:
            return _print_result(await producer.wait_result(task_id, args.wait))
        return 0
    finally:
        await client.aclose()


def result(args: argparse.Namespace) -> int:
    return run_async(_result(args))


async def _result(args: argparse.Namespace) -> int:
    client = async_client(redis_settings(args))
    try:
        producer = await AsyncClient.create(client, await resolve_pool(args, client))
        if args.wait:
            return _print_result(await producer.wait_result(args.task_id, args.wait))
        found = await producer.result(args.task_id)
        if found is None:
            return fail(f"no result for task {args.task_id} (not finished, or its result expired)")
        return _print_result(found)
    finally:
        await client.aclose()


def _print_result(found: TaskResult) -> int:
    print(json.dumps(found.__dict__, indent=2, default=str))
    return 0 if found.ok else 1


# --- status and DLQ --------------------------------------------------------------------------------------------


def status(args: argparse.Namespace) -> int:
    return run_async(_status(args))


async def _status(args: argparse.Namespace) -> int:
    client = async_client(redis_settings(args))
    try:
        pool = await resolve_pool(args, client)
        observation = await observe(client, PoolKeys.parse(pool.ref), pool.spec.tier_names)
    finally:
        await client.aclose()
    if args.json:
        print(json.dumps(observation.to_status(), indent=2))
    else:
        console.print(status_table(observation, {t.name: t.sla for t in pool.spec.tiers}))
    return 0


def status_table(observation: PoolObservation, slas: dict[str, float | None]) -> Table:
    table = Table(title=f"pool {observation.pool}  (dead letters: {observation.dlq})")
    for column in ("tier", "backlog", "pending", "oldest wait", "sla", "consumers", "length"):
        table.add_column(column, justify="left" if column == "tier" else "right")
    for tier in observation.tiers:
        sla = slas.get(tier.name)
        late = sla is not None and tier.oldest_age_seconds > sla
        age = f"[red]{tier.oldest_age_seconds:.1f}s[/]" if late else f"{tier.oldest_age_seconds:.1f}s"
        backlog = str(tier.backlog) + ("" if tier.lag_exact or not tier.exists else " (counted)")
        name = tier.name if tier.exists else f"{tier.name} [yellow](missing)[/]"
        table.add_row(
            name,
            backlog,
            str(tier.pending),
            age,
            "-" if sla is None else f"{sla:g}s",
            str(tier.consumers),
            str(tier.length),
        )
    return table


def dlq(args: argparse.Namespace) -> int:
    return run_async(_dlq(args))


async def _dlq(args: argparse.Namespace) -> int:
    client = async_client(redis_settings(args))
    try:
        pool = await resolve_pool(args, client)
        keys = PoolKeys.parse(pool.ref)
        if args.dlq_command == "list":
            found = await dead_letters.list_dead(client, keys, args.count)
            if args.json:
                print(json.dumps([item.to_json() for item in found], indent=2))
                return 0
            table = Table(title=f"dead letters of {pool.ref}")
            for column in ("id", "task_id", "tier", "deliveries", "reason", "error"):
                table.add_column(column)
            for item in found:
                table.add_row(
                    item.id, item.task_id, item.source_tier, str(item.deliveries), item.reason, item.error[:80]
                )
            console.print(table)
        elif args.dlq_command == "replay":
            replayed = await dead_letters.replay(client, keys, args.ids, args.tier, pool.spec.tier_names)
            console.print(f"replayed {len(replayed)} dead letter(s)")
        else:
            console.print(f"purged {await dead_letters.purge(client, keys, args.ids)} dead letter(s)")
        return 0
    finally:
        await client.aclose()


# --- validate --------------------------------------------------------------------------------------------------


def validate(args: argparse.Namespace) -> int:
    bad = 0
    for path in args.files:
        try:
            pool = load_pool_file(path)
        except SpecError as error:
            bad += 1
            for field, message in error.violations:
                print(f"{path}: {field}: {message}")
            continue
        except OSError as error:
            bad += 1
            print(f"{path}: cannot read: {error.strerror}")
            continue
        spec = pool.spec
        print(
            f"{path}: ok: pool {pool.ref}, tiers {'/'.join(spec.tier_names)}, "
            f"replicas {spec.replicas.min}-{spec.replicas.max}, scaling {spec.scaling.policy.value}"
        )
    return 1 if bad else 0


# --- local mode and the CRD ------------------------------------------------------------------------------------


def local(args: argparse.Namespace) -> int:
    from tierpool.local.runner import LocalSettings, run_local

    logs.configure("text", "WARNING")
    try:
        pool = load_pool_file(args.file)
    except SpecError as error:
        return fail(str(error))
    settings = LocalSettings(
        pool=pool,
        redis_url=args.redis_url,
        load=args.load,
        duration=args.duration,
        summary_json=args.summary_json,
        plot=args.plot,
        live=not args.no_live,
        fifo=args.fifo,
    )
    summary = run_local(settings, console)
    return 0 if summary["tasks"]["lost"] == 0 else 1


def crd(args: argparse.Namespace) -> int:
    from tierpool.crd import crd_yaml

    print(crd_yaml(), end="")
    return 0
