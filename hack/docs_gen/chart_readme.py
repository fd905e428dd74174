"""The chart's own README (what Artifact Hub and `helm show readme` print), from Chart.yaml and the `# --` comments
of values.yaml: the same values table as the site's Helm values page, so the two cannot disagree."""

from __future__ import annotations

from pathlib import Path

import yaml
from hack.docs_gen import helm_values
from hack.docs_gen.markdown import banner

HEADER = """\
# {name}

{description}

Version {version} (app {app_version}); Kubernetes {kube_version}. Documentation: [getting started on a
cluster]({home}/blob/main/docs/getting-started/cluster.md), [security]({home}/blob/main/docs/security.md).

## Install

```bash
helm install tierpool oci://ghcr.io/tierpool/charts/tierpool --version {version} \\
  -n tierpool-system --create-namespace
# from a checkout: helm install tierpool helm/tierpool -n tierpool-system --create-namespace
```

With `--set redis.enabled=true` the chart runs a development Redis and the printed notes give a pool that
reaches it, a port-forward for `tierpool submit`, and `helm test`, which submits a task to that pool and waits
for its result.

"""


def page(chart: Path) -> str:
    meta = yaml.safe_load((chart / "Chart.yaml").read_text(encoding="utf-8"))
    values = helm_values.page(chart / "values.yaml")
    table = values[values.index("| key |") :]
    header = HEADER.format(
        name=meta["name"],
        description=meta["description"],
        version=meta["version"],
        app_version=meta["appVersion"],
        kube_version=meta["kubeVersion"],
        home=meta["home"],
    )
    return (
        banner("helm/tierpool/Chart.yaml and the `# --` comments of its values.yaml")
        + header
        + ("## Values\n\n" + table)
    )
