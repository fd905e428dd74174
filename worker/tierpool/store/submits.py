"""Submitting tasks, one or many at once (``Client.submit_many``, its async twin, and a worker's ``task.spawn``),
written once as a plan (tierpool.store.plans).

Every request is validated before anything is written, so a bad one leaves nothing half-submitted. The writes go
in pipelined chunks of ``BATCH_CHUNK``, each script call by EVALSHA: the calls a server refuses with NOSCRIPT (a
fresh server, or in a cluster the shard that serves the pool) are sent again once their scripts are loaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from redis.exceptions import NoScriptError

from tierpool import scripts
from tierpool.model.durations import ms_floor, now_ms
from tierpool.model.keys import PoolKeys
from tierpool.model.spec import PoolSpec
from tierpool.protocol import tenancy, trace_context
from tierpool.protocol.submission import Submission, TaskRequest, prepare
from tierpool.store.plans import Batch, Command, Plan, call
from tierpool.store.replication import Wait, WaitGate

BATCH_CHUNK = 1000
SCRIPT_ATTEMPTS = 3
SubmitCall = tuple[str | None, list[str], list[Any]]
"""One queued write of a submit: (the script's name, or None for a plain XADD; its keys; its arguments)."""


def submit_plan(
    spec: PoolSpec,
    keys: PoolKeys,
    requests: Iterable[TaskRequest],
    gate: WaitGate,
    clock: Callable[[], float] = time.time,
    trace: Mapping[str, str] | None = None,
) -> Plan[list[str]]:
    """Validate all, then enqueue in pipelined chunks (with the gate's WAIT, if any, after each); the task_ids in
    order. NoScriptError when calls are still refused after their scripts were loaded ``SCRIPT_ATTEMPTS`` times.
    ``trace``: the trace context fields to write when there is no current span (a spawning task's own)."""
    prepared = _prepare_all(spec, keys, requests, clock, trace)
    calls = _submit_calls(keys, ms_floor(spec.tasks.dedupe_window), prepared)
    for start in range(0, len(calls), BATCH_CHUNK):
        todo = calls[start : start + BATCH_CHUNK]
        for _ in range(SCRIPT_ATTEMPTS):
            wait = gate.current()
            replies = yield Batch([*map(_command, todo), *_wait_commands(wait)])
            todo = _script_missing(todo, gate.split(replies, wait, "submits"))
            if not todo:
                break
            for name in dict.fromkeys(name for name, _, _ in todo if name):
                yield call("script_load", scripts.source(name))  # on the client: on every primary, in cluster mode
        else:
            raise NoScriptError(f"{len(todo)} submit(s) refused with NOSCRIPT after loading the scripts")
    return [item.task_id for item in prepared]


def _prepare_all(
    spec: PoolSpec,
    keys: PoolKeys,
    requests: Iterable[TaskRequest],
    clock: Callable[[], float] = time.time,
    fallback: Mapping[str, str] | None = None,
) -> list[Submission]:
    """Validate every request before anything is written, so a bad one leaves nothing half-submitted. Each carries
    the producer's current trace context (one span's, for the whole batch), else ``fallback``."""
    now, trace = now_ms(clock), trace_context.current_fields() or dict(fallback or {})
    return [prepare(spec, keys, request, now, trace) for request in requests]


def _submit_calls(keys: PoolKeys, ttl: int, prepared: Sequence[Submission]) -> list[SubmitCall]:
    """The write of each prepared task: the schedule, tenant-gate, dedupe or plain submit script, each of which also
    writes the task's place in the task-id index (``…:where``). Pure."""
    calls: list[SubmitCall] = []
    for item in prepared:
        if item.scheduled:
            calls.append(("SCHEDULE", _schedule_keys(keys, item), _schedule_args(ttl, item)))
        elif item.gate:
            args = tenancy.submit_args(item.gate, ttl if item.dedupe_key else 0, item.fields)
            calls.append(("SUBMIT_GATED", [*item.gate.keys, keys.where], list(args)))
        elif item.dedupe_key:
            calls.append(("SUBMIT_ONCE", [item.stream, item.dedupe_key, keys.where], [ttl, *_flat(item)]))
        else:
            calls.append(("SUBMIT", [item.stream, keys.where], list(_flat(item))))
    return calls


def _command(submit: SubmitCall) -> Command:
    """The call as a command, by EVALSHA (the server may not know the script yet: see :func:`_script_missing`)."""
    name, keys, args = submit
    if name is None:
        return call("execute_command", "XADD", keys[0], "*", *args)
    # by name: redis-py's cluster pipelines refuse the .evalsha() method, not the command
    return call("execute_command", *scripts.evalsha_command(name, keys, args))


def _wait_commands(wait: Wait | None) -> list[Command]:
    """The WAIT for the batch's writes, as its last command (see tierpool.store.replication)."""
    return [] if wait is None else [call("execute_command", "WAIT", wait.replicas, wait.timeout_ms)]


def _script_missing(calls: Sequence[SubmitCall], replies: Sequence[Any]) -> list[SubmitCall]:
    """The calls to send again after loading their scripts: those the server refused with NOSCRIPT (a fresh server,
    or in a cluster the shard that serves the pool, which redis-py's cluster pipelines do not load scripts on).
    Such a call did nothing, so sending it again is safe. Any other error is raised, as a pipeline would. Pure."""
    for reply in replies:
        if isinstance(reply, Exception) and not isinstance(reply, NoScriptError):
            raise reply
    return [submit for submit, reply in zip(calls, replies, strict=True) if isinstance(reply, NoScriptError)]


def _flat(item: Submission) -> Sequence[str]:
    return [part for pair in item.fields.items() for part in pair]


def _schedule_keys(keys: PoolKeys, item: Submission) -> list[str]:
    return [keys.due, item.stream, item.dedupe_key or keys.dedupe(item.task_id), keys.where]


def _schedule_args(ttl: int, item: Submission) -> list[Any]:
    dedupe_ttl = ttl if item.dedupe_key else 0
    gated = "1" if item.gate is not None else "0"
    return [dedupe_ttl, item.delay_ms, item.not_before_ms, item.fields["tier"], gated, *_flat(item)]
