"""Local mode stops, not restarts, once a worker could not load the pool's handler."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierpool.local import supervisor
from tierpool.local.supervisor import HandlerNotLoaded, ProcessPool, last_error
from tierpool.model.resource import parse_pool
from tierpool.runtime.entry import HANDLER_NOT_LOADED

POOL = parse_pool({"kind": "AgentPool", "metadata": {"name": "p"}, "spec": {"tiers": [{"name": "p0", "weight": 1}]}})


class FakeWorker:
    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        return self.returncode


def test_a_worker_that_cannot_load_the_handler_stops_the_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[FakeWorker] = []

    def start(consumer: str, env: dict[str, str], log: Path) -> FakeWorker:
        started.append(FakeWorker(len(started) + 1))
        log.write_text("starting\nerror: handler 'gone:run': cannot import module 'gone': No module named 'gone'\n")
        return started[-1]

    monkeypatch.setattr(supervisor, "start_worker", start)
    pool = ProcessPool(POOL, "redis://x", tmp_path, {})
    pool.scale(2)
    pool.check_handler()  # both still starting: nothing to report
    started[0].returncode = HANDLER_NOT_LOADED
    pool.scale(2)  # the one that exited is not replaced
    assert len(started) == 2 and pool.size == 1
    with pytest.raises(HandlerNotLoaded) as raised:
        pool.check_handler()
    assert str(raised.value) == (
        f"handler 'gone:run': cannot import module 'gone': No module named 'gone' (worker log: {tmp_path}/worker-1.log)"
    )


def test_a_crashed_worker_is_still_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[FakeWorker] = []

    def start(consumer: str, env: dict[str, str], log: Path) -> FakeWorker:
        started.append(FakeWorker(len(started) + 1))
        return started[-1]

    monkeypatch.setattr(supervisor, "start_worker", start)
    pool = ProcessPool(POOL, "redis://x", tmp_path, {})
    pool.scale(1)
    started[0].returncode = 1
    pool.scale(1)
    pool.check_handler()
    assert len(started) == 2


def test_last_error_without_an_error_line_points_at_the_log(tmp_path: Path) -> None:
    assert last_error(tmp_path / "missing.log") == "a worker could not load the pool's handler"
