"""``tierpool submit --task NAME``: find the App task the pool's handler defines, for its input model and defaults.

The pool's ``worker.handler`` is imported from the current folder (as ``tierpool worker`` imports it). When it is an
App with that task, the submit is typed: the payload is checked against the input model and the task's defaults
(tier, timeout, rate limit, ...) fill what the flags leave out. When the handler cannot be imported here, the
entry is written with the name as it is, and ``--tier`` must say where it goes; the worker still refuses a name
its App does not know, and input its model refuses.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tierpool.model.resource import AgentPool
from tierpool.protocol.apps import App, TaskDef
from tierpool.protocol.submission import SubmitError
from tierpool.runtime.handler_loading import HandlerNotFound, import_from, load_handler


def app_task(pool: AgentPool, name: str) -> TaskDef[Any, Any] | str:
    """The pool's App task ``name``, or why it cannot be read here (a handler that does not import, or is no App).
    SubmitError for an App that has no such task."""
    path = pool.spec.worker.handler
    import_from(os.getcwd(), sys.path)
    try:
        handler = load_handler(path)
    except HandlerNotFound as error:
        return str(error)
    if not isinstance(handler, App):
        return f"handler {path!r} is not an App"
    found = handler.tasks.get(name)
    if found is None:
        raise SubmitError(f"unknown task {name!r}; the app {path!r} has {', '.join(sorted(handler.tasks))}")
    return found


def task_and_tier(pool: AgentPool, name: str, tier: str | None) -> tuple[TaskDef[Any, Any] | None, str | None]:
    """The typed task to submit (None: write the name as it is) and the tier flag; SubmitError when neither the
    task's default nor ``--tier`` gives a tier."""
    found = app_task(pool, name)
    if isinstance(found, TaskDef):
        return (found if tier is None else found.using(tier=tier)), tier
    if tier is None:
        raise SubmitError(f"--task {name} needs --tier: its defaults are unknown here ({found})")
    return None, tier
