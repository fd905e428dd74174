"""The TypeScript client (clients/typescript) against its Python sources: its copy of the producer scripts
(scripts.json) is what tierpool.scripts assembles from the ``.lua`` files (a script edited without
``make ts-scripts`` fails here), and its package carries tierpool's version."""

from __future__ import annotations

import json

from hack.docs_gen import ts_scripts

from tierpool import scripts
from tierpool._version import __version__
from tierpool.protocol.version import PROTOCOL


def test_committed_bundle_matches_the_lua_sources() -> None:
    committed = ts_scripts.TARGET.read_text(encoding="utf-8")
    assert committed == ts_scripts.bundle(), "clients/typescript/scripts.json is stale: run `make ts-scripts`"


def test_bundle_carries_each_producer_script_with_its_sha() -> None:
    body = json.loads(ts_scripts.bundle())
    assert body["protocol"] == PROTOCOL
    assert sorted(body["scripts"]) == sorted(ts_scripts.PRODUCER_SCRIPTS)
    for name, script in body["scripts"].items():
        assert script["source"] == scripts.source(name)
        assert script["sha"] == scripts.sha1_hex(script["source"]) == scripts.sha(name)


def test_the_typescript_package_has_tierpool_s_version() -> None:
    package = json.loads((ts_scripts.ROOT / "clients" / "typescript" / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((ts_scripts.ROOT / "clients" / "typescript" / "package-lock.json").read_text(encoding="utf-8"))
    assert package["name"] == "@tierpool/client"
    assert package["version"] == lock["version"] == lock["packages"][""]["version"] == __version__
