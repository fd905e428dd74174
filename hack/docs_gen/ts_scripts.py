"""The Lua scripts the TypeScript client runs, assembled by tierpool.scripts, as clients/typescript/scripts.json.

The TypeScript client sends exactly these sources (and SHA1s), so it runs the same ``.lua`` files as the Python
package, helpers included the same way. ``make ts-scripts`` (``python -m hack.docs_gen.ts_scripts``) writes the
file; tests/unit/test_ts_client.py regenerates it and compares it with the committed one, and the TypeScript
tests assemble the ``.lua`` files themselves and compare them with it, so neither side can drift.
"""

from __future__ import annotations

import json
from pathlib import Path

from tierpool import scripts
from tierpool.protocol.version import PROTOCOL

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "clients" / "typescript" / "scripts.json"
PRODUCER_SCRIPTS = ("SUBMIT", "SUBMIT_ONCE", "SUBMIT_GATED", "SCHEDULE", "CANCEL")
"""The scripts a producer calls (tierpool.store.submits and cancels)."""


def bundle() -> str:
    """The file's text: the protocol version and each producer script's path, includes, source and SHA1."""
    found = scripts.by_name()
    body = {
        "protocol": PROTOCOL,
        "scripts": {
            name: {
                "path": found[name].path,
                "includes": list(found[name].includes),
                "sha": found[name].sha,
                "source": found[name].source,
            }
            for name in PRODUCER_SCRIPTS
        },
    }
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"


def write(target: Path = TARGET) -> Path:
    target.write_text(bundle(), encoding="utf-8")
    return target


if __name__ == "__main__":
    print(write().relative_to(ROOT))
