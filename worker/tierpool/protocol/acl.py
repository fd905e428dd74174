"""The Redis ACL of each role, one pool at a time: the commands it sends and the keys it may send them to. Pure.

A Lua script runs with its caller's permissions, so a role is granted every command its scripts call too, on
the keys they call it on. Every key of a pool starts with ``tierpool:{NAMESPACE/NAME}:`` (tierpool.model.keys),
so a role's keys are that prefix and a pattern after it: ``*`` (every key of the pool) or a narrower one.

The roles:

- ``worker``: ``tierpool worker``, maintenance included (escalation, trims, consumer clean-up, the due-time
  mover, tenant repair). The operator reaches Redis with the pool's ``spec.redis``, that is as the workers'
  user, so this role holds every command of ``operator`` too.
- ``producer``: submit (plain, ``--task-id``, delayed, tenant, rate-limited), ``result``, ``wait_result``,
  ``follow``/``watch``, ``cancel`` (and ``--undo``), ``status``.
- ``admin``: a producer that also runs ``tierpool dlq list|replay|purge``.
- ``operator``: read-only observation (``tierpool status``, and what the operator reads).

The commands that can destroy a key of any type (``DEL``, ``SET``, ``PEXPIRE``, ``PEXPIREAT``, ``XDEL``) are
granted to producers and admins only on the keys they must change with them (cancel markers, dedupe keys, event
streams; the dead-letter stream for admins), as ACL selectors. ACLs cannot refuse an argument, though: a producer
can still trim its pool's streams with ``XADD … MAXLEN``. Pools are isolated from each other; inside its pool a
producer is trusted not to destroy work on purpose.

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
)
"""What tierpool.store.streams and tierpool.runtime send outside scripts: scripts (EVALSHA, SCRIPT LOAD after a
restart), the published spec (GET, SET), tenant repair (EXISTS), cancel markers (MGET), groups (XGROUP CREATE),
blocking reads (XREADGROUP, ended with CLIENT ID and CLIENT UNBLOCK), progress events (MULTI, XADD, PEXPIRE,
EXEC)."""
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
)
"""What the worker's scripts call (tierpool.store.streams.WORKER_SCRIPTS)."""

PRODUCER_DIRECT = (
    "evalsha",
    "eval",
    "script|load",
    "get",
    "exists",
    "xadd",
    "xread",
    "multi",
    "exec",
    "xinfo|groups",
    "xrange",
    "xpending",
    "zscan",
)
"""Submits (XADD, EVALSHA, SCRIPT LOAD), the spec and results (GET, EXISTS), following (MULTI, XADD, PEXPIRE,
EXEC, XREAD), cancels (EVALSHA of the cancel script, EVAL in releases before the task-id index; for a task that
index does not know, XINFO GROUPS, XRANGE, XPENDING and ZSCAN to find it, PEXPIREAT or DEL of its marker)."""
PRODUCER_SCRIPTS = (
    "time",
    "get",
    "xadd",
    "zadd",
    "zrem",
    "zrangebylex",
    "zrangebyscore",
    "hget",
    "hset",
    "hdel",
    "hincrby",
    "incr",
)
"""What the submit scripts call besides SET: the due-time index (SCHEDULE), the tenant gate (SUBMIT_GATED), the
task-id index (HSET ``…:where``, every submit script); and the CANCEL script, which takes a task that is not running
out of the due-time index, the throttled, stranded or held set (ZRANGEBYSCORE, ZRANGEBYLEX, ZREM) and writes its
cancelled record there and then (HDEL of its place, its remembered error and a throttled task's tenant slot)."""
PRODUCER_NARROW: Mapping[str, Keys] = {
    "set": ("dedupe:*", "cancel:*", "result:*"),
    "pexpire": ("events:*",),
    "pexpireat": ("cancel:*",),
    "del": ("cancel:*", "checkpoint:*"),
}
"""Commands that could destroy any key, on the keys a producer changes with them: dedupe keys (SUBMIT_ONCE,
SCHEDULE, SUBMIT_GATED), cancel markers (CANCEL, ``cancel``, ``cancel --undo``), event streams (``follow``, and
CANCEL's final event), the cancelled record and the dropped checkpoint of a task CANCEL takes out of a set."""
ADMIN_NARROW: Mapping[str, Keys] = {
    "del": ("dlq", "result:*", "cancel:*", "events:*"),
    "xdel": ("dlq",),
}
"""``dlq purge`` (DEL or XDEL of dead letters) and ``dlq replay`` (REPLAY, REPLAY_GATED: the task's old result,
marker and events go, in one DEL)."""

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


_PRODUCER = merged(_every_key(CONNECTION, REPLICATION, OBSERVE, PRODUCER_DIRECT, PRODUCER_SCRIPTS), PRODUCER_NARROW)
GRANTS: Mapping[Role, Mapping[str, Keys]] = {
    Role.WORKER: _every_key(CONNECTION, REPLICATION, OBSERVE, WORKER_DIRECT, WORKER_SCRIPTS),
    Role.PRODUCER: _PRODUCER,
    Role.ADMIN: merged(_PRODUCER, ADMIN_NARROW),
    Role.OPERATOR: merged(_every_key(CONNECTION, OBSERVE), OPERATOR_NARROW),
}
"""Each role's commands, and the key patterns (after each pool's prefix) it may send them to."""
READ_ONLY = frozenset({Role.OPERATOR})
"""Roles whose keys are granted read-only (``%R~``) but for their narrow selectors: the operator writes only the
published spec."""

USER_NAME = re.compile(ACL_USER_NAME)


def key_pattern(pool: PoolKeys, suffix: str) -> str:
    """A pool's key pattern: its prefix as a literal, then ``suffix`` (a glob)."""
    return glob_escape(pool.prefix) + suffix


def password_rule(password: str) -> str:
    """The ACL rule for ``password`` as its SHA-256 (``#<hex>``), so the password itself is never printed."""
    return "#" + hashlib.sha256(password.encode("utf-8")).hexdigest()


def rules(role: Role, pools: Sequence[PoolKeys], cluster: bool = False) -> list[str]:
    """The rules of ``role`` for ``pools`` (no user, no password): no channels, the keys and commands every key of
    the pools allows, then one selector per narrower set of keys, ``(~keys +commands)``."""
    if not pools:
        raise ValueError("an ACL needs at least one pool")
    grants = merged(GRANTS[role], _every_key(CLUSTER) if cluster else {})
    access = "%R~" if role in READ_ONLY else "~"
    by_keys: dict[Keys, list[str]] = {}
    for command, keys in grants.items():
        by_keys.setdefault(keys, []).append(command)

    def patterns(keys: Keys) -> list[str]:  # a narrow selector grants writes: read-write even for a read-only role
        prefix = access if keys == EVERY_KEY else "~"
        return [prefix + key_pattern(pool, suffix) for pool in pools for suffix in keys]

    def commands(names: Iterable[str]) -> list[str]:
        return ["+" + name for name in sorted(names)]

    found = ["resetchannels", *patterns(EVERY_KEY), "-@all", *commands(by_keys.pop(EVERY_KEY, []))]
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
