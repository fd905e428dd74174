"""Starting ``tierpool worker``: the installed console script imports a handler module from the current folder (as
``python -m tierpool worker`` does), and a metrics port that is taken is one line and exit code 1."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tierpool.client.producer import Client

from .support import killed_on_exit, make_pool, pool_env, sync_redis

pytestmark = [pytest.mark.redis, pytest.mark.slow]

CONSOLE_SCRIPT = Path(sys.executable).parent / "tierpool"
HANDLERS = """\
def handle(task):
    return {"seen": task.payload["n"], "module": __name__}
"""


def test_the_console_script_imports_a_handler_from_the_current_folder(
    redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    assert CONSOLE_SCRIPT.exists(), f"no console script at {CONSOLE_SCRIPT}: is tierpool installed in this venv?"
    (tmp_path / "myhandlers.py").write_text(HANDLERS)
    pool = make_pool(pool_name, worker={"handler": "myhandlers:handle"})
    env = {key: value for key, value in pool_env(pool, redis_url).items() if key != "PYTHONPATH"}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [str(CONSOLE_SCRIPT), "worker", "--metrics-port", "0"], cwd=tmp_path, env=env, stdout=out, stderr=out
        )
    with killed_on_exit(worker):
        producer = Client(sync_redis(redis_url), pool)
        try:
            found = producer.wait_result(producer.submit("p1", {"n": 7}), 20)
        except TimeoutError:
            pytest.fail(f"no result; the worker's log:\n{log.read_text()}")
        assert found.status == "succeeded" and found.result == {"seen": 7, "module": "myhandlers"}
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0


def test_a_taken_metrics_port_is_one_line_and_exit_code_1(redis_url: str, pool_name: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**pool_env(make_pool(pool_name), redis_url), "TIERPOOL_METRICS_BIND": "127.0.0.1"}
        done = subprocess.run(
            [sys.executable, "-m", "tierpool", "worker", "--metrics-port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"error: cannot serve /metrics, /healthz and /readyz on 127.0.0.1:{port}: taken by another process; "
        "choose another port with spec.worker.metricsPort or --metrics-port (0 = none)"
    ], done.stderr
