"""Structured logging: one JSON object per line (the default in a cluster) or plain text, with the password of every
Redis URL in a message, a traceback or a stack replaced by ``***`` (an exception's message often holds the URL).

Every line logged while a task runs, by the handler through the standard ``logging`` module too, carries the task's
``task_id``, ``task`` (its name), ``tier`` and ``attempt``: the worker sets them in a context variable around the run
(:func:`enter_run`), which the handler's thread of a sync handler inherits (tierpool.runtime.threads), and the
handler :func:`configure` installs adds them to each record (JSON fields; appended in brackets to a text line)."""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import IO, Any

from tierpool.model.redis_url import redact_urls_in

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
_DROPPED = {"settings", "k8s_skip"}
"""Extras never written: kopf attaches its whole OperatorSettings (about 1.5 KB as text) to every object line."""
RUN_FIELDS = ("task_id", "task", "tier", "attempt")
"""The fields of a line logged while a task runs."""
RunFields = tuple[str, str, str, int]
_RUN: ContextVar[RunFields | None] = ContextVar("tierpool_run", default=None)


def enter_run(task_id: str, name: str, tier: str, attempt: int) -> Token[RunFields | None]:
    """From here on, in this context (an asyncio task's, a thread's copy of it), lines carry this run's fields."""
    return _RUN.set((task_id, name, tier, attempt))


def leave_run(token: Token[RunFields | None]) -> None:
    _RUN.reset(token)


def current_run() -> RunFields | None:
    """The fields of the run in this context, or None outside a run."""
    return _RUN.get()


class RunContext(logging.Filter):
    """Adds the current run's fields to a record; an extra of the same name, passed by the caller, is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        run = _RUN.get()
        if run is not None:
            fields = record.__dict__
            for name, value in zip(RUN_FIELDS, run, strict=True):
                fields.setdefault(name, value)
        return True


class JsonFormatter(logging.Formatter):
    """Fields: time, level, logger, message, the kopf object (kind/namespace/name) when there is one, plus
    anything passed in ``extra`` (but not kopf's settings object). Text values are redacted one by one, before
    encoding: JSON would fold a traceback's lines into one and escape the quotes a password may hold."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        payload.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD and k not in _DROPPED})
        ref = payload.pop("k8s_ref", None)
        if isinstance(ref, dict):  # kopf's object reference: the object is what a reader greps for
            payload["object"] = f"{ref.get('kind')}/{ref.get('namespace')}/{ref.get('name')}"
        exception = record.exc_text or (self.formatException(record.exc_info) if record.exc_info else None)
        if exception:  # exc_text alone: a filter (the operator's RedactUrls) formatted it already
            payload["exception"] = exception
        if record.stack_info:
            payload["stack"] = self.formatStack(record.stack_info)
        return json.dumps(_redacted(payload))


def _redacted(value: Any) -> Any:
    """``value`` for JSON with every string in it redacted; what JSON has no type for becomes its redacted text."""
    if isinstance(value, str):
        return redact_urls_in(value)
    if isinstance(value, dict):
        return {str(k): _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact_urls_in(str(value))


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``, then ``[task_id=… task=… tier=… attempt=…]`` for a line of a run (see
    :class:`RunContext`), then any traceback (an exception's, or a failed task's passed as the extra ``traceback``),
    the whole redacted."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        if getattr(record, "task_id", None) is None:
            return text
        present = ((name, getattr(record, name, None)) for name in RUN_FIELDS)
        return text + " [" + " ".join(f"{name}={value}" for name, value in present if value is not None) + "]"

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        trace = getattr(record, "traceback", None)
        if isinstance(trace, str) and trace:
            text = f"{text}\n{trace.rstrip()}"
        return redact_urls_in(text)


def configure(fmt: str = "text", level: str = "INFO", stream: IO[str] | None = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(RunContext())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
