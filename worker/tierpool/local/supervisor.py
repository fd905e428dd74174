"""Worker processes on this machine: the local actuator. Scale-up starts processes; scale-down drains them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tierpool.resource import SPEC_ENV_VAR, AgentPool


@dataclass
class ProcessPool:
    """Starts ``tierpool worker`` processes with the pool spec in their environment, like pods."""

    pool: AgentPool
    redis_url: str
    log_dir: Path
    base_env: Mapping[str, str]
    running: list[subprocess.Popen[bytes]] = field(default_factory=list)
    draining: list[subprocess.Popen[bytes]] = field(default_factory=list)
    started_total: int = 0
    consumers: dict[int, str] = field(default_factory=dict)
    """Consumer name of each worker process, by pid."""

    def scale(self, replicas: int, in_flight: Mapping[str, int] | None = None) -> None:
        """Start or drain workers to reach ``replicas``. Scale-in drains the workers with the fewest tasks in
        flight (``in_flight``: per consumer name), newest first among equals, like a ReplicaSet scale-down with
        pod-deletion costs."""
        self.reap()
        while len(self.running) < replicas:
            self.running.append(self._start())
        if len(self.running) > replicas:
            names = [self.consumer(process) for process in self.running]
            chosen = to_drain(names, in_flight or {}, len(self.running) - replicas)
            for process in (self.running[i] for i in chosen):
                process.send_signal(signal.SIGTERM)
                self.draining.append(process)
            self.running = [p for i, p in enumerate(self.running) if i not in chosen]

    def consumer(self, process: subprocess.Popen[bytes]) -> str:
        return self.consumers.get(process.pid, "")

    @property
    def size(self) -> int:
        return len(self.running)

    def reap(self) -> list[int]:
        """Forget exited processes; a crashed running worker is replaced on the next scale()."""
        codes = [p.returncode for p in self.draining if p.poll() is not None]
        self.draining = [p for p in self.draining if p.poll() is None]
        crashed = [p for p in self.running if p.poll() is not None]
        self.running = [p for p in self.running if p.poll() is None]
        live = {p.pid for p in [*self.running, *self.draining]}
        self.consumers = {pid: name for pid, name in self.consumers.items() if pid in live}
        return codes + [p.returncode for p in crashed]

    def stop(self, timeout: float) -> None:
        self.scale(0)
        for process in self.draining:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.draining = []

    def _start(self) -> subprocess.Popen[bytes]:
        self.started_total += 1
        env = dict(self.base_env)
        env.update({SPEC_ENV_VAR: self.pool.model_dump_json(by_alias=True), "TIERPOOL_REDIS_URL": self.redis_url})
        log = open(self.log_dir / f"worker-{self.started_total}.log", "wb")  # noqa: SIM115 - owned by the child
        consumer = f"local-{os.getpid()}-{self.started_total}"
        command = [sys.executable, "-m", "tierpool", "worker", "--metrics-port", "0", "--consumer", consumer]
        try:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        self.consumers[process.pid] = consumer
        return process


def to_drain(consumers: Sequence[str], in_flight: Mapping[str, int], count: int) -> set[int]:
    """Indexes of the ``count`` workers to scale in: fewest tasks in flight first, newest first among equals. Pure."""
    order = sorted(range(len(consumers)), key=lambda i: (in_flight.get(consumers[i], 0), -i))
    return set(order[: max(count, 0)])
