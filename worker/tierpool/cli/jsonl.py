"""``tierpool submit --from-jsonl FILE``: one task per line, each checked as ``tierpool submit`` checks its flags.

A line is ``{"tier", "payload", "task_id"?, "timeout"?, "delay"?, "not_before"?, "rate_limit"?, "cost"?,
"tenant"?, "task"?}``. A line that names an App task of the pool's handler (imported from the current folder, as
``--task`` does: tierpool.cli.app_tasks) is a typed submit: its payload is checked against the task's input model
and the task's defaults fill what the line leaves out, its tier too. When the handler does not import here, the
name is written as it is and the line needs its ``tier``. Any bad line stops the submit before anything is
written, naming the file and line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

from tierpool.cli.app_tasks import task_and_tier
from tierpool.model.resource import AgentPool
from tierpool.protocol.apps import TaskDef, typed_request
from tierpool.protocol.submission import SubmitError, TaskRequest

OPTIONS = ("timeout", "delay", "not_before", "rate_limit", "cost", "tenant")
SHAPE = (
    '{"tier", "payload", "task_id"?, "timeout"?, "delay"?, "not_before"?, "rate_limit"?, "cost"?, "tenant"?, "task"?}'
)
Found = tuple[TaskDef[Any, Any] | None, str | None]
"""A line's App task (None: the name is written as it is) and its tier (tierpool.cli.app_tasks.task_and_tier)."""


def jsonl_requests(path: str, pool: AgentPool) -> Iterator[TaskRequest]:
    """The requests of a JSON Lines file (``-``: standard input), in order; SubmitError naming the first bad line."""
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    tasks: dict[tuple[str, str | None], Found] = {}
    try:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                yield _request(json.loads(line), pool, tasks)
            except (json.JSONDecodeError, TypeError, AttributeError) as error:
                raise SubmitError(f"{path}:{number}: expected {SHAPE}: {error}") from None
            except SubmitError as error:
                raise SubmitError(f"{path}:{number}: {error}") from None
    finally:
        if stream is not sys.stdin:
            stream.close()


def _request(
    item: dict[str, Any],
    pool: AgentPool,
    tasks: dict[tuple[str, str | None], tuple[TaskDef[Any, Any] | None, str | None]],
) -> TaskRequest:
    options = {key: item[key] for key in OPTIONS if key in item}
    name, tier, payload, task_id = item.get("task"), item.get("tier"), item.get("payload", {}), item.get("task_id")
    if name is None:
        if tier is None:
            raise SubmitError(f'a line without "task" needs "tier" (expected {SHAPE})')
        return TaskRequest(tier, payload, task_id, **options)
    if (name, tier) not in tasks:  # the handler is imported once, each name looked up once
        tasks[name, tier] = task_and_tier(pool, name, tier)
    definition, tier = tasks[name, tier]
    if definition is None:
        return TaskRequest(str(tier), payload, task_id, task=name, **options)
    return typed_request(definition, payload, task_id, **options)
