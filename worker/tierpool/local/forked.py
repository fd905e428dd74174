"""Local worker processes forked from a server that has imported tierpool once (multiprocessing's forkserver).

A worker started with ``python -m tierpool worker`` spends about 0.3 s of CPU importing tierpool, pydantic and
redis before it reads a task; when a burst starts seven at once on a two-core laptop, each takes well over a
second. Forked from a process that has done those imports, a worker starts in tens of milliseconds. The server
imports only tierpool's own modules, never the pool's handler: user code may open sockets at import, which forked
children must not share. Where there is no forkserver (Windows), workers start as new interpreters.

A forked worker is the fork server's child, not ours: if the server dies, multiprocessing reports every worker
as ended with 255 while they still run. On Linux each worker is also held by a pidfd, which says whether it
still runs and signals it without the risk of a reused pid.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from multiprocessing import forkserver, util
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Protocol

PRELOAD = ["tierpool.runtime.entry", "tierpool.local.forked"]
"""What the fork server imports before it forks any worker: everything ``tierpool worker`` runs, and this
module (each child unpickles ``_run_worker`` from it)."""
EXIT_GRACE = 10.0
"""Seconds workers still running when local mode's process exits get to drain before they are killed."""
WORKER_NAME = "tierpool-worker"
"""The multiprocessing name of every forked worker."""
SERVER_GONE = 255
"""What multiprocessing reports for every forked worker once the fork server has died."""


class WorkerProcess(Protocol):
    """The part of ``subprocess.Popen``'s interface the process pool uses."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...


def _run_worker(consumer: str, env: dict[str, str], log_path: str, cwd: str) -> None:
    """The forked child: output to its log file, the directory, import path and environment it would have had as
    ``python -m tierpool`` started now (the pool's handler module may sit in the current directory), then the
    worker's entry point, as ``tierpool worker`` would run it."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.path.insert(0, cwd)  # multiprocessing has already changed to the parent's directory
    os.environ.clear()
    os.environ.update(env)
    from tierpool.runtime.stopping import STOP

    STOP.install()
    from tierpool.runtime.entry import serve_from_env

    old_python = sys.version_info < (3, 13)  # before 3.13 a forkserver child ends in os._exit: no atexit hooks
    if old_python:  # as 3.13 does: not the fork server's hooks, the child's own (gh-83856)
        atexit._clear()
        atexit.register(util._exit_function)  # type: ignore[attr-defined]
    try:
        code = serve_from_env(consumer, metrics_port=0)
    finally:
        if old_python:  # as an interpreter exits: non-daemon threads joined first, then the atexit hooks
            threading._shutdown()  # type: ignore[attr-defined]
            atexit._run_exitfuncs()
    sys.exit(code)


class ForkedWorker:
    """One forked worker (a ``WorkerProcess``)."""

    def __init__(self, process: BaseProcess) -> None:
        if process.pid is None:
            raise RuntimeError("the fork server started no process")
        self._process, self.pid = process, process.pid
        self._pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # not on Linux, or already gone
            self._pidfd = os.pidfd_open(self.pid)
            closer = weakref.finalize(self, _close_quietly, self._pidfd)
            closer.atexit = False  # at exit _stop_leftovers still signals through it

    @property
    def returncode(self) -> int | None:
        """The exit code, or minus the signal that ended it (as Popen reports it); None while it runs."""
        code = self._process.exitcode
        if code == SERVER_GONE and self._alive():
            return None
        return code

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, OSError):  # ended since: as Popen does
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode == SERVER_GONE:  # no parent to report the end: watch the process itself
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._alive() and (deadline is None or time.monotonic() < deadline):
                time.sleep(0.05)
        code = self.returncode
        if code is None:
            raise subprocess.TimeoutExpired(["tierpool", "worker"], timeout or 0.0)
        return code

    def _alive(self) -> bool:
        """Whether the process still runs, asked of it rather than of its parent (the fork server)."""
        if self._pidfd is not None:
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            return not poller.poll(0)  # a pidfd turns readable when its process ends
        try:
            os.kill(self.pid, 0)  # without pidfds: a pid reused since could answer, a risk Popen takes too
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


_started: list[WorkerProcess] = []


def _stop_leftovers() -> None:
    """At exit, workers a caller left running (an interrupted stop, a failed test) are drained, then killed:
    multiprocessing would otherwise wait for its children without a bound, and a new process's would be orphans."""
    known = {worker.pid for worker in _started}
    stray = [  # started, but the caller never got them (a signal between start and return)
        ForkedWorker(p) for p in multiprocessing.active_children() if p.name == WORKER_NAME and p.pid not in known
    ]
    left = [worker for worker in [*_started, *stray] if worker.poll() is None]
    for worker in left:
        worker.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + EXIT_GRACE
    for worker in left:
        try:
            worker.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            worker.kill()


@functools.cache
def _exit_hook() -> None:
    atexit.register(_stop_leftovers)  # after multiprocessing's own exit hook (it joins children), so it runs first


def forking() -> bool:
    """Whether workers are forked from a fork server (everywhere but Windows)."""
    return "forkserver" in multiprocessing.get_all_start_methods()


def warm() -> None:
    """Start the fork server and do its imports now, so that the first scale-up does not wait for them."""
    if forking():
        multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
        forkserver.ensure_running()


def worker_argv(consumer: str) -> list[str]:
    """The ``tierpool`` command line of a local worker: no metrics endpoint, its own consumer name."""
    return ["worker", "--metrics-port", "0", "--consumer", consumer]


def start_worker(consumer: str, env: Mapping[str, str], log_path: Path) -> WorkerProcess:
    """Start ``tierpool worker`` as ``consumer``: forked from the fork server (started on the first call unless
    ``warm``), or as a new interpreter where there is none."""
    _exit_hook()
    _started[:] = [worker for worker in _started if worker.poll() is None]
    worker: WorkerProcess
    if forking():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        args = (consumer, dict(env), str(log_path), os.getcwd())
        process = context.Process(target=_run_worker, args=args, name=WORKER_NAME)
        process.start()
        worker = ForkedWorker(process)
    else:
        worker = new_interpreter(worker_argv(consumer), env, log_path)
    _started.append(worker)
    return worker


def new_interpreter(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """``python -m tierpool <argv>`` as a new process, output to ``log_path``."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tierpool", *argv], env=dict(env), stdout=log, stderr=subprocess.STDOUT
        )
