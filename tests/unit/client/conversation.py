"""Driving a plan (tierpool.store.plans) by hand, without a server: each step it yields is checked against a table
of expected steps, and answered with that row's scripted reply."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tierpool import scripts
from tierpool.store.plans import Command, Emit, Plan, R, Step

Exchange = tuple[Any, Any]
"""A step the plan must yield next (as the view shows it) and the reply it gets (None after an Emit)."""
NAMES = {"SUBMIT": "submit", "SUBMIT_ONCE": "once", "SCHEDULE": "schedule", "SUBMIT_GATED": "gated", "CANCEL": "cancel"}
SCRIPTS = {scripts.source(name): short for name, short in NAMES.items()}
SHAS = {scripts.sha(name): short for name, short in NAMES.items()}


def converse(plan: Plan[R], exchanges: Sequence[Exchange], view: Callable[[Step], Any] = lambda step: step) -> R:
    """Run ``plan`` through ``exchanges`` and return its result; it must end right after the last one. An error the
    plan raises comes out of here."""
    reply: Any = None
    for number, (expected, scripted) in enumerate(exchanges):
        step = plan.send(reply)
        assert view(step) == expected, f"step {number}"
        reply = scripted
    try:
        step = plan.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    pytest.fail(f"unexpected step {view(step)!r}")


def named(step: Step) -> str:
    """A step as a short text: ``get``, ``EVALSHA once + WAIT``, ``emit``, ``script_load schedule``."""
    if isinstance(step, Emit):
        return "emit"
    if isinstance(step, Command):
        return _named(step)
    return " + ".join(_named(command) for command in step) + (" (transaction)" if step.transaction else "")


def _named(command: Command) -> str:
    if command.name == "script_load":
        return f"script_load {SCRIPTS[command.args[0]]}"
    if command.name != "execute_command":
        return command.name
    word, *rest = command.args
    if word == "EVALSHA":
        return f"EVALSHA {SHAS[rest[0]]}"
    if word == "EVAL":
        return f"EVAL {SCRIPTS[rest[0]]}"
    return str(word)
