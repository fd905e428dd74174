"""What the operator logs: decisions and changes, not routine success (kopf logs every timer pass at INFO), and
never a password: kopf at DEBUG logs whole bodies and diffs, and posts its object logs as Kubernetes Events."""

from __future__ import annotations

import logging
import re

from tierpool.model.redis_url import redact_urls_in

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


_TRACEBACKS = logging.Formatter()


class RedactUrls(logging.Filter):
    """Replaces the password of every Redis URL in a record's message, traceback and stack by ``***`` (the record
    itself, so every handler after it sees the redacted text).

    The traceback is formatted here into ``exc_text`` and ``exc_info`` cleared: every ``logging.Formatter``
    (kopf's Event poster's too) prints a cached ``exc_text`` and formats ``exc_info`` only when there is none, so
    no handler can print the exception's own, unredacted message."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_urls_in(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info:
            record.exc_text = record.exc_text or _TRACEBACKS.formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = redact_urls_in(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_urls_in(record.stack_info)
        return True


OBJECT_LOGGER = "kopf.objects"
"""kopf's per-object logger: its own handler posts records as Kubernetes Events, before any root handler."""


def install(verbose: bool) -> None:
    """Attach the filters to the root handlers (after ``tierpool.runtime.logs.configure`` set them), and the
    redaction to kopf's per-object logger, whose Events no root handler sees."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactUrls())
        handler.addFilter(RoutineSuccess(verbose))
    logging.getLogger(OBJECT_LOGGER).addFilter(RedactUrls())
