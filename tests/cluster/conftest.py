"""Cluster-tier fixtures: one real control plane per session, one namespace per test, the operator as a process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.cluster.harness import ROOT, ControlPlane, build_binaries, environment_ok, free_port
from tests.conftest import unavailable

GROUP, VERSION, PLURAL = "tierpool.io", "v1alpha1", "agentpools"


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    reason = environment_ok()
    if reason:
        unavailable(reason)
    try:
        bin_dir = build_binaries()
    except RuntimeError as error:
        unavailable(str(error))
        raise
    plane = ControlPlane(bin_dir, tmp_path_factory.mktemp("control-plane")).start()
    try:
        install_crd(plane)
        yield plane
    finally:
        plane.stop()


def install_crd(plane: ControlPlane) -> None:
    api = config.new_client_from_config(config_file=str(plane.kubeconfig_path))
    extensions = client.ApiextensionsV1Api(api)
    extensions.create_custom_resource_definition(yaml.safe_load((ROOT / "crds" / "agentpool.yaml").read_text()))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        crd = extensions.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
        if any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])):
            return
        time.sleep(0.2)
    raise TimeoutError("CRD not established")


@pytest.fixture(scope="session")
def api(control_plane: ControlPlane) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(control_plane.kubeconfig_path))


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    with contextlib.suppress(ApiException):
        core.delete_namespace(name)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def agentpool(name: str, spec: dict[str, object]) -> dict[str, object]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentPool", "metadata": {"name": name}, "spec": spec}


class OperatorProcess:
    """``python -m tierpool_operator`` against the test API server, as a real process (restartable, killable)."""

    def __init__(self, kubeconfig: Path, log: Path, namespaces: str = "", env: dict[str, str] | None = None) -> None:
        self.kubeconfig, self.log, self.namespaces = kubeconfig, log, namespaces
        self.env = env or {}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "TIERPOOL_METRICS_PORT": str(free_port()),
            "TIERPOOL_HEALTH_PORT": str(free_port()),
            "TIERPOOL_LOG_FORMAT": "text",
            "TIERPOOL_WATCH_NAMESPACES": self.namespaces,
            # the test API server's certificate is not verified (loopback only); urllib3 would warn on every request
            "PYTHONWARNINGS": "ignore:Unverified HTTPS request",
            **self.env,  # the test's own settings win
        }
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tierpool_operator"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        return self

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def operator(control_plane: ControlPlane, tmp_path: Path, namespace: str) -> Iterator[OperatorProcess]:
    """The operator, watching only this test's namespace (other tests' pools are being deleted meanwhile)."""
    process = OperatorProcess(control_plane.kubeconfig_path, tmp_path / "operator.log", namespace).start()
    yield process
    process.stop()
