"""The user path on a real kind cluster: build, load, helm install, apply a pool, push a burst, scale up and back.

Runs with `make kind-e2e` on a machine with Docker and kind. Skipped (with the reason) when no kind cluster is
reachable, e.g. on machines without a container engine. `make test` does not include this tier.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.kind


def sh(command: str, timeout: float = 900) -> str:
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def kind_cluster() -> None:
    for tool in ("kind", "kubectl", "docker"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed; the kind tier needs Docker, kind and kubectl")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker engine is running")
    if "tierpool" not in subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True).stdout:
        sh("make kind-up")
    sh("make kind-load deploy example")


def replicas() -> int:
    out = sh("kubectl get deployment tierpool-kind -n tierpool-system -o json")
    return int(json.loads(out)["spec"]["replicas"])


def test_burst_scales_up_and_back_with_nothing_lost(kind_cluster: None) -> None:
    sh("kubectl wait -n tierpool-system --for=condition=Available deployment/tierpool-kind --timeout=180s")
    sh("make load")
    deadline = time.monotonic() + 180
    while replicas() <= 1:
        assert time.monotonic() < deadline, "the pool did not scale up"
        time.sleep(2)
    deadline = time.monotonic() + 600
    while True:
        status = json.loads(sh("kubectl get agentpool kind -n tierpool-system -o json"))["status"]
        if status.get("backlog") == 0 and all(t["pending"] == 0 for t in status["tiers"]) and replicas() == 1:
            break
        assert time.monotonic() < deadline, f"did not drain and return to min: {status}"
        time.sleep(5)
    dlq = json.loads(
        sh(".venv/bin/tierpool status --pool tierpool-system/kind --redis-url redis://:dev@localhost:6379/0 --json")
    )
    assert dlq["dlq"] == 0
