"""A worker process imports only what it runs: its start-up (a pod's, a local scale-up's) is mostly imports."""

from __future__ import annotations

import json
import subprocess
import sys

NOT_FOR_A_WORKER = ("rich", "yaml", "tierpool.commands", "tierpool.cli_support", "tierpool.crd", "tierpool.field_docs")


def test_the_worker_command_imports_no_terminal_output_yaml_or_other_commands() -> None:
    probe = "import sys, json, tierpool.cli, tierpool.worker_command; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True).stdout)
    assert [m for m in loaded if m.split(".")[0] in NOT_FOR_A_WORKER or m in NOT_FOR_A_WORKER] == []
    assert "tierpool.startup" in loaded  # what it does import: the worker itself
