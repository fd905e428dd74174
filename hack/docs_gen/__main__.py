"""``python -m hack.docs_gen``: regenerate every reference page (``make docs-gen``)."""

from hack.docs_gen import ROOT, write_all

for path in write_all():
    print(path.relative_to(ROOT))
