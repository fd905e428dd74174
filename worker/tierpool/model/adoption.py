"""The spec rules of a pool that adopts existing streams (``tiers[].stream``, ``spec.consumerGroup``). Pure.

Every script of the protocol runs on one tier stream together with the pool's own keys (``tierpool:{ns/name}:…``),
and escalation on two tier streams at once. In Redis Cluster a script's keys must all hash to one slot, so a
stream a pool adopts there must hash to the pool's slot: give it the pool's hash tag, ``{ns/name}``. Standalone
and Sentinel servers have no slots and take any key.
"""

from __future__ import annotations

from collections.abc import Sequence

SLOTS = 16384
"""Hash slots of a Redis Cluster."""


def _crc16(data: bytes) -> int:
    """CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum Redis Cluster hashes keys with."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def hash_tag(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes: the text between its first ``{`` and the first ``}`` after it
    when that is not empty, else the whole key."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def key_slot(key: str) -> int:
    """The Redis Cluster slot of ``key`` (what ``CLUSTER KEYSLOT`` answers)."""
    return _crc16(hash_tag(key).encode("utf-8")) % SLOTS


def stream_slot_violations(ref: str, cluster: bool, streams: Sequence[str | None]) -> list[tuple[str, str]]:
    """The ``tiers[i].stream`` values (in tier order, None: the pool's own stream) that a pool ``ref``
    (``namespace/name``) cannot use: in cluster mode, those outside the pool's slot. (path, message) pairs."""
    if not cluster:
        return []
    pool_slot = key_slot(f"{{{ref}}}")
    found: list[tuple[str, str]] = []
    for index, stream in enumerate(streams):
        if stream is not None and key_slot(stream) != pool_slot:
            found.append(
                (
                    f"spec.tiers[{index}].stream",
                    f"{stream!r} hashes to slot {key_slot(stream)}, not the pool's slot {pool_slot}: with "
                    f"redis.mode cluster an adopted stream needs the pool's hash tag, e.g. '{{{ref}}}:{stream}'",
                )
            )
    return found


def duplicate_stream_violations(streams: Sequence[str | None]) -> list[tuple[str, str]]:
    """Two tiers naming the same stream (their tasks would be one tier's). (path, message) pairs."""
    seen: dict[str, int] = {}
    found: list[tuple[str, str]] = []
    for index, stream in enumerate(streams):
        if stream is None:
            continue
        if stream in seen:
            found.append((f"tiers[{index}].stream", f"{stream!r} is also tiers[{seen[stream]}]'s stream"))
        seen.setdefault(stream, index)
    return found


class GroupRefused(Exception):
    """An adopted stream has consumer groups and none has the pool's name (``spec.consumerGroup``): the pool does
    not create its own there, which would start at the stream's first entry and run again every entry the other
    groups acked."""


def group_refusal(tier: str, stream: str, group: str, existing: Sequence[str]) -> str | None:
    """Why the pool may not create ``group`` on the adopted ``stream`` whose groups are ``existing``; None when it may
    (the stream has no group, or has ``group``: it carries on from its last delivered entry)."""
    if not existing or group in existing:
        return None
    names = ", ".join(repr(name) for name in existing)
    return (
        f"tier {tier!r} adopts stream {stream!r} (tiers[].stream), which has consumer group(s) {names} and none named "
        f"{group!r} (spec.consumerGroup): set spec.consumerGroup to the group its workers read with. A new group "
        f"{group!r} would start at the stream's first entry and run again everything they acked; to skip the history "
        f"instead, create it first: XGROUP CREATE {stream} {group} $"
    )
