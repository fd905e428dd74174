"""Control-plane timings on this machine: warm start, AgentPool -> Deployment latency, 100 pools reconciled.

Reproduce:  .venv/bin/python bench/control_plane.py     (needs the binaries: make control-plane)
The cold figure (building kube-apiserver, kube-controller-manager and etcd from Go modules) is the build script's
own timing, recorded when the cache was empty; re-measure it with `rm -rf ~/.cache/tierpool/control-plane`.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import urllib3
from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.conftest import GROUP, PLURAL, VERSION, OperatorProcess, agentpool, install_crd  # noqa: E402
from tests.cluster.harness import ControlPlane, build_binaries  # noqa: E402

POOLS = 100


def wait(predicate, timeout: float) -> float:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError
        time.sleep(0.05)
    return time.monotonic() - started


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
        api = config.new_client_from_config(config_file=str(plane.kubeconfig_path))
        core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": "bench"}})
        operator = OperatorProcess(plane.kubeconfig_path, work / "operator.log", "bench").start()
        try:
            spec = {"tiers": [{"name": "p0", "weight": 1}], "redis": {"url": "redis://127.0.0.1:1/0"}}
            time.sleep(3)  # the operator's start-up
            custom.create_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, agentpool("first", spec))
            first = wait(
                lambda: any(
                    d.metadata.name == "tierpool-first" for d in apps.list_namespaced_deployment("bench").items
                ),
                60,
            )
            started = time.monotonic()
            for index in range(POOLS):
                custom.create_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, agentpool(f"p{index}", spec))
            wait(lambda: len(apps.list_namespaced_deployment("bench").items) >= POOLS + 1, 600)
            hundred = time.monotonic() - started
        finally:
            operator.stop()
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
    }
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "control_plane.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
