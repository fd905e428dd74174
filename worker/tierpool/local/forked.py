"""Local worker processes forked from a server that has imported tierpool once (multiprocessing's forkserver).

A worker started with ``python -m tierpool worker`` spends about 0.7 s of CPU importing tierpool, pydantic and
redis before it reads a task; when a burst starts seven at once on a two-core laptop, they take 3 s or more.
Forked from a process that has done those imports, a worker starts in tens of milliseconds. The server imports
only tierpool's own modules, never the pool's handler: user code may open sockets at import, which forked
children must not share.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from multiprocessing.process import BaseProcess
from pathlib import Path

PRELOAD = ["tierpool.cli", "tierpool.worker_command"]
"""What the fork server imports before it forks any worker: the CLI and everything ``tierpool worker`` runs."""


def _run_worker(argv: list[str], env: dict[str, str], log_path: str) -> None:
    """The forked child: output to its log file, the environment it would have had as a new process, the CLI."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(env)
    from tierpool.cli import main

    sys.exit(main(argv))


class ForkedWorker:
    """One forked worker, with the part of ``subprocess.Popen``'s interface the process pool uses."""

    def __init__(self, process: BaseProcess) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        return self._process.pid or 0

    @property
    def returncode(self) -> int | None:
        """The exit code, or minus the signal that ended it (as Popen reports it); None while it runs."""
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(["tierpool", "worker"], timeout or 0.0)
        return self._process.exitcode


def start_worker(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> ForkedWorker:
    """Fork ``tierpool <argv>`` from the fork server (started, and its imports done, on the first call)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    process = context.Process(target=_run_worker, args=(list(argv), dict(env), str(log_path)), name="tierpool-worker")
    process.start()
    return ForkedWorker(process)
