"""The wheel ships the Lua scripts: built from a copy of the source tree and installed into a fresh venv (with only
redis-py beside it), its tierpool.scripts assembles the same sources as the tree, and runs one on the server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.conftest import ROOT
from tierpool import scripts

pytestmark = [pytest.mark.redis, pytest.mark.slow]

IN_THE_VENV = """
import json, sys
import redis
from tierpool import scripts
found = scripts.by_name()
connection = redis.Redis.from_url(sys.argv[1], decode_responses=True)
sha = connection.script_load(scripts.source("RELEASE"))
reply = connection.evalsha(sha, 1, sys.argv[2], "nobody")
print(json.dumps({"file": scripts.__file__, "shas": {n: s.sha for n, s in found.items()}, "sha": sha, "reply": reply}))
"""


def run(*command: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def build_wheel(into: Path) -> Path:
    """The wheel of a copy of the source tree (so that the build leaves nothing behind in the tree)."""
    tree = into / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    for name in ("worker", "operator"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", into / "dist", tree, cwd=into)
    [wheel] = (into / "dist").glob("tierpool-*.whl")
    return wheel


def test_the_installed_wheel_assembles_the_same_scripts_and_runs_one(
    tmp_path: Path, redis_url: str, pool_name: str
) -> None:
    wheel = build_wheel(tmp_path)
    run(sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv", cwd=tmp_path)
    python = tmp_path / "venv" / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet"]
    run(*pip, "--no-deps", wheel, cwd=tmp_path)
    run(*pip, f"redis=={redis.__version__}", cwd=tmp_path)
    key = f"tierpool:{{test/{pool_name}}}:escalator-lease"
    report = json.loads(run(python, "-I", "-c", IN_THE_VENV, redis_url, key, cwd=tmp_path))
    assert Path(report["file"]).is_relative_to(tmp_path / "venv")
    assert report["shas"] == {name: script.sha for name, script in scripts.by_name().items()}
    assert report["sha"] == scripts.sha("RELEASE") and report["reply"] == 0
