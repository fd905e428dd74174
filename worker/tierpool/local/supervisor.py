"""Worker processes on this machine: the local actuator. Scale-up starts processes; scale-down drains them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tierpool.local.forked import WorkerProcess, start_worker
from tierpool.model.resource import SPEC_ENV_VAR, AgentPool
from tierpool.runtime.entry import HANDLER_NOT_LOADED


class HandlerNotLoaded(RuntimeError):
    """A worker exited because it cannot load the pool's handler: every worker would, so local mode stops."""


@dataclass
class ProcessPool:
    """Starts ``tierpool worker`` processes with the pool spec in their environment, like pods (forked from a
    server that has imported tierpool once: see tierpool.local.forked)."""

    pool: AgentPool
    redis_url: str
    log_dir: Path
    base_env: Mapping[str, str]
    running: list[WorkerProcess] = field(default_factory=list)
    draining: list[WorkerProcess] = field(default_factory=list)
    started_total: int = 0
    consumers: dict[int, str] = field(default_factory=dict)
    """Consumer name of each worker process, by pid."""
    logs: dict[int, Path] = field(default_factory=dict)
    """Log file of each worker process, by pid."""
    unloadable: list[Path] = field(default_factory=list)
    """Logs of the workers that exited because they could not load the handler."""

    def scale(self, replicas: int, in_flight: Mapping[str, int] | None = None) -> None:
        """Start or drain workers to reach ``replicas``. Scale-in drains the workers with the fewest tasks in
        flight (``in_flight``: per consumer name), newest first among equals, like a ReplicaSet scale-down with
        pod-deletion costs."""
        self.reap()
        while len(self.running) < replicas and not self.unloadable:  # a new worker could not load it either
            self.running.append(self._start())
        if len(self.running) > replicas:
            names = [self.consumer(process) for process in self.running]
            chosen = to_drain(names, in_flight or {}, len(self.running) - replicas)
            for process in (self.running[i] for i in chosen):
                process.send_signal(signal.SIGTERM)
                self.draining.append(process)
            self.running = [p for i, p in enumerate(self.running) if i not in chosen]

    def consumer(self, process: WorkerProcess) -> str:
        return self.consumers.get(process.pid, "")

    @property
    def size(self) -> int:
        return len(self.running)

    def reap(self) -> list[int]:
        """Forget exited processes; a crashed running worker is replaced on the next scale(), unless one could not
        load the handler (``unloadable``: no worker is started after that, see ``check_handler``)."""
        exited = [p for p in self.running if p.poll() == HANDLER_NOT_LOADED]
        self.unloadable += [self.logs[p.pid] for p in exited if p.pid in self.logs]
        drained, self.draining = _exited(self.draining)
        crashed, self.running = _exited(self.running)
        live = {p.pid for p in [*self.running, *self.draining]}
        self.consumers = {pid: name for pid, name in self.consumers.items() if pid in live}
        self.logs = {pid: path for pid, path in self.logs.items() if pid in live}
        return drained + crashed

    def check_handler(self) -> None:
        """HandlerNotLoaded, with the worker's own error line, once a worker could not load the handler."""
        if self.unloadable:
            log = self.unloadable[0]
            raise HandlerNotLoaded(f"{last_error(log)} (worker log: {log})")

    def stop(self, timeout: float) -> None:
        """Drain every worker, all within one ``timeout`` (the grace period), then kill what is left."""
        self.scale(0)
        deadline = time.monotonic() + timeout
        for process in self.draining:
            try:
                process.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.draining = []

    def _start(self) -> WorkerProcess:
        self.started_total += 1
        env = dict(self.base_env)
        env.update({SPEC_ENV_VAR: self.pool.model_dump_json(by_alias=True), "TIERPOOL_REDIS_URL": self.redis_url})
        consumer = f"local-{os.getpid()}-{self.started_total}"
        log = self.log_dir / f"worker-{self.started_total}.log"
        process = start_worker(consumer, env, log)
        self.consumers[process.pid] = consumer
        self.logs[process.pid] = log
        return process


def last_error(log: Path) -> str:
    """The last ``error: ...`` line a worker wrote to its log (without the prefix), else a pointer to the log."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    return errors[-1] if errors else "a worker could not load the pool's handler"


def _exited(processes: Sequence[WorkerProcess]) -> tuple[list[int], list[WorkerProcess]]:
    """The exit codes of the processes that have ended, and the ones still running (one poll each)."""
    codes, alive = [], []
    for process in processes:
        code = process.poll()
        if code is None:
            alive.append(process)
        else:
            codes.append(code)
    return codes, alive


def to_drain(consumers: Sequence[str], in_flight: Mapping[str, int], count: int) -> set[int]:
    """Indexes of the ``count`` workers to scale in: fewest tasks in flight first, newest first among equals. Pure."""
    order = sorted(range(len(consumers)), key=lambda i: (in_flight.get(consumers[i], 0), -i))
    return set(order[: max(count, 0)])
