"""Starting ``tierpool worker``: a metrics port that is taken is one line and exit code 1."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from .support import make_pool, pool_env

pytestmark = [pytest.mark.redis, pytest.mark.slow]


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
