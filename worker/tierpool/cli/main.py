"""The ``tierpool`` command line: argument parsing only. ``tierpool worker`` runs from tierpool.cli.worker
(which imports only what a worker runs), every other command from tierpool.cli.commands; either is imported only after
a worker has installed its signal handling (tierpool.runtime.stopping)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tierpool._version import __version__


def _pool_args(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--file", "-f", help="AgentPool YAML file (the pool is its metadata namespace/name)")
    where.add_argument(
        "--pool", "-p", help="NAMESPACE/NAME of a pool whose spec a worker or the operator has published"
    )
    parser.add_argument("--redis-url", help="Redis URL (default: $TIERPOOL_REDIS_URL or redis://localhost:6379/0)")
    parser.add_argument(
        "--redis-mode",
        choices=["standalone", "cluster", "sentinel"],
        help="standalone, cluster (any seed node's URL) or sentinel (with --sentinels and --master-name) "
        "(default: $TIERPOOL_REDIS_MODE, else the pool file's)",
    )
    parser.add_argument(
        "--sentinels",
        metavar="HOST:PORT,...",
        help="sentinel addresses (default: $TIERPOOL_REDIS_SENTINELS, else the pool file's redis.sentinel); their "
        "password from $TIERPOOL_REDIS_SENTINEL_PASSWORD",
    )
    parser.add_argument(
        "--master-name", help="the master the sentinels monitor (default: $TIERPOOL_REDIS_MASTER_NAME, else the file's)"
    )


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
DURATION_HELP = "a duration: 30 (seconds), 30s, 5m, 1h, 250ms"


def duration(text: str) -> float:
    """The argparse type of every flag that takes a time: seconds, from ``30``, ``30s``, ``5m``, ``1h`` or
    ``250ms`` (tierpool.model.durations)."""
    from tierpool.model.durations import parse_duration_flag  # here: pydantic only once a time flag is given

    try:
        return parse_duration_flag(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _global_flags(parser: argparse.ArgumentParser, *, on_command: bool) -> None:
    """The flags every command takes, before or after its name. A command's parser has them with SUPPRESS defaults:
    it sets them only when they are given, never overwriting the top-level value with a default."""

    def default(value: str | None) -> str | None:
        return argparse.SUPPRESS if on_command else value

    parser.add_argument(
        "--log-format", choices=["text", "json"], default=default(None), help="log format (default: text)"
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default=default(None),
        help="the lowest level logged, any case (default: INFO for `worker`, WARNING for the other commands)",
    )


def _on_every_command(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                _global_flags(command, on_command=True)
                _on_every_command(command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierpool",
        description="Priority-tiered agent worker pools on Redis Streams.",
        epilog=f"DURATION is {DURATION_HELP}. The global flags go before or after the command.",
    )
    parser.add_argument("--version", action="version", version=f"tierpool {__version__}")
    _global_flags(parser, on_command=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _runtime_commands(sub)
    _pool_commands(sub)
    _tooling_commands(sub)
    _on_every_command(parser)
    return parser


def _runtime_commands(sub: Any) -> None:
    worker = sub.add_parser("worker", help="run a worker process")
    _pool_args(worker)
    worker.add_argument("--handler", help="module:function (default: spec.worker.handler)")
    worker.add_argument("--concurrency", type=int, help="tasks at once (default: spec.worker.concurrency)")
    worker.add_argument(
        "--metrics-port",
        type=int,
        help="port for /metrics, /healthz, /readyz (default: spec.worker.metricsPort; 0 = off)",
    )
    worker.add_argument("--consumer", help="consumer name (default: HOSTNAME-PID-random)")
    worker.add_argument(
        "--grace", type=duration, metavar="DURATION", help="drain time after SIGTERM (default: from the spec)"
    )
    worker.add_argument("--no-maintenance", action="store_true", help="never hold the escalator lease")
    worker.set_defaults(run="worker")


def _submit_command(sub: Any) -> None:
    submit = sub.add_parser("submit", help="enqueue tasks")
    _pool_args(submit)
    what = submit.add_mutually_exclusive_group()
    what.add_argument("--tier", "-t", help="tier name (or --task, or --from-jsonl)")
    submit.add_argument("--task", metavar="NAME", help="the App task to run; its default tier applies without --tier")
    submit.add_argument("--payload", default="{}", help="JSON payload")
    submit.add_argument("--task-id", help="idempotency key (default: a new UUID)")
    submit.add_argument(
        "--deadline", type=duration, metavar="DURATION", help="give up on the task if it has not started by then"
    )
    submit.add_argument(
        "--timeout", type=duration, metavar="DURATION", help="time limit of each run (default: tasks.timeout)"
    )
    submit.add_argument("--delay", type=duration, metavar="DURATION", help="make the task visible only after this")
    submit.add_argument("--not-before", metavar="TIME", help="make it visible only at this ISO 8601 time, with offset")
    submit.add_argument("--rate-limit", metavar="NAME", help="draw it from this spec.rateLimits entry")
    submit.add_argument("--cost", type=int, help="tokens it draws from the rate limit's tokensPerMinute (default 1)")
    submit.add_argument("--tenant", help="who the task is for; tiers with tenantConcurrency take turns by tenant")
    submit.add_argument("--wait", type=duration, metavar="DURATION", help="wait this long for the result and print it")
    what.add_argument(
        "--from-jsonl",
        metavar="FILE",
        help='one task per line: {"tier", "payload", "task_id"?, "timeout"?, "delay"? (seconds), "not_before"?, '
        '"rate_limit"?, "cost"?, "tenant"?, "task"?} ("-" = stdin)',
    )
    submit.set_defaults(run="submit")


def _pool_commands(sub: Any) -> None:
    _submit_command(sub)

    status = sub.add_parser("status", help="per-tier backlog, pending, oldest age, consumers, DLQ size")
    _pool_args(status)
    status.add_argument("--json", action="store_true", help="print the stable JSON form")
    status.set_defaults(run="status")

    result = sub.add_parser("result", help="print a task's result record")
    _pool_args(result)
    result.add_argument("task_id", help="the task's id (as submit printed it)")
    result.add_argument(
        "--wait", type=duration, default="0s", metavar="DURATION", help="wait this long for the result to be written"
    )
    result.set_defaults(run="result")

    cancel = sub.add_parser("cancel", help="cancel a task: a waiting one never runs, a running one is stopped")
    _pool_args(cancel)
    cancel.add_argument("task_ids", nargs="+", metavar="TASK_ID", help="one or more (cancelled in one round trip)")
    cancel.add_argument(
        "--json", action="store_true", help='print one {"task_id", "state", "cancelled", "result"} line per task'
    )
    cancel.add_argument(
        "--undo", action="store_true", help="take a cancel back (delete its marker) unless a worker acted on it already"
    )
    cancel.set_defaults(run="cancel")

    watch = sub.add_parser("watch", help="follow a task's progress events until its result (exit code: its status)")
    _pool_args(watch)
    watch.add_argument("task_id", help="the task's id (as submit printed it)")
    watch.add_argument("--timeout", type=duration, default="1h", metavar="DURATION", help="give up after this long")
    watch.set_defaults(run="watch")

    dlq = sub.add_parser("dlq", help="list, replay or purge dead-lettered tasks")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    for action, help_text in (("list", "show dead letters"), ("replay", "re-enqueue"), ("purge", "delete")):
        cmd = dlq_sub.add_parser(action, help=help_text)
        _pool_args(cmd)
        cmd.add_argument("--json", action="store_true", help="print JSON (one object per dead letter, or a summary)")
        if action == "list":
            cmd.add_argument("--count", type=int, default=100, help="show at most this many")
        else:
            cmd.add_argument("ids", nargs="*", help="dead-letter entry IDs (default: all)")
        if action == "replay":
            cmd.add_argument("--tier", help="replay into this tier instead of the source tier")
        if action == "purge":
            cmd.add_argument(
                "--yes", "-y", action="store_true", help="do not ask first (needed when stdin is not a terminal)"
            )
    dlq.set_defaults(run="dlq")


def _tooling_commands(sub: Any) -> None:
    validate = sub.add_parser("validate", help="check AgentPool files against the model (same rules as the CRD)")
    validate.add_argument(
        "files",
        nargs="+",
        metavar="PATH",
        help="AgentPool files (every document) and folders (their *.yaml and *.yml files)",
    )
    validate.set_defaults(run="validate")

    local = sub.add_parser("local", help="run a pool on this machine: embedded Valkey, worker processes, the scaler")
    local.add_argument("file", help="AgentPool YAML file")
    local.add_argument("--redis-url", help="use this Redis instead of an embedded Valkey")
    local.add_argument("--load", default="seed", choices=["seed", "burst", "none"], help="built-in load profile")
    local.add_argument(
        "--duration", type=duration, default="60s", metavar="DURATION", help="load time (then it drains)"
    )
    local.add_argument("--summary-json", type=Path, help="write the run summary (documented JSON) here")
    local.add_argument("--plot", type=Path, help="write a PNG timeline here")
    local.add_argument("--no-live", action="store_true", help="no live table (for logs and CI)")
    local.add_argument("--fifo", action="store_true", help="baseline: the same load through one FIFO stream")
    local.set_defaults(run="local")

    crd = sub.add_parser("crd", help="print the AgentPool CustomResourceDefinition generated from the model")
    crd.set_defaults(run="crd")

    acl = sub.add_parser("acl", help="print the Redis ACL user of a role (worker, producer, admin, operator)")
    acl.add_argument("role", choices=["worker", "producer", "admin", "operator"], help="whose ACL user to print")
    acl.add_argument("--pool", "-p", action="append", default=[], help="NAMESPACE/NAME (repeat for more pools)")
    acl.add_argument(
        "--file",
        "-f",
        action="append",
        default=[],
        help="an AgentPool file: its pool, with the streams it adopts (tiers[].stream); repeat for more pools",
    )
    acl.add_argument("--user", help="the ACL user name (default: tierpool-ROLE)")
    acl.add_argument(
        "--format",
        choices=["command", "aclfile"],
        default="command",
        help="an ACL SETUSER command (default) or a users.acl line; the password from $TIERPOOL_ACL_PASSWORD, "
        "printed only as its SHA-256",
    )
    acl.add_argument(
        "--redis-mode",
        choices=["standalone", "cluster", "sentinel"],
        default="standalone",
        help="cluster adds the commands redis-py's cluster client needs (default: standalone)",
    )
    acl.set_defaults(run="acl")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.run == "submit" and not (args.tier or args.task or args.from_jsonl):
        parser.error("submit needs one of the arguments --tier/-t, --task or --from-jsonl")
    if args.run == "worker":
        # First, before the heavy imports below: a SIGTERM during start-up is then a stop request, not death.
        from tierpool.runtime.stopping import STOP

        STOP.install()
        from tierpool.cli.worker import worker

        return worker(args)
    from tierpool.cli import commands
    from tierpool.runtime import logs

    logs.configure(args.log_format or "text", args.log_level or "WARNING")
    return int(getattr(commands, args.run)(args))


if __name__ == "__main__":
    sys.exit(main())
