"""A kubelet stand-in: runs as many real worker processes as a Deployment asks for, from its pod template.

There is no kubelet or container runtime here, so ``FakeKubelet`` reads the worker Deployment's ``spec.replicas``,
resolves the container's env (values, ConfigMap and Secret keys, the pod name), starts ``python -m tierpool`` with
the container's args, SIGTERMs the newest processes on scale-down, and writes the Deployment's status.
``PodKubelet`` plays the kubelet for the pod objects instead: binding, Ready status, finishing deletions.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client


class FakeKubelet:
    def __init__(self, api: client.ApiClient, namespace: str, deployment: str, log_dir: Path) -> None:
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.namespace, self.deployment, self.log_dir = namespace, deployment, log_dir
        self.running: list[subprocess.Popen[bytes]] = []
        self.draining: list[subprocess.Popen[bytes]] = []
        self.max_seen = 0
        self.started = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> FakeKubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for process in self.running + self.draining:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.running + self.draining:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.sync()
            except client.exceptions.ApiException:
                continue

    def sync(self) -> None:
        deployment = self.apps.read_namespaced_deployment(self.deployment, self.namespace)
        want = int(deployment.spec.replicas or 0)
        self.draining = [p for p in self.draining if p.poll() is None]
        self.running = [p for p in self.running if p.poll() is None]
        container = deployment.spec.template.spec.containers[0]
        while len(self.running) < want:
            self.running.append(self._start(container))
        while len(self.running) > want:
            process = self.running.pop()
            process.send_signal(signal.SIGTERM)
            self.draining.append(process)
        self.max_seen = max(self.max_seen, len(self.running))
        count = len(self.running)
        self.apps.patch_namespaced_deployment_status(
            self.deployment,
            self.namespace,
            {
                "status": {
                    "replicas": count,
                    "readyReplicas": count,
                    "availableReplicas": count,
                    "updatedReplicas": count,
                }
            },
        )

    def _start(self, container: Any) -> subprocess.Popen[bytes]:
        self.started += 1
        pod = f"{self.deployment}-pod-{self.started}"
        env = {**os.environ, **self._env(container.env or [], pod)}
        args = [*container.args, "--metrics-port", "0"]
        log = open(self.log_dir / f"{pod}.log", "wb")  # noqa: SIM115 - owned by the child
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "tierpool", *args], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        finally:
            log.close()

    def _env(self, variables: list[Any], pod: str) -> dict[str, str]:
        resolved: dict[str, str] = {}
        for var in variables:
            if var.value is not None:
                resolved[var.name] = var.value
            elif var.value_from and var.value_from.config_map_key_ref:
                ref = var.value_from.config_map_key_ref
                resolved[var.name] = self.core.read_namespaced_config_map(ref.name, self.namespace).data[ref.key]
            elif var.value_from and var.value_from.secret_key_ref:
                ref = var.value_from.secret_key_ref
                data = self.core.read_namespaced_secret(ref.name, self.namespace).data[ref.key]
                resolved[var.name] = base64.b64decode(data).decode()
            elif var.value_from and var.value_from.field_ref and var.value_from.field_ref.field_path == "metadata.name":
                resolved[var.name] = pod
        return resolved


class PodKubelet:
    """A kubelet stand-in for the pod objects the ReplicaSet controller creates (no processes): binds each pod of
    the selector to one node, reports it Running and Ready, and finishes a graceful deletion at once, as a
    kubelet does once the container has exited. ``ready_since`` backdates a pod's Ready condition."""

    NODE = "stand-in-node"

    def __init__(self, api: client.ApiClient, namespace: str, selector: str) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace, self.selector = namespace, selector
        self.deleted: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> PodKubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(0.3):
            try:
                self.sync()
            except client.exceptions.ApiException:
                continue

    def pods(self) -> list[Any]:
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items)

    def ready(self) -> list[str]:
        """Names of the pods that are Ready and not being deleted, oldest first."""
        live = [p for p in self.pods() if p.metadata.deletion_timestamp is None and _is_ready(p)]
        return [p.metadata.name for p in sorted(live, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))]

    def sync(self) -> None:
        for pod in self.pods():
            name = pod.metadata.name
            if pod.metadata.deletion_timestamp is not None:
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
                self.deleted.append(name)
            elif not pod.spec.node_name:
                binding = {"metadata": {"name": name}, "target": {"kind": "Node", "name": self.NODE}}
                # the typed reply would be a Binding, but the server answers with a Status: leave it unparsed
                self.core.create_namespaced_pod_binding(name, self.namespace, binding, _preload_content=False)
            elif not _is_ready(pod):
                self.ready_since(name, datetime.now(UTC))

    def ready_since(self, name: str, when: datetime) -> None:
        stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": stamp}
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        status = {"phase": "Running", "conditions": conditions, "startTime": stamp}
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": status})


def _is_ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
