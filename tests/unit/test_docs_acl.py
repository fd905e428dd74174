"""The ACL lines in the README are what ``tierpool acl ROLE --pool default/agents`` prints today."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierpool.model.keys import PoolKeys
from tierpool.protocol.acl import Role, setuser_command

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("role", list(Role))
def test_the_readme_shows_the_acl_line_of_every_role(role: Role) -> None:
    line = setuser_command(f"tierpool-{role}", role, [PoolKeys("default", "agents")])
    assert f"  {line}\n" in README, f"README.md: regenerate with `tierpool acl {role} --pool default/agents`"


def test_the_readme_shows_no_other_acl_line() -> None:
    assert README.count("  ACL SETUSER ") == len(Role)
