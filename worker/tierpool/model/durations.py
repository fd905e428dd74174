"""Duration strings such as ``30s``, ``5m``, ``1h30m`` or ``250ms``. Pure functions."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_SECONDS = r"[0-9]+(\.[0-9]+)?"
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object) -> float:
    """Return seconds for a duration string (``"7m"``) or a plain number of seconds.

    Raises ValueError with the accepted forms when the value is not a duration.
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration like '30s', '5m' or '1h', not a boolean")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if not isinstance(value, str) or not re.fullmatch(DURATION_PATTERN, value.strip()):
        raise ValueError(f"{value!r} is not a duration; write it like '250ms', '30s', '5m', '1h' or '1h30m'")
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _PART.findall(value.strip()))


def parse_duration_flag(text: str) -> float:
    """Return seconds for a duration as a command line gives it: a bare number of seconds (``"30"``, ``"2.5"``) or
    a duration string (``"30s"``, ``"5m"``, ``"250ms"``).

    Only flags take the bare number: in a pool file a string duration carries its unit, as the CRD's pattern says.
    """
    if re.fullmatch(_SECONDS, text.strip()):
        return float(text)
    try:
        return parse_duration(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration; write it like 30 (seconds), 30s, 5m, 1h or 250ms") from None


def format_duration(seconds: float) -> str:
    """Render seconds back into the shortest exact duration string (``420.0`` -> ``"7m"``)."""
    if seconds == 0:
        return "0s"
    millis = ms(seconds)
    if millis % 1000:
        return f"{millis}ms"
    whole = millis // 1000
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts)


def _serialize(seconds: float, info: Any) -> Any:
    return format_duration(seconds)


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(_serialize, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN}),
]
"""A duration in seconds, written in YAML as a string such as ``30s`` or ``7m``."""


def ms(seconds: float) -> int:
    """Seconds as whole milliseconds, rounded to the nearest."""
    return round(seconds * 1000)


def ms_floor(seconds: float) -> int:
    """Seconds as whole milliseconds, rounded down: a wait is never made longer than asked."""
    return int(seconds * 1000)


def ms_ceil(seconds: float) -> int:
    """Seconds as whole milliseconds, rounded up: a delay is never made shorter than asked."""
    return math.ceil(seconds * 1000)


def now_ms(clock: Callable[[], float] = time.time) -> int:
    """The ``clock``'s time (seconds since the epoch) in whole milliseconds."""
    return ms_floor(clock())
