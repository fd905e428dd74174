"""The Redis ACL of each role, one pool at a time: the commands it sends and the keys it may send them to. Pure.

A Lua script runs with its caller's permissions, so a role is granted every command its scripts call too, on
the keys they call it on. Every key of a pool starts with ``tierpool:{NAMESPACE/NAME}:`` (tierpool.model.keys),
so a role's keys are that prefix and a pattern after it: ``*`` (every key of the pool) or a narrower one. A tier
that adopts an existing stream (``tiers[].stream``) adds that key, literally, wherever the tier streams are granted.

The roles:

- ``worker``: ``tierpool worker``, maintenance included (escalation, trims, consumer clean-up, the due-time
  mover, tenant repair). Without ``spec.redis.operatorAuth`` the operator reaches Redis with the pool's
  ``spec.redis``, that is as the workers' user, so this role holds every command of ``operator`` too.
- ``producer``: submit (plain, ``--task-id``, delayed, tenant, rate-limited), ``result``, ``wait_result``,
  ``follow``/``watch``, ``cancel`` (and ``--undo``), ``status``.
- ``admin``: a producer that also runs ``tierpool dlq list|replay|purge``.
- ``operator``: observation (``tierpool status``, and what the operator reads), read-only but for one write,
  the published spec (``SET …:spec``), for the user ``spec.redis.operatorAuth`` names.

A producer (and an admin) reads every key of its pool (``%R~``) and writes only through selectors, each command
on the keys its operations change with it (:data:`PRODUCER_WRITES`); the commands that can destroy a key of any
type (``DEL``, ``SET``, ``PEXPIRE``, ``PEXPIREAT``, ``XDEL``) only on markers, dedupe keys, event streams, results and
checkpoints (the dead-letter stream for admins). It writes neither the lease, nor a rate-limit bucket, a
reservation, the re-entry counts, a deferral counter or the published spec. A script's commands are checked against
its caller's ACL, so what the submit and cancel scripts write stays writable directly, and ACLs cannot refuse an
argument. So a producer can still, inside its own pool:

- ``XADD`` any envelope to a tier stream (the worker enforces its rules on every entry it reads:
  tierpool.protocol.entry_rules) and trim a stream with ``XADD … MAXLEN``;
- ``ZADD`` a member into ``…:due``, ``…:held:<tier>`` or ``…:queued:<tier>`` (a task that the worker checks when it
  is read; a ``paid`` there buys nothing, see the THROTTLE script; a queued member admits nothing: the worker's
  ADMIT_ENTRIES still counts the entry), and ``ZREM`` scheduled, throttled, stranded or held tasks;
- ``SET`` any task's result record (a false outcome for readers), dedupe key (a task id refused for the window) or
  cancel marker (cancelling any task, as ``cancel`` does); ``DEL`` a checkpoint; ``HSET``/``HDEL`` places in the
  task-id index (a cancel then scans); ``HDEL`` a remembered error.

It writes no tenant count (``…:tenants:<tier>``) and no admitted entry (``…:admitted:<tier>``): only a worker's
scripts let a task into its tenant's count, so no producer gets a task past ``tenantConcurrency`` (the producer's
gate reads the counts by a name in ARGV, helpers/tenants.lua).

Pools are isolated from each other; inside its pool a producer is trusted not to destroy work on purpose.

Selectors and read-only key patterns (``%R~``) need Redis 7.0 or later (Valkey 7.2 or later).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum

from tierpool.model.keys import PoolKeys
from tierpool.model.redis_spec import ACL_USER_NAME
from tierpool.protocol.members import glob_escape

Keys = tuple[str, ...]
"""Key patterns after a pool's prefix."""
EVERY_KEY: Keys = ("*",)


class Role(StrEnum):
    WORKER = "worker"
    PRODUCER = "producer"
    ADMIN = "admin"
    OPERATOR = "operator"


CONNECTION = ("ping", "client|setinfo", "select")
"""redis-py's health checks and the worker's start-up (PING), its connect (CLIENT SETINFO: the library's name),
and a database number in the URL (SELECT; ACLs are the same in every database)."""
REPLICATION = ("wait",)
"""``spec.redis.waitReplicas``: a WAIT after submits and after outcome writes."""
CLUSTER = ("cluster|slots", "cluster|shards", "command")
"""Redis Cluster (``--cluster``): redis-py's cluster client reads the slot map and the command table, and asks
``COMMAND GETKEYS`` for the keys of a command with movable keys (XREAD)."""
OBSERVE = (
    "time",
    "xlen",
    "zcard",
    "zcount",
    "zrange",
    "hgetall",
    "hlen",
    "xinfo|stream",
    "xinfo|groups",
    "xinfo|consumers",
    "xrange",
    "xpending",
    "get",
    "info",
)
"""tierpool.store.observe (the operator's scaler and scale-in, ``tierpool status``); GET reads the published spec
(``--pool``); INFO (``INFO memory``) the eviction policy, which a worker also reads at start-up."""

WORKER_DIRECT = (
    "evalsha",
    "script|load",
    "get",
    "set",
    "exists",
    "mget",
    "xgroup|create",
    "xreadgroup",
    "multi",
    "exec",
    "xadd",
    "pexpire",
    "client|id",
    "client|unblock",
    "hmget",
    "zrange",
)
"""What tierpool.store.streams and tierpool.runtime send outside scripts: scripts (EVALSHA, SCRIPT LOAD after a
restart), the published spec (GET, SET), tenant repair (EXISTS), cancel markers (MGET), groups (XGROUP CREATE),
blocking reads (XREADGROUP, ended with CLIENT ID and CLIENT UNBLOCK), progress events (MULTI, XADD, PEXPIRE,
EXEC), a gather's parked parents (HMGET of a parked hash, ZRANGE of ...:gathering)."""
WORKER_SCRIPTS = (
    "time",
    "xreadgroup",
    "xack",
    "xadd",
    "xpending",
    "xclaim",
    "xrange",
    "xlen",
    "xtrim",
    "xdel",
    "xgroup|delconsumer",
    "xinfo|groups",
    "xinfo|consumers",
    "get",
    "set",
    "del",
    "exists",
    "incr",
    "pexpire",
    "hget",
    "hset",
    "hdel",
    "hlen",
    "hgetall",
    "hincrby",
    "hscan",
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zrangebylex",
    "zlexcount",
    "zremrangebyscore",
)
"""What the worker's scripts call (tierpool.store.streams.WORKER_SCRIPTS)."""

PRODUCER_READS = (
    "script|load",
    "get",
    "exists",
    "xread",
    "multi",
    "exec",
    "xinfo|groups",
    "xrange",
    "xpending",
    "zscan",
    "time",
    "hget",
    "zrangebylex",
    "zrangebyscore",
    "zlexcount",
)
"""What a producer reads, on every key of its pool but read-only (``%R~``): the spec and results (GET, EXISTS),
following (XREAD, in MULTI/EXEC with its XADD and PEXPIRE), a cancel's scan for a task the task-id index does not
know (XINFO GROUPS, XRANGE, XPENDING, ZSCAN), loading its scripts, and what those scripts read (TIME, HGET of the
index and of tenant counts, ZRANGEBYLEX of a held set, ZLEXCOUNT of a queued set, ZRANGEBYSCORE of the due-time
index)."""
PRODUCER_SCRIPT_KEYS: Keys = (
    "tier:*",
    "where",
    "dedupe:*",
    "due",
    "throttled",
    "stranded",
    "queued:*",
    "held:*",
    "heldseq:*",
    "result:*",
    "cancel:*",
    "events:*",
    "checkpoint:*",
    "errors",
)
"""Every key the producer's scripts declare (SUBMIT, SUBMIT_ONCE, SCHEDULE, SUBMIT_GATED, CANCEL). A script call
needs read and write access to each key it declares, whatever it does with it; what the script then runs is checked
command by command against the rules below."""
PRODUCER_WRITES: Mapping[str, Keys] = {
    "evalsha": PRODUCER_SCRIPT_KEYS,
    "eval": PRODUCER_SCRIPT_KEYS,
    "xadd": ("tier:*", "events:*"),
    "hset": ("where",),
    "hdel": ("where", "errors"),
    "incr": ("heldseq:*",),
    "zadd": ("due", "held:*", "queued:*"),
    "zrem": ("due", "throttled", "stranded", "held:*"),
    "set": ("dedupe:*", "cancel:*", "result:*"),
    "pexpire": ("events:*",),
    "pexpireat": ("cancel:*",),
    "del": ("cancel:*", "checkpoint:*"),
}
"""Each command a producer writes with, on the keys it writes: a submit's entry (XADD of a tier stream), its place
in the task-id index (HSET ``…:where``), its dedupe key (SET NX), a delayed one's member of ``…:due`` (ZADD); a
tenant submit's gate (ZADD ``…:queued:<tier>``, ZADD/ZREM ``…:held:<tier>``, INCR ``…:heldseq:<tier>``); a
follow's event (XADD, PEXPIRE ``…:events:*``); a cancel's marker (SET, PEXPIREAT, DEL ``…:cancel:*``) and, for a
task CANCEL takes out of the due, throttled, stranded or a held set (ZREM), its cancelled record (SET
``…:result:*``), its dropped checkpoint (DEL), remembered error (HDEL ``…:errors``) and place (HDEL ``…:where``).
Never: the tenant counts and admitted entries, the lease, rate-limit buckets, reservations, re-entry counts,
deferral counters, the published spec, the dead-letter stream (admins), and no key of the pool is deleted but
markers and checkpoints."""
ADMIN_WRITES: Mapping[str, Keys] = {
    "evalsha": ("dlq",),
    "eval": ("dlq",),
    "del": ("dlq", "result:*", "cancel:*", "events:*"),
    "xdel": ("dlq",),
}
"""``dlq purge`` (DEL or XDEL of dead letters) and ``dlq replay`` (REPLAY, REPLAY_GATED, which declare the DLQ with
the producer's keys: the task's old result, marker and events go, in one DEL)."""

OPERATOR_NARROW: Mapping[str, Keys] = {"set": ("spec",)}
"""The one key the operator writes: the pool's published spec (tierpool_operator.publication), so producers can
name a pool no worker has served yet."""


def _every_key(*groups: Iterable[str]) -> dict[str, Keys]:
    return {command: EVERY_KEY for group in groups for command in group}


def merged(*grants: Mapping[str, Keys]) -> dict[str, Keys]:
    """Per command, every key pattern any of ``grants`` allows it on (every key wins over narrower ones)."""
    found: dict[str, Keys] = {}
    for grant in grants:
        for command, keys in grant.items():
            before = found.get(command, ())
            found[command] = EVERY_KEY if EVERY_KEY in (before, keys) else tuple(dict.fromkeys((*before, *keys)))
    return found


_PRODUCER = merged(_every_key(CONNECTION, REPLICATION, OBSERVE, PRODUCER_READS), PRODUCER_WRITES)
GRANTS: Mapping[Role, Mapping[str, Keys]] = {
    Role.WORKER: _every_key(CONNECTION, REPLICATION, OBSERVE, WORKER_DIRECT, WORKER_SCRIPTS),
    Role.PRODUCER: _PRODUCER,
    Role.ADMIN: merged(_PRODUCER, ADMIN_WRITES),
    Role.OPERATOR: merged(_every_key(CONNECTION, OBSERVE), OPERATOR_NARROW),
}
"""Each role's commands, and the key patterns (after each pool's prefix) it may send them to."""
READ_ONLY = frozenset({Role.OPERATOR, Role.PRODUCER, Role.ADMIN})
"""Roles whose every-key rules are read-only (``%R~``): they write only through their selectors, each on the keys
it names (read and write, ``~``); the operator's one write is the published spec."""

USER_NAME = re.compile(ACL_USER_NAME)


def key_pattern(pool: PoolKeys, suffix: str) -> str:
    """A pool's key pattern: its prefix as a literal, then ``suffix`` (a glob)."""
    return glob_escape(pool.prefix) + suffix


def pool_patterns(pool: PoolKeys, suffix: str) -> list[str]:
    """The key patterns of ``suffix`` in one pool: its own keys, and for the patterns that cover its tier streams
    (``*``, ``tier:*``) also each stream it adopts (``tiers[].stream``), as a literal."""
    adopted = [glob_escape(stream) for _, stream in pool.adopted] if suffix in ("*", "tier:*") else []
    return [key_pattern(pool, suffix), *adopted]


def password_rule(password: str) -> str:
    """The ACL rule for ``password`` as its SHA-256 (``#<hex>``), so the password itself is never printed."""
    return "#" + hashlib.sha256(password.encode("utf-8")).hexdigest()


def rules(role: Role, pools: Sequence[PoolKeys], cluster: bool = False) -> list[str]:
    """The rules of ``role`` for ``pools`` (no user, no password): no channels, the keys and commands every key of
    the pools allows (read-only for :data:`READ_ONLY` roles), then one selector per narrower set of keys,
    ``(~keys +commands)``."""
    if not pools:
        raise ValueError("an ACL needs at least one pool")
    grants = merged(GRANTS[role], _every_key(CLUSTER) if cluster else {})
    by_keys: dict[Keys, list[str]] = {}
    for command, keys in grants.items():
        by_keys.setdefault(keys, []).append(command)

    def patterns(keys: Keys, access: str = "~") -> list[str]:
        return [access + pattern for pool in pools for suffix in keys for pattern in pool_patterns(pool, suffix)]

    def commands(names: Iterable[str]) -> list[str]:
        return ["+" + name for name in sorted(names)]

    every = patterns(EVERY_KEY, "%R~" if role in READ_ONLY else "~")
    found = ["resetchannels", *every, "-@all", *commands(by_keys.pop(EVERY_KEY, []))]
    for keys, names in sorted(by_keys.items()):
        found.append("(" + " ".join([*patterns(keys), *commands(names)]) + ")")
    return found


def user_rules(user: str, role: Role, pools: Sequence[PoolKeys], password_hash: str | None, cluster: bool) -> str:
    """``USER reset on [#hash] RULES…``: the user rebuilt from nothing, so running it again replaces it. Without a
    password hash the user has no password and cannot log in until one is added (``>password``)."""
    if not USER_NAME.match(user):
        raise ValueError(f"user name {user!r}: letters, digits and ._@:+=- only (at most 128)")
    password = [password_hash] if password_hash else []
    return " ".join([user, "reset", "on", *password, *rules(role, pools, cluster)])


def setuser_command(
    user: str, role: Role, pools: Sequence[PoolKeys], password_hash: str | None = None, cluster: bool = False
) -> str:
    """The ``ACL SETUSER`` command (for ``redis-cli``, or split on spaces for any client)."""
    return "ACL SETUSER " + user_rules(user, role, pools, password_hash, cluster)


def aclfile_line(
    user: str, role: Role, pools: Sequence[PoolKeys], password_hash: str | None = None, cluster: bool = False
) -> str:
    """The line of a ``users.acl`` file (``aclfile``)."""
    return "user " + user_rules(user, role, pools, password_hash, cluster)
