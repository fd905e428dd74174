"""The ACL lines in docs/security.md are what ``tierpool acl ROLE --pool default/agents`` prints today."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierpool.model.keys import PoolKeys
from tierpool.protocol.acl import Role, setuser_command

SECURITY = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("role", list(Role))
def test_the_security_page_shows_the_acl_line_of_every_role(role: Role) -> None:
    line = setuser_command(f"tierpool-{role}", role, [PoolKeys("default", "agents")])
    assert f"  {line}\n" in SECURITY, f"docs/security.md: regenerate with `tierpool acl {role} --pool default/agents`"


def test_the_security_page_shows_no_other_acl_line() -> None:
    assert SECURITY.count("  ACL SETUSER ") == len(Role)
