"""``tierpool worker`` reports a bad pool file, spec or Redis setting as one line, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD_POOL = """apiVersion: tierpool.io/v1alpha1
kind: AgentPool
metadata: {name: x, namespace: y}
spec: {tiers: []}
"""


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--file", "{bad}"], {}, "spec.tiers"),
        ([], {"TIERPOOL_POOL_SPEC": '{"bad": 1}'}, "environment: 3 error(s)"),
        (["--file", "{good}"], {"TIERPOOL_REDIS_MODE": "bogus"}, "'bogus' is not a valid RedisMode"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_code_1(
    tmp_path: Path, args: list[str], env: dict[str, str], says: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_POOL)
    good = Path(__file__).resolve().parents[3] / "examples" / "demo.yaml"
    argv = [a.format(bad=bad, good=good) for a in args]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TIERPOOL_")}
    done = subprocess.run(
        [sys.executable, "-m", "tierpool", "worker", *argv], env={**clean, **env}, capture_output=True, text=True
    )
    assert done.returncode == 1, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: ")
