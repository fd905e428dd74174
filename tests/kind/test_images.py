"""The images as containers: the worker serves a pool and drains on SIGTERM; the operator starts as UID 10001 with
a read-only root and no USER variable, against the cluster tier's real API server, and reconciles a pool."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import GROUP, PLURAL, VERSION, agentpool
from tests.cluster.harness import ControlPlane, free_port
from tests.integration.support import make_pool, results, sync_redis, wait_until
from tierpool.client.producer import Client

pytestmark = [pytest.mark.kind, pytest.mark.timeout(5400)]


@contextlib.contextmanager
def container(*args: str) -> Iterator[str]:
    name = f"tp-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "run", "-d", "--name", name, *args], check=True, capture_output=True, text=True)
    try:
        yield name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def logs(name: str) -> str:
    done = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
    return done.stdout + done.stderr


def inspect(name: str) -> dict[str, object]:
    found: dict[str, object] = json.loads(
        subprocess.run(["docker", "inspect", name], capture_output=True, text=True, check=True).stdout
    )[0]["State"]
    return found


def test_worker_container_serves_a_pool_and_drains_on_sigterm(
    images: tuple[str, str], redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name)
    worker_args = ["--network", "host", "--read-only", "--tmpfs", "/tmp", "-e", f"TIERPOOL_REDIS_URL={redis_url}"]
    worker_args += ["-e", f"TIERPOOL_POOL_SPEC={pool.model_dump_json(by_alias=True)}", images[1], "worker"]
    connection = sync_redis(redis_url)
    producer = Client(connection, pool)
    with container(*worker_args, "--metrics-port", "0") as name:
        ids = [producer.submit("p0", {"work_ms": 20}) for _ in range(20)]
        assert wait_until(lambda: len(results(connection, pool, ids)) == 20, 120), logs(name)
        assert {r["status"] for r in results(connection, pool, ids).values()} == {"succeeded"}
        long_task = producer.submit("p1", {"work_ms": 1500})
        assert wait_until(
            lambda: bool(connection.xpending(f"tierpool:{{{pool.ref}}}:tier:p1", "workers")["pending"]), 30
        )
        subprocess.run(["docker", "stop", "--time", "30", name], check=True, capture_output=True)
        state = inspect(name)
        assert state["ExitCode"] == 0, logs(name)
        assert results(connection, pool, [long_task])[long_task]["status"] == "succeeded", logs(name)


def test_operator_container_starts_as_10001_without_user_and_reconciles(
    images: tuple[str, str],
    control_plane: ControlPlane,
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    kube = tmp_path / "kube"
    kube.mkdir()
    (kube / "config").write_text(control_plane.kubeconfig_path.read_text())
    kube.chmod(0o755)
    (kube / "config").chmod(0o644)
    args = ["--network", "host", "--read-only", "--tmpfs", "/tmp", "-v", f"{kube}:/kube:ro"]
    args += ["-e", "KUBECONFIG=/kube/config", "-e", f"TIERPOOL_WATCH_NAMESPACES={namespace}"]
    args += ["-e", f"TIERPOOL_METRICS_PORT={free_port()}", "-e", f"TIERPOOL_HEALTH_PORT={free_port()}", images[0]]
    with container(*args) as name:
        env = subprocess.run(["docker", "exec", name, "env"], capture_output=True, text=True).stdout
        assert (
            "\nUSER=" not in f"\n{env}"
            and subprocess.run(["docker", "exec", name, "id", "-u"], capture_output=True, text=True).stdout.strip()
            == "10001"
        )
        spec = {"redis": {"url": "redis://127.0.0.1:1/0"}, "tiers": [{"name": "p0", "weight": 1}]}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool("boxed", spec))
        apps = client.AppsV1Api(api)

        def reconciled() -> bool:
            with contextlib.suppress(ApiException):
                return apps.read_namespaced_deployment("tierpool-boxed", namespace) is not None
            return False

        deadline = time.monotonic() + 120
        while not reconciled():
            assert inspect(name)["Running"], f"the operator container exited:\n{logs(name)[-3000:]}"
            assert time.monotonic() < deadline, f"no Deployment after 120 s:\n{logs(name)[-3000:]}"
            time.sleep(1)
        assert inspect(name)["Running"], logs(name)[-3000:]
