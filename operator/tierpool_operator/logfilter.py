"""What the operator logs: decisions and changes, not routine success (kopf logs every timer pass at INFO)."""

from __future__ import annotations

import logging
import re

ROUTINE = re.compile(r"^((Timer|Daemon) '[^']*'|Handler 'worker_deployment_event') succeeded\.$")
"""kopf's routine success lines: a daemon (the scaler) ending as its pool goes or the operator stops or pauses, one
per pool, and the Deployment watch's handler on every Deployment event (its repairs log their own line and post a
Restored Event)."""


class RoutineSuccess(logging.Filter):
    """Drops kopf's ``Daemon '...' succeeded.`` INFO line (one per pool at every stop or pause) and the Deployment
    watch's ``Handler 'worker_deployment_event' succeeded.`` (one per Deployment event). Failures, the
    operator's own decisions (scaled, restored, unreachable) and kopf's other lines pass; DEBUG shows it all."""

    def __init__(self, verbose: bool = False) -> None:
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if self.verbose or record.levelno != logging.INFO or not record.name.startswith("kopf"):
            return True
        return not ROUTINE.match(record.getMessage())


def install(verbose: bool) -> None:
    """Attach the filter to the root handlers (after ``tierpool.runtime.logs.configure`` set them)."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(RoutineSuccess(verbose))
