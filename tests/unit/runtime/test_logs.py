"""Operator log lines: no settings dumps in JSON, no INFO line per successful timer pass."""

from __future__ import annotations

import io
import json
import logging

import kopf
import pytest

from tierpool.runtime import logs
from tierpool.runtime.logs import JsonFormatter
from tierpool_operator.logfilter import RoutineSuccess

REF = {"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "name": "agents", "uid": "u", "namespace": "team"}


def kopf_record(message: str, level: int = logging.INFO, name: str = "kopf.objects") -> logging.LogRecord:
    """A record as kopf's ObjectLogger makes it: its extras carry the whole OperatorSettings."""
    record = logging.LogRecord(name, level, __file__, 1, message, None, None)
    record.__dict__.update(settings=kopf.OperatorSettings(), k8s_skip=False, k8s_ref=REF)
    return record


def test_json_lines_carry_the_object_and_not_the_settings() -> None:
    line = JsonFormatter().format(kopf_record("Handler 'reconcile' succeeded."))
    payload = json.loads(line)
    assert "settings" not in payload and "k8s_skip" not in payload
    assert payload["object"] == "AgentPool/team/agents" and payload["message"] == "Handler 'reconcile' succeeded."
    assert len(line) < 300, line


@pytest.mark.parametrize(
    ("message", "level", "name", "verbose", "kept"),
    [
        ("Timer 'autoscale' succeeded.", logging.INFO, "kopf.objects", False, False),
        ("Timer 'autoscale' succeeded.", logging.INFO, "kopf.objects", True, True),  # DEBUG level shows it
        ("Timer 'autoscale' failed with an exception. Will retry.", logging.ERROR, "kopf.objects", False, True),
        ("Daemon 'autoscale' succeeded.", logging.INFO, "kopf.objects", False, False),  # 1,000 at every stop
        ("Daemon 'autoscale' succeeded.", logging.INFO, "kopf.objects", True, True),
        ("Daemon 'autoscale' failed with an exception. Will retry.", logging.ERROR, "kopf.objects", False, True),
        ("Handler 'reconcile' succeeded.", logging.INFO, "kopf.objects", False, True),  # a change: kept
        ("Handler 'worker_deployment_event' succeeded.", logging.INFO, "kopf.objects", False, False),
        ("Handler 'worker_deployment_event' succeeded.", logging.INFO, "kopf.objects", True, True),
        ("Handler 'worker_deployment_event' failed with an exception.", logging.ERROR, "kopf.objects", False, True),
        ("scaled workers 1 -> 3: sla policy", logging.INFO, "tierpool.operator", False, True),
        ("Timer 'autoscale' succeeded.", logging.INFO, "tierpool.operator", False, True),  # not kopf's
    ],
)
def test_routine_success_is_not_logged(message: str, level: int, name: str, verbose: bool, kept: bool) -> None:
    assert RoutineSuccess(verbose).filter(kopf_record(message, level, name)) is kept


SECRET_URL = "redis://app:hun'ter 2@redis:6379/0"


def _fail_to_connect() -> None:
    raise ConnectionError(f"cannot reach {SECRET_URL}")


@pytest.mark.parametrize("worker_log", ["text", "json"], indirect=True)
def test_tracebacks_and_stacks_lose_their_passwords(worker_log: io.StringIO) -> None:
    try:
        _fail_to_connect()
    except ConnectionError:
        logging.getLogger("tierpool.test").exception("startup failed for %s", SECRET_URL, stack_info=True)
    logging.getLogger("tierpool.test").warning("body", extra={"body": {"url": [SECRET_URL]}})
    written = worker_log.getvalue()
    assert "_fail_to_connect" in written and "ConnectionError" in written and "Stack (most recent" in written
    assert "hun" not in written and "ter 2" not in written, written
    shown = 3 if written.startswith("{") else 2  # the text format writes no extras
    assert written.count("redis://app:***@redis:6379/0") == shown, written


def test_a_failed_tasks_traceback_follows_its_text_log_line() -> None:
    record = logging.LogRecord("tierpool.worker", logging.WARNING, "", 0, "task t dead-lettered", None, None)
    record.traceback = "Traceback (most recent call last):\nRuntimeError: redis://u:pw@h:1/0\n"
    text = logs.TextFormatter().format(record)
    assert text.endswith("task t dead-lettered\nTraceback (most recent call last):\nRuntimeError: redis://u:***@h:1/0")
    assert json.loads(JsonFormatter().format(record))["traceback"].endswith("redis://u:***@h:1/0\n")


@pytest.mark.parametrize("worker_log", ["text", "json"], indirect=True)
def test_lines_logged_in_a_run_carry_its_fields_and_others_none(worker_log: io.StringIO) -> None:
    app = logging.getLogger("app")
    app.info("before")
    token = logs.enter_run("t1", "resolve", "p0", 2)
    try:
        app.warning("inside %s", "the run")
        app.info("mine", extra={"tier": "kept"})  # a caller's own extra of the same name wins
    finally:
        logs.leave_run(token)
    app.info("after")
    lines = worker_log.getvalue().splitlines()
    assert len(lines) == 4 and logs.current_run() is None
    if worker_log.getvalue().startswith("{"):
        records = [json.loads(line) for line in lines]
        fields = [{name: record.get(name) for name in logs.RUN_FIELDS} for record in records]
        assert fields[0] == fields[3] == dict.fromkeys(logs.RUN_FIELDS)
        assert fields[1] == {"task_id": "t1", "task": "resolve", "tier": "p0", "attempt": 2}
        assert fields[2] == {"task_id": "t1", "task": "resolve", "tier": "kept", "attempt": 2}
        assert records[1]["message"] == "inside the run"
    else:
        assert lines[0].endswith("app: before") and lines[3].endswith("app: after")
        assert lines[1].endswith("app: inside the run [task_id=t1 task=resolve tier=p0 attempt=2]")
        assert lines[2].endswith("app: mine [task_id=t1 task=resolve tier=kept attempt=2]")


@pytest.mark.parametrize("worker_log", ["text"], indirect=True)
def test_a_runs_fields_go_on_its_text_line_before_the_traceback(worker_log: io.StringIO) -> None:
    token = logs.enter_run("t1", "resolve", "p0", 1)
    try:
        try:
            _fail_to_connect()
        except ConnectionError:
            logging.getLogger("app").exception("failed")
    finally:
        logs.leave_run(token)
    first, *rest = worker_log.getvalue().splitlines()
    assert first.endswith("app: failed [task_id=t1 task=resolve tier=p0 attempt=1]")
    assert rest[0].startswith("Traceback") and "[task_id" not in "\n".join(rest)
