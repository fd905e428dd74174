"""What a failed run records of its traceback, in the worker's log, its result record and its dead letter. Pure.

A traceback is kept whole up to ``TRACEBACK_BYTES`` of UTF-8; a longer one keeps its end (the innermost frames
and the exception's own line, what says where and why it failed), from the first whole line that fits, after a
line that says how much was cut. The password of every Redis URL in it is replaced first (an exception's message,
or a frame's line of source, often holds the URL it connected to), so a cut never leaves half a URL unredacted.
"""

from __future__ import annotations

from tierpool.model.redis_url import redact_urls_in
from tierpool.protocol import utf8

TRACEBACK_BYTES = 8192
"""The most bytes of a traceback a result record or a dead letter holds (8 KiB)."""
CUT_LINE = "[... {} bytes of the traceback cut; its end follows]\n"


def bounded(text: str, limit: int = TRACEBACK_BYTES) -> str:
    """``text`` in at most ``limit`` bytes of UTF-8: whole when it fits, else its end after a line saying how
    many bytes were cut."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= limit:
        return text
    room = max(limit - len(CUT_LINE.format(len(raw))), 0)
    tail = raw[len(raw) - room :]
    newline = tail.find(b"\n")
    if 0 <= newline < len(tail) - 1:  # start at a whole line, unless the tail is one line
        tail = tail[newline + 1 :]
    return CUT_LINE.format(len(raw) - len(tail)) + tail.decode("utf-8", "ignore")


def recorded(text: str, limit: int = TRACEBACK_BYTES) -> str:
    """The traceback as it is recorded: every Redis URL's password redacted, bytes that are not UTF-8 shown as
    U+FFFD (the records are JSON), then :func:`bounded`."""
    return bounded(utf8.readable(redact_urls_in(text)), limit)
