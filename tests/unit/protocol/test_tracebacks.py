"""Bounding and redacting the traceback a failed run records (tierpool.protocol.tracebacks)."""

from __future__ import annotations

from tierpool.protocol.tracebacks import TRACEBACK_BYTES, bounded, recorded

SHORT = 'Traceback (most recent call last):\n  File "h.py", line 3, in handle\n    boom()\nRuntimeError: kaput\n'


def frames(count: int) -> str:
    lines = [f'  File "deep.py", line {n}, in level_{n}\n    level_{n + 1}()\n' for n in range(count)]
    return "Traceback (most recent call last):\n" + "".join(lines) + "RuntimeError: kaput\n"


def test_a_traceback_that_fits_is_kept_whole() -> None:
    assert bounded(SHORT) == SHORT
    exactly = "x" * TRACEBACK_BYTES
    assert bounded(exactly) == exactly


def test_a_long_traceback_keeps_its_end_from_a_whole_line() -> None:
    text = frames(400)
    assert len(text.encode()) > TRACEBACK_BYTES
    cut = bounded(text)
    assert len(cut.encode()) <= TRACEBACK_BYTES
    assert cut.endswith("    level_400()\nRuntimeError: kaput\n")  # the innermost frame and the exception line
    first, rest = cut.split("\n", 1)
    assert first.startswith("[... ") and "bytes of the traceback cut" in first
    assert rest.startswith('  File "deep.py", line ') or rest.startswith("    level_")
    assert text.endswith(rest)
    shown = int(first.removeprefix("[... ").split(" ")[0])
    assert shown == len(text.encode()) - len(rest.encode())


def test_the_limit_counts_utf8_bytes() -> None:
    text = "é" * TRACEBACK_BYTES  # two bytes each
    cut = bounded(text, 100)
    assert len(cut.encode()) <= 100 and cut.endswith("é") and "\ufffd" not in cut


def test_one_long_line_is_cut_inside_it() -> None:
    cut = bounded("x" * 10_000 + "\n", 200)
    assert len(cut.encode()) <= 200 and cut.endswith("x\n")


def test_a_recorded_traceback_has_no_redis_password() -> None:
    text = "ConnectionError: cannot reach redis://app:s3cret@redis:6379/0\n"
    assert "s3cret" not in recorded(text) and "redis://app:***@redis:6379/0" in recorded(text)
    long = frames(400) + text
    assert "s3cret" not in recorded(long) and recorded(long).endswith("redis://app:***@redis:6379/0\n")


def test_bytes_that_are_not_utf8_are_shown_as_replacement_characters() -> None:
    assert recorded("RuntimeError: bad \udcff byte\n") == "RuntimeError: bad \ufffd byte\n"
