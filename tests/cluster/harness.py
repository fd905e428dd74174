"""A real control plane for tests: etcd + kube-apiserver (+ kube-controller-manager), built from Go modules.

Like controller-runtime's envtest: binaries come from ``hack/build-control-plane.sh`` (cached outside the repo),
processes listen on free loopback ports in a temporary directory, an admin token authenticates, authorization is
RBAC, and teardown kills only the processes started here, by PID.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build_binaries() -> Path:
    """Run the build script (a no-op when cached); its last line is the bin dir."""
    done = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-control-plane.sh")], capture_output=True, text=True, timeout=3000
    )
    if done.returncode != 0:
        raise RuntimeError(f"building the control plane failed ({done.returncode}): {done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def kubeconfig(server: str, token: str, user: str = "admin") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": user,
        "clusters": [{"name": "test", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "test", "user": user}}],
    }


@dataclass
class ControlPlane:
    bin_dir: Path
    workdir: Path
    server: str = ""
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def kubeconfig_path(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    def write_kubeconfig(self, path: Path, token: str, user: str) -> Path:
        path.write_text(yaml.safe_dump(kubeconfig(self.server, token, user)))
        return path

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
        process = subprocess.Popen([str(self.bin_dir / name), *args], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.processes.append(process)
        return process

    def start(self, controller_manager: bool = True) -> ControlPlane:
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        self._spawn(
            "etcd",
            [
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--quota-backend-bytes=1073741824",
                "--log-level=warn",
            ],
        )
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self.workdir / "sa.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            )
        )
        (self.workdir / "sa.pub").write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        (self.workdir / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                f"--cert-dir={self.workdir / 'certs'}",
                f"--secure-port={api_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={self.workdir / 'sa.pub'}",
                f"--service-account-signing-key-file={self.workdir / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--v=1",
            ],
        )
        self.server = f"https://127.0.0.1:{api_port}"
        self.write_kubeconfig(self.kubeconfig_path, self.token, "admin")
        self.wait_ready(timeout=90)
        self.timings["apiserver_ready_seconds"] = round(time.monotonic() - started, 2)
        if controller_manager:
            self._spawn(
                "kube-controller-manager",
                [
                    f"--kubeconfig={self.kubeconfig_path}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    "--controllers=garbagecollector,deployment,replicaset,namespace,serviceaccount",
                    "--concurrent-gc-syncs=5",
                    "--v=1",
                ],
            )
        return self

    def get_json(self, path: str, accept: str = "application/json") -> Any:
        """GET as admin, for what the typed client cannot ask for (Table output, say)."""
        request = urllib.request.Request(
            f"{self.server}{path}", headers={"Authorization": f"Bearer {self.token}", "Accept": accept}
        )
        with urllib.request.urlopen(request, context=_insecure(), timeout=10) as response:
            return json.loads(response.read())

    def wait_ready(self, timeout: float) -> None:
        context = _insecure()
        request = urllib.request.Request(f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.token}"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{process.args[0]} exited with {process.returncode}; see {self.workdir}")
            try:
                with urllib.request.urlopen(request, context=context, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"kube-apiserver not ready after {timeout}s; logs in {self.workdir}")

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()


def _insecure() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def environment_ok() -> str | None:
    """None when a control plane can be had here; otherwise the reason it cannot."""
    if not (ROOT / "hack" / "build-control-plane.sh").exists():
        return "hack/build-control-plane.sh missing"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tierpool" / "control-plane"
    if any(cache.glob("*/bin/kube-apiserver")):
        return None
    if subprocess.run(["bash", "-c", "command -v go"], capture_output=True).returncode != 0:
        return "no Go toolchain to build kube-apiserver and etcd (run make control-plane on a machine with Go)"
    return None
