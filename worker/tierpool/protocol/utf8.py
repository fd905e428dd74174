"""Stored bytes that are not UTF-8, as text. Pure.

tierpool's clients decode replies with ``surrogateescape`` (tierpool.store.connection): each byte that is not
part of valid UTF-8 becomes one lone surrogate, U+DC80 to U+DCFF. Valid UTF-8 never decodes to a lone surrogate,
so decoding never raises, the text still says which bytes were bad, and encoding it the same way gives the
original bytes back, exactly. ``replace`` would lose both: a producer's own U+FFFD could not be told from a bad
byte, and the bytes would be gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ESCAPE = "surrogateescape"
SHOWN_BYTES = 32
"""Bytes of a bad field name a reason shows (a name can be as long as a value)."""


def as_text(value: bytes | str) -> str:
    """Text from bytes (a client that does not decode) the way tierpool's clients decode; text as it is."""
    return value.decode("utf-8", ESCAPE) if isinstance(value, bytes) else value


def as_text_reply(reply: Any) -> Any:
    """A Redis reply with every bytes in it as text (:func:`as_text`), in lists, tuples, sets and dicts (keys
    too): what a client that does not decode returns, as tierpool's clients would. Other values (numbers, None,
    an error among a pipeline's replies) as they are."""
    if isinstance(reply, bytes):
        return as_text(reply)
    if isinstance(reply, list):
        return [as_text_reply(item) for item in reply]
    if isinstance(reply, tuple):
        return tuple(as_text_reply(item) for item in reply)
    if isinstance(reply, dict):
        return {as_text_reply(key): as_text_reply(value) for key, value in reply.items()}
    if isinstance(reply, set | frozenset):
        return {as_text_reply(item) for item in reply}
    return reply


def original(text: str) -> bytes:
    """The bytes that ``text`` was decoded from. (A surrogate that no decoding makes, U+D800 to U+DC7F, is
    written as its UTF-8 form, which is not UTF-8 either.)"""
    try:
        return text.encode("utf-8", ESCAPE)
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def is_utf8(text: str) -> bool:
    """Whether ``text`` came from valid UTF-8 (it holds no lone surrogate). O(1) for ASCII."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def readable(text: str) -> str:
    """``text`` safe to print or to put in JSON: bad bytes become U+FFFD."""
    return text if is_utf8(text) else original(text).decode("utf-8", "replace")


def first_bad_byte(text: str) -> tuple[int, int] | None:
    """(the first bad byte, its offset in the original bytes), or None for text that is UTF-8."""
    raw = original(text)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return raw[error.start], error.start
    return None


def _label(key: str, value: Any) -> str | None:
    if not is_utf8(key):
        shown = original(key)
        return f"field name {shown[:SHOWN_BYTES]!r}" + ("..." if len(shown) > SHOWN_BYTES else "")
    bad = first_bad_byte(value) if isinstance(value, str) and not is_utf8(value) else None
    return None if bad is None else f"{key} (byte 0x{bad[0]:02x} at {bad[1]})"


def problems(fields: Mapping[Any, Any], names: Iterable[Any] | None = None) -> list[str]:
    """What is not UTF-8 in ``fields`` (only ``names`` of them, when given), in order: ``payload (byte 0xff at
    0)`` for a value, ``field name b'\\xff'`` for a name. Bytes keys and values are read as tierpool decodes."""
    found = []
    for key in fields if names is None else names:
        value = fields[key]
        label = _label(as_text(key), as_text(value) if isinstance(value, bytes | str) else value)
        if label is not None:
            found.append(label)
    return found
