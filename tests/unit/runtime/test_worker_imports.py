"""A worker process imports only what it runs: its start-up (a pod's, a local scale-up's) is mostly imports."""

from __future__ import annotations

import json
import subprocess
import sys

NOT_FOR_A_WORKER = (
    "rich",
    "yaml",
    "tierpool.cli.commands",
    "tierpool.cli.support",
    "tierpool.model.crd",
    "tierpool.model.field_docs",
)


def test_the_worker_command_imports_no_terminal_output_yaml_or_other_commands() -> None:
    probe = "import sys, json, tierpool.cli.main, tierpool.cli.worker; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True).stdout)
    assert [m for m in loaded if m.split(".")[0] in NOT_FOR_A_WORKER or m in NOT_FOR_A_WORKER] == []
    assert "tierpool.runtime.startup" in loaded  # what it does import: the worker itself
