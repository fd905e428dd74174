"""The CLI commands about tasks: ``tierpool result``, ``cancel`` and ``watch``. Their exit codes come from one
table (tierpool.cli.exits)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable
from typing import Any

from tierpool.cli import exits
from tierpool.cli.exits import Exit
from tierpool.cli.support import connect, errors, run_async
from tierpool.client.producer import AsyncClient
from tierpool.client.tracking import CancelReport
from tierpool.protocol.submission import TaskResult
from tierpool.protocol.task_state import CancelState


async def print_result(waiting: Awaitable[TaskResult]) -> int:
    """Wait for a result record and print it: its status is the exit code; a wait that times out exits 5."""
    try:
        found = await waiting
    except TimeoutError as error:
        errors.print(f"[bold red]error:[/] {error}", highlight=False)
        return Exit.TIMED_OUT
    print(json.dumps(found.__dict__, indent=2, default=str))
    return exits.for_status(found.status)


def result(args: argparse.Namespace) -> int:
    return run_async(_result(args))


async def _result(args: argparse.Namespace) -> int:
    client, pool = await connect(args)
    try:
        producer = await AsyncClient.create(client, pool)
        if args.wait:
            return await print_result(producer.wait_result(args.task_id, args.wait))
        found = await producer.result(args.task_id)
        if found is None:
            errors.print(f"[bold red]error:[/] no result for task {args.task_id} (not finished, or its result expired)")
            return Exit.NOT_FOUND
        return await print_result(_ready(found))
    finally:
        await client.aclose()


async def _ready(found: TaskResult) -> TaskResult:
    return found


def cancel(args: argparse.Namespace) -> int:
    return run_async(_cancel(args))


def cancel_line(report: CancelReport) -> str:
    """What ``tierpool cancel`` prints for one task. Pure."""
    task_id = report.task_id
    if report.state is CancelState.UNKNOWN:
        return f"task {task_id} not found (never submitted, or finished and expired): nothing cancelled"
    if report.state is CancelState.FINISHED:
        status = report.result.status if report.result else "finished"
        return f"task {task_id} had finished already ({status}): nothing cancelled"
    return f"task {task_id} cancelled (it was {report.state.value})"


def cancel_json(report: CancelReport) -> dict[str, Any]:
    found = report.result.__dict__ if report.result else None
    return {"task_id": report.task_id, "state": report.state.value, "cancelled": report.cancelled, "result": found}


async def _cancel(args: argparse.Namespace) -> int:
    if args.undo:
        return await _uncancel(args)
    client, pool = await connect(args)
    try:
        reports = await (await AsyncClient.create(client, pool)).cancel_many(args.task_ids)
    finally:
        await client.aclose()
    for report in reports:
        if args.json:
            print(json.dumps(cancel_json(report), default=str))
        elif report.state is CancelState.UNKNOWN:
            errors.print(cancel_line(report))
        else:
            print(cancel_line(report))
    return exits.overall(exits.for_cancel(report.state) for report in reports)


async def _uncancel(args: argparse.Namespace) -> int:
    """``tierpool cancel --undo``: per task, 0 when a cancel marker was taken back, 3 when there was none."""
    client, pool = await connect(args)
    codes: list[int] = []
    try:
        producer = await AsyncClient.create(client, pool)
        for task_id in args.task_ids:
            removed = await producer.uncancel(task_id)
            found = await producer.result(task_id)
            codes.append(Exit.OK if removed else Exit.NOT_FOUND)
            _print_undo(task_id, removed, found.status if found else None, args.json)
    finally:
        await client.aclose()
    return exits.overall(codes)


def _print_undo(task_id: str, removed: bool, status: str | None, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"task_id": task_id, "undone": removed, "status": status}))
    elif not removed:
        errors.print(f"task {task_id} has no cancel to take back" + (f" (it is {status})" if status else ""))
    elif status == "cancelled":
        print(f"cancel of task {task_id} taken back, too late: its cancelled record was written already")
    else:
        print(f"cancel of task {task_id} taken back: it runs (unless a worker was stopping it already)")


def watch(args: argparse.Namespace) -> int:
    return run_async(_watch(args))


async def _watch(args: argparse.Namespace) -> int:
    """Print each event as one JSON line, then the result record; the exit code is its status (5: timed out)."""
    client, pool = await connect(args)
    try:
        producer = await AsyncClient.create(client, pool)
        try:
            async for item in producer.follow(args.task_id, args.timeout):
                if isinstance(item, TaskResult):
                    print(json.dumps(item.__dict__, default=str), flush=True)
                    return exits.for_status(item.status)
                print(json.dumps(item.to_json(), default=str), flush=True)
        except TimeoutError as error:
            errors.print(f"[bold red]error:[/] {error}", highlight=False)
            return Exit.TIMED_OUT
        return Exit.TIMED_OUT
    finally:
        await client.aclose()
