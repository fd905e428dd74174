"""Structured logging: one JSON object per line (the default in a cluster) or plain text."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
_DROPPED = {"settings", "k8s_skip"}
"""Extras never written: kopf attaches its whole OperatorSettings (about 1.5 KB as text) to every object line."""


class JsonFormatter(logging.Formatter):
    """Fields: time, level, logger, message, the kopf object (kind/namespace/name) when there is one, plus
    anything passed in ``extra`` (but not kopf's settings object)."""

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
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def configure(fmt: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
