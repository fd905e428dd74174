"""Cancelling tasks, one or many at once, and taking a cancel back (``Client.cancel``, ``cancel_many``, ``uncancel``).

Every task's cancel is one ``CANCEL`` script (all of them in one pipelined round trip): a task with a result is
finished and left alone; otherwise the script sets the cancel marker and reads the task-id index (``…:where``,
written by every script that moves a task) to learn, in the same atomic step, where the task is. A task waiting in
the due-time index, the throttled or stranded set or a held set is taken out and its ``cancelled`` record written
there and then; one in a tier stream is reported waiting (the worker that takes it writes its record) or running
(its worker stops it). Nothing can move the task between the lookup and the report, and the cost does not depend on
how long the streams are.

A task the index does not know (enqueued by a plain ``XADD`` of a producer that is not tierpool's, or by an older
one) is looked for the old way, with a number of round trips that does not grow with the number of tasks: one
scan of each tier stream for all of them, one pipeline of ``XPENDING`` and result reads, one scan of the due-time
index and of the held sets, and one pipeline that extends or takes back markers. An unknown task's marker is taken
back. That scan reads every entry kept in the streams, and a task that moves while it runs can still be missed.

The steps are written once, as a plan that yields command batches (:func:`cancel_plan`; see
tierpool.store.plans); the drivers in tierpool.store.drivers send each batch as one pipeline on a sync or an async
client.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from redis.client import NEVER_DECODE
from redis.exceptions import NoScriptError

from tierpool import scripts
from tierpool.client.tracking import CancelReport
from tierpool.model.keys import RETRY_CONSUMER, PoolKeys
from tierpool.protocol.adopted import task_id_of
from tierpool.protocol.envelope import text_fields
from tierpool.protocol.members import glob_escape, held_task_id, member_task_id
from tierpool.protocol.submission import TaskResult
from tierpool.protocol.task_state import EVENTS_MAXLEN, CancelState, EntryState, classify, is_delivered
from tierpool.protocol.utf8 import as_text
from tierpool.scripts import evalsha_command
from tierpool.store.plans import Batch, Plan, call

SCAN_PAGE = 1000
SCRIPT_ROUNDS = 2
"""The CANCEL calls go once, then once more for those refused with NOSCRIPT after loading the script."""
JSON_PLAIN = frozenset("-_.:@+=~!#$%&'()*,;<>?[]^`{|} ")
"""Characters cjson writes as they are (with letters and digits): an id made of them can be a MATCH pattern."""
INDEXED_STATES = {"running": CancelState.RUNNING, "waiting": CancelState.WAITING, "cancelled": CancelState.WAITING}
"""What the CANCEL script found through the task-id index (``cancelled``: taken out of a set, its record written)."""
Match = tuple[str, str, str]
"""A stream entry carrying a wanted task: (stream, entry id, task_id)."""
RAW: dict[str, Any] = {NEVER_DECODE: True}
"""The scans read other producers' entries and members undecoded and decode them as tierpool's clients do
(tierpool.protocol.utf8): an application's client that decodes strictly raised inside its reply parser on one
byte that is not UTF-8 anywhere in a page, and the cancel failed."""


def _ok(reply: Any) -> bool:
    return not isinstance(reply, Exception)


def _last_delivered(groups: Any, group: str) -> str | None:
    return next((str(g["last-delivered-id"]) for g in groups or [] if g["name"] == group), None)


def _stream_matches(
    streams: Sequence[str], wanted: set[str], group: str, adopted: Collection[str] = ()
) -> Plan[tuple[dict[str, str | None], list[Match]]]:
    """Every entry of ``streams`` carrying a wanted task_id: ({stream: last-delivered-id}, [(stream, id, task)]).
    In an ``adopted`` stream an entry without a task_id field has the one a worker gives it
    (tierpool.protocol.adopted)."""
    infos = yield Batch([call("xinfo_groups", stream) for stream in streams])
    lasts = {stream: _last_delivered(info, group) for stream, info in zip(streams, infos, strict=True) if _ok(info)}
    cursors, matches = dict.fromkeys(lasts, "-"), []
    while cursors:
        order = list(cursors)
        pages = yield Batch([_xrange_page(stream, cursors[stream]) for stream in order])
        for stream, page in zip(order, pages, strict=True):
            if not _ok(page) or not page:
                del cursors[stream]
                continue
            for entry_id, fields in page:
                task_id = _task_id(fields)
                if task_id is None and stream in adopted:
                    task_id = task_id_of(text_fields(fields), stream, as_text(entry_id))
                if task_id in wanted:
                    matches.append((stream, as_text(entry_id), task_id))
            cursors[stream] = "(" + as_text(page[-1][0])
    return lasts, matches


def _xrange_page(stream: str, start: str) -> Any:
    return call("execute_command", "XRANGE", stream, start, "+", "COUNT", SCAN_PAGE, **RAW)


def _task_id(fields: Any) -> str | None:
    value = fields.get(b"task_id", fields.get("task_id")) if fields else None
    return None if value is None else as_text(value)


def _scan_sets(keys: Sequence[str], match: str | None) -> Plan[dict[str, list[tuple[str, float]]]]:
    """Every (member, score) of the sorted sets ``keys`` (ZSCAN, all keys side by side), as {key: [...]}."""
    found: dict[str, list[tuple[str, float]]] = {key: [] for key in keys}
    cursors: dict[str, int] = dict.fromkeys(keys, 0)
    while cursors:
        order = list(cursors)
        pattern = ["MATCH", match] if match else []
        replies = yield Batch(
            [call("execute_command", "ZSCAN", key, cursors[key], *pattern, "COUNT", SCAN_PAGE, **RAW) for key in order]
        )
        for key, reply in zip(order, replies, strict=True):
            cursor, items = reply if _ok(reply) else (0, [])
            found[key] += [(as_text(member), float(score)) for member, score in items]
            if int(cursor) == 0:
                del cursors[key]
            else:
                cursors[key] = int(cursor)
    return found


def uncancel_plan(keys: PoolKeys, task_id: str) -> Plan[bool]:
    """Take a cancel back: delete the task's cancel marker; True when there was one."""
    return bool((yield call("delete", keys.cancel(task_id))))


def cancel_call(
    keys: PoolKeys, tiers: Sequence[str], task_id: str, marker_ms: int, result_ms: int
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of the CANCEL script for one task. Pure."""
    names = [keys.result(task_id), keys.cancel(task_id), keys.events(task_id), keys.checkpoint(task_id), keys.errors]
    names += [keys.due, keys.throttled, keys.stranded]
    args: list[Any] = [task_id, marker_ms, result_ms, EVENTS_MAXLEN, keys.group, RETRY_CONSUMER]
    for tier in tiers:
        names += [keys.tier(tier), keys.held(tier)]
        args.append(tier)
    return [*names, keys.where], args


def cancel_plan(
    keys: PoolKeys,
    tiers: Sequence[str],
    task_ids: Sequence[str],
    marker_ttl_ms: int,
    result_ttl_ms: int | None = None,
) -> Plan[list[CancelReport]]:
    """Cancel ``task_ids`` and report each, in order (a task named twice is reported twice). ``result_ttl_ms``: how
    long a cancelled record written here is kept (the pool's ``resultTTL``; None: as long as the marker)."""
    ids = list(dict.fromkeys(task_ids))
    record_ms = marker_ttl_ms if result_ttl_ms is None else result_ttl_ms
    replies = yield from _run_cancels([cancel_call(keys, tiers, t, marker_ttl_ms, record_ms) for t in ids])
    reports: dict[str, CancelReport] = {}
    for task_id, reply in zip(ids, replies, strict=True):
        if not _ok(reply):
            raise reply
        kind = str(reply[0])
        if kind == "finished":
            reports[task_id] = CancelReport(task_id, CancelState.FINISHED, TaskResult.from_json(str(reply[1])))
        elif kind in INDEXED_STATES:
            reports[task_id] = CancelReport(task_id, INDEXED_STATES[kind])
    open_ids = [t for t in ids if t not in reports]
    if open_ids:
        reports |= yield from _locate(keys, tiers, open_ids, marker_ttl_ms)
    return [reports[t] for t in task_ids]


def _run_cancels(calls: Sequence[tuple[list[str], list[Any]]]) -> Plan[list[Any]]:
    """Every CANCEL call in one pipeline, by EVALSHA (the script is too large to send with each of many tasks); the
    calls the server refuses with NOSCRIPT (a fresh server, or a cluster shard) did nothing, and go once more after
    loading it. One reply per call, errors as values."""
    replies: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    for _ in range(SCRIPT_ROUNDS):
        # by name: redis-py's cluster pipelines refuse the script methods
        sent = yield Batch([call("execute_command", *evalsha_command("CANCEL", *calls[i])) for i in todo])
        for i, reply in zip(todo, sent, strict=True):
            replies[i] = reply
        todo = [i for i in todo if isinstance(replies[i], NoScriptError)]
        if not todo:
            break
        yield call("script_load", scripts.source("CANCEL"))  # on the client: on every primary, in cluster mode
    return replies


def _locate(keys: PoolKeys, tiers: Sequence[str], ids: list[str], marker_ttl_ms: int) -> Plan[dict[str, CancelReport]]:
    # the places a task moves from before the places it moves to: the due-time index, the stranded set and the
    # held sets (their tasks go into the streams), then the streams; a task moved in between is seen in one. A
    # parent moves both ways between its stream and its parked hash: that is read before the streams and after.
    parked_before = yield Batch([call("exists", keys.parked(t)) for t in ids])
    indexed = (keys.due, keys.throttled, keys.stranded)  # stranded: kept for a tier a worker lacked
    sets = yield from _scan_sets([*indexed, *[keys.held(t) for t in tiers]], match_pattern(ids))
    due = {member_task_id(m): int(s) for key in indexed for m, s in sets.pop(key)}
    held = {held_task_id(m) for members in sets.values() for m, _ in members}
    # lowest priority first: an escalation moves a task up, into a tier not yet seen
    streams = [keys.tier(t) for t in reversed(tiers)]
    adopted = {stream for _, stream in keys.adopted}
    lasts, matches = yield from _stream_matches(streams, set(ids), keys.group, adopted)
    read = [m for m in matches if lasts.get(m[0]) is not None]
    replies = yield Batch(
        [call("xpending_range", s, keys.group, i, i, 1) for s, i, _ in read]
        + [call("get", keys.result(t)) for t in ids]
        + [call("exists", keys.parked(t)) for t in ids]
    )
    pending = dict(zip([(s, i) for s, i, _ in read], replies[: len(read)], strict=True))
    found: dict[str, list[EntryState]] = {t: [] for t in ids}
    for stream, entry_id, task_id in matches:
        last, owners = lasts.get(stream), pending.get((stream, entry_id)) or []
        owner = str(owners[0]["consumer"]) if _ok(owners) and owners else None
        found[task_id].append(EntryState(owner, last is not None and is_delivered(entry_id, last)))
    results = dict(zip(ids, replies[len(read) : len(read) + len(ids)], strict=True))
    parked_after = replies[len(read) + len(ids) :]
    parked = {t for t, *seen in zip(ids, parked_before, parked_after, strict=True) if any(seen)}
    reports, after = {}, []
    for task_id in ids:
        waits = task_id in held or task_id in parked
        report, marker = decide(task_id, found[task_id], results[task_id], due.get(task_id), waits)
        if marker == "extend":  # waits in the due-time index: the marker must outlive its due time
            after.append(call("pexpireat", keys.cancel(task_id), due[task_id] + marker_ttl_ms))
        elif marker == "drop":
            after.append(call("delete", keys.cancel(task_id)))
        reports[task_id] = report
    if after:
        yield Batch(after)
    return reports


def match_pattern(ids: Sequence[str]) -> str | None:
    """ZSCAN's MATCH for one task id, when the id reads the same inside the members' JSON; else None (scan all).
    The members are written by Lua's cjson, which escapes ``/`` as ``\\/`` (and quotes, backslashes, control
    characters): a pattern made from such an id would never match. Pure."""
    if len(ids) != 1 or not all(c.isascii() and (c.isalnum() or c in JSON_PLAIN) for c in ids[0]):
        return None
    return f"*{glob_escape(ids[0])}*"


def decide(
    task_id: str, found: list[EntryState], raw_result: Any, due_ms: int | None, held: bool
) -> tuple[CancelReport, str | None]:
    """What a cancel found, from the task's stream entries, its result record, its due time in the due-time index
    and whether it is held for its tenant's turn or parked in a gather (``held``: the worker that takes it again
    sees the marker; a parked parent's children see it too); and what becomes of its marker: ``extend`` (to
    outlive the due time), ``drop`` (an unknown task's marker is taken back) or None. Pure."""
    result = TaskResult.from_json(str(raw_result)) if raw_result and _ok(raw_result) else None
    report = CancelReport(task_id, classify(found, result is not None), result)
    if (report.state is not CancelState.FINISHED or not report.result) and due_ms is not None:
        return CancelReport(task_id, CancelState.WAITING, None), "extend"
    if report.state is CancelState.UNKNOWN:
        return (CancelReport(task_id, CancelState.WAITING, None), None) if held else (report, "drop")
    return report, None
