"""The ACL of each role (tierpool.protocol.acl): every command the worker's scripts call is granted, the roles
nest as documented, no role but the worker may destroy any key of its pool, and the rules render as Redis reads
them."""

from __future__ import annotations

import hashlib
import re

import pytest

from tierpool import scripts
from tierpool.model.keys import PoolKeys
from tierpool.protocol import acl
from tierpool.protocol.acl import EVERY_KEY, GRANTS, Role, aclfile_line, password_rule, rules, setuser_command
from tierpool.store.streams import WORKER_SCRIPTS

SOURCES = {name: scripts.source(name) for name in WORKER_SCRIPTS}

POOL = PoolKeys("ns", "agents")
CALL = re.compile(r"(?:redis\.p?call\(|pcall\(redis\.call,)\s*'(\w+)'(?:\s*,\s*'(\w+)')?")
CONTAINERS = {"xinfo", "xgroup", "client", "script", "object", "config"}
DESTROYS_ANY_KEY = {"del", "unlink", "set", "getdel", "pexpire", "pexpireat", "expire", "expireat", "rename", "xdel"}
"""Commands that can destroy (or replace) a key of any type: a stream full of tasks."""
LOADED_NOT_RUN = {"REPLAY"}
"""Scripts a worker loads with the others but never runs (``tierpool dlq replay`` runs it, as an admin)."""


def script_commands(source: str) -> set[str]:
    """The commands a Lua source names, subcommands as ``xinfo|groups``."""
    found = set()
    for command, second in CALL.findall(source):
        name = command.lower()
        found.add(f"{name}|{second.lower()}" if name in CONTAINERS and second else name)
    return found


def test_the_extraction_finds_plain_and_protected_calls() -> None:
    source = "redis.call('XADD', k) local ok, g = pcall(redis.call, 'XINFO', 'GROUPS', s) redis.pcall('TIME')"
    assert script_commands(source) == {"xadd", "xinfo|groups", "time"}


@pytest.mark.parametrize("name", sorted(set(SOURCES) - LOADED_NOT_RUN))
def test_the_worker_may_run_every_command_of_its_scripts(name: str) -> None:
    """A script runs with its caller's permissions: a command it calls that the worker lacks fails the script (or,
    under pcall, is silently read as "no group")."""
    missing = script_commands(SOURCES[name]) - set(GRANTS[Role.WORKER])
    assert not missing, f"{name} calls {sorted(missing)}"


def test_the_worker_holds_every_command_of_the_operator() -> None:
    """The operator reaches Redis with the pool's spec.redis, that is as the workers' user."""
    assert set(GRANTS[Role.OPERATOR]) <= set(GRANTS[Role.WORKER])


def test_an_admin_may_do_whatever_a_producer_may() -> None:
    for command, keys in GRANTS[Role.PRODUCER].items():
        granted = GRANTS[Role.ADMIN][command]
        assert granted == EVERY_KEY or set(keys) <= set(granted), command


@pytest.mark.parametrize("role", [Role.PRODUCER, Role.ADMIN, Role.OPERATOR])
def test_only_the_worker_may_destroy_any_key_or_acknowledge_entries(role: Role) -> None:
    broad = {command for command, keys in GRANTS[role].items() if keys == EVERY_KEY}
    assert not broad & (DESTROYS_ANY_KEY | {"xack", "xclaim", "xtrim", "xgroup|destroy", "flushall", "flushdb"})


def test_the_operator_only_reads_but_for_the_published_spec() -> None:
    assert not {"xadd", "del", "eval", "evalsha", "hset", "zadd"} & set(GRANTS[Role.OPERATOR])
    assert GRANTS[Role.OPERATOR]["set"] == ("spec",)
    found = rules(Role.OPERATOR, [POOL])
    assert [rule for rule in found if "~" in rule and not rule.startswith("%R~")] == [
        "(~tierpool:{ns/agents}:spec +set)"
    ]


def test_a_producer_line_reads_every_key_and_writes_only_through_selectors() -> None:
    line = setuser_command("tierpool-producer", Role.PRODUCER, [POOL])
    root = " ".join(sorted({*acl.CONNECTION, *acl.REPLICATION, *acl.OBSERVE, *acl.PRODUCER_READS}))
    prefix = "ACL SETUSER tierpool-producer reset on resetchannels %R~tierpool:{ns/agents}:* -@all "
    assert line.startswith(prefix + " ".join("+" + c for c in root.split()) + " (")
    assert ":tenants:" not in line and ":admitted:" not in line  # read (%R~), never written
    assert "+hincrby" not in line
    assert "(~tierpool:{ns/agents}:tier:* ~tierpool:{ns/agents}:events:* +xadd)" in line


WRITES = {"xadd", "hset", "hdel", "hincrby", "incr", "zadd", "zrem", "eval", "evalsha", "xdel", *DESTROYS_ANY_KEY}
PRODUCER_SCRIPTS = ("SUBMIT", "SUBMIT_ONCE", "SCHEDULE", "SUBMIT_GATED", "CANCEL")


@pytest.mark.parametrize("role", [Role.PRODUCER, Role.ADMIN])
def test_a_producer_writes_no_key_of_its_pool_but_those_its_operations_change(role: Role) -> None:
    """Not the tenant counts' own command (HSET), nor any key of the lease, the rate limits or the reservations."""
    broad = {command for command, keys in GRANTS[role].items() if keys == EVERY_KEY}
    assert not broad & WRITES
    written = {suffix for command in WRITES for suffix in GRANTS[role].get(command, ())}
    assert not {"lease:escalator", "ratelimit:*", "reservation:*", "reentered", "deferrals:*", "spec"} & written
    assert not {"tenants:*", "admitted:*"} & written


HELPERS_PRODUCERS_NEVER_RUN = {"xack", "xdel", "hincrby"}
"""helpers/stream.lua's dead_letter and delete_acked, and helpers/tenants.lua's admit and release (a worker's
side of the gate: a producer's queues), included in every script but called by no producer's."""


@pytest.mark.parametrize("name", PRODUCER_SCRIPTS)
def test_a_producer_may_run_every_command_of_its_scripts(name: str) -> None:
    missing = script_commands(scripts.source(name)) - set(GRANTS[Role.PRODUCER]) - HELPERS_PRODUCERS_NEVER_RUN
    assert not missing, f"{name} calls {sorted(missing)}"
    assert not HELPERS_PRODUCERS_NEVER_RUN & set(GRANTS[Role.PRODUCER])


def test_a_selector_holds_every_key_one_command_needs() -> None:
    """A command is allowed when the root rules or one selector allow all its keys: REPLAY's single DEL of the
    task's result, marker and events needs them in one selector."""
    (deletes,) = [rule for rule in rules(Role.ADMIN, [POOL]) if rule.startswith("(") and "+del" in rule]
    for suffix in ("dlq", "result:*", "cancel:*", "events:*"):
        assert f"~tierpool:{{ns/agents}}:{suffix} " in deletes


def test_every_pool_gets_its_own_patterns() -> None:
    found = rules(Role.WORKER, [POOL, PoolKeys("other", "pool")])
    assert [rule for rule in found if "~" in rule] == ["~tierpool:{ns/agents}:*", "~tierpool:{other/pool}:*"]


def test_a_pool_ref_is_a_literal_in_the_pattern() -> None:
    assert acl.key_pattern(PoolKeys("ns", "a*b?"), "*") == r"tierpool:{ns/a\*b\?}:*"


def test_cluster_mode_adds_the_cluster_clients_commands() -> None:
    added = set(rules(Role.PRODUCER, [POOL], cluster=True)) - set(rules(Role.PRODUCER, [POOL]))
    assert added == {"+cluster|slots", "+cluster|shards", "+command"}


def test_the_password_is_given_only_as_its_sha256() -> None:
    line = setuser_command("u", Role.WORKER, [POOL], password_rule("s3cret"))
    assert "s3cret" not in line
    assert line.startswith(f"ACL SETUSER u reset on #{hashlib.sha256(b's3cret').hexdigest()} resetchannels ")


def test_without_a_password_the_line_sets_none() -> None:
    assert setuser_command("u", Role.WORKER, [POOL]).startswith("ACL SETUSER u reset on resetchannels ")


def test_the_aclfile_line_has_the_same_rules() -> None:
    assert aclfile_line("u", Role.ADMIN, [POOL]) == "user " + setuser_command("u", Role.ADMIN, [POOL])[12:]


@pytest.mark.parametrize("user", ["", "two words", "x" * 129, "-leading", "semi;colon"])
def test_a_user_name_redis_would_split_or_misread_is_refused(user: str) -> None:
    with pytest.raises(ValueError, match="user name"):
        setuser_command(user, Role.WORKER, [POOL])


def test_an_acl_needs_a_pool() -> None:
    with pytest.raises(ValueError, match="pool"):
        rules(Role.WORKER, [])
