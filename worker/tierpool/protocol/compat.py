"""What a newer protocol on the wire means here: an entry a worker must not run, a spec a producer must not write
to (the number itself: tierpool.protocol.version).

Every tierpool client writes :data:`PROTOCOL` into each envelope (field ``protocol``), and every worker and the
operator into the published spec (``"protocol"``). Protocol 10 is the first to carry it: an entry or a spec
without one is from an older producer or publisher, and is read as before. Pure, no I/O.
"""

from __future__ import annotations

from tierpool.protocol.version import PROTOCOL


class NewerProtocol(ValueError):
    """The published spec of a pool speaks a newer protocol than this producer: writing to it could put entries
    on the wire that its workers read otherwise."""

    def __init__(self, ref: str, published: int) -> None:
        super().__init__(
            f"pool {ref} speaks protocol {published}, newer than this tierpool's ({PROTOCOL}): upgrade tierpool "
            "before submitting to it"
        )
        self.ref, self.published = ref, published


def newer_entry_reason(value: object) -> str | None:
    """The dead-letter reason of an entry whose ``protocol`` field names a protocol newer than :data:`PROTOCOL`
    (the worker could misread it, so it never runs it); None when it is absent, this one or older, or not a whole
    number (the envelope's validation names that fault: ``bad envelope: protocol: …``). Takes the raw field, text
    or bytes, so it can be checked before anything else is decoded."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str | int) or isinstance(value, bool):
        return None
    text = str(value).strip()
    if not text.isdigit() or not text.isascii():
        return None
    number = int(text)
    return f"bad envelope: protocol {number} is newer than this worker's ({PROTOCOL})" if number > PROTOCOL else None


def published_protocol(document: object) -> int | None:
    """The ``protocol`` of a published spec document (its parsed JSON); None when it has none (a publisher
    before protocol 10). ValueError when it is there but not a whole number >= 1."""
    if not isinstance(document, dict) or "protocol" not in document:
        return None
    value = document["protocol"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"the published spec's protocol is {value!r}, not a whole number >= 1")
    return value
