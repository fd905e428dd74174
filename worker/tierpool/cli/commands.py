"""The CLI commands. Each reads its configuration once, here at the edge, then calls the library. The commands
about one task (result, cancel, watch) are in tierpool.cli.task_commands."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.table import Table

from tierpool.cli.app_tasks import task_and_tier
from tierpool.cli.exits import Exit
from tierpool.cli.jsonl import jsonl_requests
from tierpool.cli.support import confirm, connect, console, errors, fail, print_whole, run_async
from tierpool.cli.task_commands import cancel, print_result, result, watch  # noqa: F401 - main() dispatches by name
from tierpool.client.producer import AsyncClient
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import SpecError, check_pool_file, load_pool_file, pool_files
from tierpool.model.spec import RedisMode
from tierpool.protocol import acl as redis_acl
from tierpool.protocol.submission import SubmitError
from tierpool.scaling.observation import PoolObservation
from tierpool.store import dlq as dead_letters
from tierpool.store.observe import active_idle_seconds, add_held_counts, held_counts, observe, stranded_counts

# --- producer commands -----------------------------------------------------------------------------------------


def submit(args: argparse.Namespace) -> int:
    return run_async(_submit(args))


async def _submit(args: argparse.Namespace) -> int:
    client, pool = await connect(args)
    try:
        producer = await AsyncClient.create(client, pool)
        if args.from_jsonl:
            ids = await producer.submit_many(list(jsonl_requests(args.from_jsonl, pool)))
            console.print(f"submitted {len(ids)} task(s) to {producer.keys.ref}")
            return 0
        try:
            payload = json.loads(args.payload)
        except json.JSONDecodeError as error:
            raise SubmitError(f"--payload is not JSON: {error}") from None
        deadline = None if args.deadline is None else timedelta(seconds=args.deadline)
        later = {
            "delay": args.delay,
            "not_before": args.not_before,
            "rate_limit": args.rate_limit,
            "cost": args.cost,
            "tenant": args.tenant,
        }
        definition, tier = task_and_tier(pool, args.task, args.tier) if args.task else (None, args.tier)
        if definition is not None:
            handle = await producer.submit(definition, payload, args.task_id, deadline, args.timeout, **later)
            task_id = handle.id
        else:
            later["task"] = args.task
            task_id = await producer.submit(str(tier), payload, args.task_id, deadline, args.timeout, **later)
        print(task_id)
        if args.wait:
            return await print_result(producer.wait_result(task_id, args.wait))
        return 0
    finally:
        await client.aclose()


# --- status and DLQ --------------------------------------------------------------------------------------------


def status(args: argparse.Namespace) -> int:
    return run_async(_status(args))


async def _status(args: argparse.Namespace) -> int:
    client, pool = await connect(args)
    try:
        recovery = pool.spec.recovery
        active_idle = active_idle_seconds(recovery.heartbeat, recovery.claim_idle)
        observation = await observe(client, pool.keys, pool.spec.tier_names, active_idle, recovery.claim_idle)
        held = await held_counts(client, pool.keys, pool.spec.tier_names)
        lost_tiers = await stranded_counts(client, pool.keys)
    finally:
        await client.aclose()
    if args.json:
        print(json.dumps(add_held_counts(observation.to_status(), held) | {"stranded": lost_tiers}, indent=2))
    else:
        console.print(status_table(observation, {t.name: t.sla for t in pool.spec.tiers}, held))
        if lost_tiers["total"]:
            where = ", ".join(f"{tier}: {n}" for tier, n in sorted(lost_tiers["tiers"].items()))
            console.print(f"[yellow]stranded: {lost_tiers['total']} scheduled task(s) for unknown tiers ({where})[/]")
    return 0


def status_table(
    observation: PoolObservation, slas: dict[str, float | None], held: dict[str, tuple[int, int]] | None = None
) -> Table:
    title = f"pool {observation.pool}  (dead letters: {observation.dlq}, scheduled: {observation.scheduled}"
    table = Table(title=f"{title}, throttled: {observation.throttled})")
    for column in ("tier", "backlog", "pending", "oldest wait", "sla", "consumers", "length", "held"):
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
            str((held or {}).get(tier.name, (0, 0))[0]),
        )
    return table


def dlq(args: argparse.Namespace) -> int:
    if args.dlq_command == "purge" and not args.yes and not sys.stdin.isatty():
        return fail("dlq purge deletes dead letters for good; with no terminal to ask on, pass --yes", Exit.USAGE)
    return run_async(_dlq(args))


async def _dlq(args: argparse.Namespace) -> int:
    client, pool = await connect(args)
    try:
        keys = pool.keys
        if args.dlq_command == "list":
            found = await dead_letters.list_dead(client, keys, args.count)
            if args.json:
                print(json.dumps([item.to_json() for item in found], indent=2))
                return 0
            print_whole(dlq_table(pool.ref, found))
        elif args.dlq_command == "replay":
            spec = pool.spec
            replayed = await dead_letters.replay(client, keys, args.ids, args.tier, spec.tier_names, spec.tenant_limits)
            console.print(f"replayed {len(replayed)} dead letter(s)")
        else:
            return await _purge(args, client, keys)
        return 0
    finally:
        await client.aclose()


async def _purge(args: argparse.Namespace, client: Any, keys: PoolKeys) -> int:
    """``dlq purge``: asks first on a terminal unless ``--yes`` (``dlq`` refuses before this without a terminal)."""
    if not args.yes:
        count = len(args.ids) if args.ids else await dead_letters.count_dead(client, keys)
        which = f"{count} dead letter(s)" if args.ids else f"all {count} dead letter(s)"
        if not confirm(f"delete {which} of {keys.ref} for good?"):
            errors.print("nothing purged")
            return Exit.ERROR
    console.print(f"purged {await dead_letters.purge(client, keys, args.ids)} dead letter(s)")
    return Exit.OK


def dlq_table(ref: str, found: list[dead_letters.DeadLetter]) -> Table:
    """The dead letters as a table; the ids whole (they are what ``replay`` and ``purge`` take), the rest folded."""
    table = Table(title=f"dead letters of {ref}")
    for column in ("id", "task_id", "tier", "deliveries"):
        table.add_column(column, no_wrap=True)
    for column in ("reason", "error"):
        table.add_column(column, overflow="fold")
    for item in map(dead_letters.DeadLetter.to_json, found):  # readable: a bad byte shows as U+FFFD
        row = (item["id"], item["task_id"], item["source_tier"], str(item["deliveries"]), item["reason"])
        table.add_row(*row, item["error"][:80])
    return table


# --- validate --------------------------------------------------------------------------------------------------


def validate(args: argparse.Namespace) -> int:
    """Every AgentPool document of each file, and of each ``*.yaml``/``*.yml`` file of each folder; exit code 1 when
    any is invalid."""
    bad = 0
    for given in map(Path, args.files):
        in_folder = given.is_dir()
        files = pool_files(given) if in_folder else [given]
        if not files:
            print(f"{given}: no *.yaml or *.yml files in the folder")
            bad += 1
        bad += sum(_validate_file(path, in_folder) for path in files)
    return 1 if bad else 0


def _validate_file(path: Path, in_folder: bool) -> int:
    """Print one line per AgentPool document of ``path`` (one per violation); the number of invalid ones."""
    try:
        checks = check_pool_file(path)
    except SpecError as error:
        print("\n".join(f"{path}: {field}: {message}" for field, message in error.violations))
        return 1
    except OSError as error:
        print(f"{path}: cannot read: {error.strerror}")
        return 1
    if not checks:
        print(f"{path}: {'skipped: ' if in_folder else ''}no document with kind: AgentPool")
        return 0 if in_folder else 1
    for check in checks:
        if check.error:
            print("\n".join(f"{check.error.source}: {field}: {message}" for field, message in check.error.violations))
        elif check.pool:
            spec = check.pool.spec
            print(
                f"{path}: document {check.index}: ok: pool {check.pool.ref}, tiers {'/'.join(spec.tier_names)}, "
                f"replicas {spec.replicas.min}-{spec.replicas.max}, scaling {spec.scaling.policy.value}"
            )
    return sum(1 for check in checks if check.error)


# --- local mode and the CRD ------------------------------------------------------------------------------------


def local(args: argparse.Namespace) -> int:
    from tierpool.local.runner import LocalSettings, run_local
    from tierpool.local.supervisor import HandlerNotLoaded

    try:
        pool = load_pool_file(args.file)
    except SpecError as error:
        return fail(str(error))
    if pool.spec.redis.mode is not RedisMode.STANDALONE:
        return fail(
            f"tierpool local runs its workers on one standalone Redis (embedded, or --redis-url); spec.redis.mode "
            f"{pool.spec.redis.mode.value} is not supported here: run `tierpool worker --file` against that Redis"
        )
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
    try:
        summary = run_local(settings, console)
    except HandlerNotLoaded as error:
        return fail(str(error))
    if summary is None:  # SIGTERM
        console.print("terminated: the workers drained and stopped; no summary")
        return 130
    return 0 if summary["tasks"]["lost"] == 0 else 1


def crd(args: argparse.Namespace) -> int:
    from tierpool.model.crd import crd_yaml

    print(crd_yaml(), end="")
    return 0


ACL_PASSWORD_ENV = "TIERPOOL_ACL_PASSWORD"  # noqa: S105 - a variable name, not a secret


def acl(args: argparse.Namespace) -> int:
    """Print the ACL user of a role for the pools (tierpool.protocol.acl); the password only as its SHA-256."""
    password = os.environ.get(ACL_PASSWORD_ENV) or None
    render = redis_acl.aclfile_line if args.format == "aclfile" else redis_acl.setuser_command
    try:
        pools = [PoolKeys.parse(ref) for ref in args.pool] + [load_pool_file(path).keys for path in args.file]
        if not pools:
            return fail("say which pools: --pool NAMESPACE/NAME or --file pool.yaml (repeat for more)")
        line = render(
            args.user or f"tierpool-{args.role}",
            redis_acl.Role(args.role),
            pools,
            redis_acl.password_rule(password) if password else None,
            args.redis_mode == RedisMode.CLUSTER,
        )
    except (ValueError, SpecError) as error:
        return fail(str(error))
    print(line)
    if password is None:
        print(f"note: no password: set ${ACL_PASSWORD_ENV} (printed as its SHA-256) or add >PASSWORD", file=sys.stderr)
    return 0
