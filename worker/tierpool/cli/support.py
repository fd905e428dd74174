"""What every CLI command shares: the consoles, finding the pool and its Redis, and running a command coroutine
with the expected user errors turned into one clear line (the commands themselves are in tierpool.cli.commands)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from tierpool.cli.config import pool_without_redis, redis_settings
from tierpool.cli.exits import Exit
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import AgentPool, pool_from_spec
from tierpool.runtime.failures import EXPECTED_ERRORS, describe
from tierpool.store import drivers
from tierpool.store.connection import async_client
from tierpool.store.registry import load_spec_plan

console = Console()
errors = Console(stderr=True, soft_wrap=True)
"""Error lines are never wrapped: rich would break them at 80 columns whenever stderr is not a terminal."""
MAX_TABLE_WIDTH = 10_000


class UsageError(Exception):
    """Arguments that cannot work together, found after parsing (exit code 2, as argparse's own errors)."""


def confirm(question: str, stdin: TextIO | None = None) -> bool:
    """Ask a y/N question on stderr; True only for a yes (y, yes, any case)."""
    errors.print(f"{question} [y/N] ", end="", markup=False, highlight=False)
    answer = (stdin or sys.stdin).readline()
    return answer.strip().lower() in ("y", "yes")


def print_whole(table: Table) -> None:
    """Print a table at least as wide as its no-wrap columns need, wider than the console if it must: rich would
    otherwise cut their cells to fit (an id cut short cannot be copied)."""
    needed = Measurement.get(console, console.options.update_width(MAX_TABLE_WIDTH), table).minimum
    if needed <= console.width:
        console.print(table)
    else:
        Console(file=console.file, width=needed, force_terminal=console.is_terminal).print(table)


def fail(message: str, code: int = 1) -> int:
    errors.print(f"[bold red]error:[/] {message}", highlight=False)
    return code


async def resolve_pool(args: argparse.Namespace, connection: Any, known: AgentPool | None = None) -> AgentPool:
    """The pool known without Redis, else the spec a worker published under --pool."""
    if known is not None:
        return known
    if not args.pool:
        raise UsageError("say which pool: --file pool.yaml or --pool NAMESPACE/NAME")
    keys = PoolKeys.parse(args.pool)
    return pool_from_spec(keys.name, keys.namespace, await drivers.run_async(connection, load_spec_plan(keys)))


async def connect(args: argparse.Namespace) -> tuple[Any, AgentPool]:
    """A client for the pool's Redis (see :func:`redis_settings`) and the pool."""
    known = pool_without_redis(args)
    client = async_client(redis_settings(args, known))
    try:
        return client, await resolve_pool(args, client, known)
    except BaseException:
        await client.aclose()
        raise


def expected_failure(error: BaseException) -> int:
    """One clear line for an error of ``EXPECTED_ERRORS``; exit code 1."""
    return fail(describe(error))


def run_async(coro: Any) -> int:
    """Run a command coroutine, turning the expected user errors into one clear line and exit code 1 (2 for a
    usage error)."""
    try:
        return int(asyncio.run(coro))
    except UsageError as error:
        return fail(str(error), Exit.USAGE)
    except EXPECTED_ERRORS as error:
        return expected_failure(error)
