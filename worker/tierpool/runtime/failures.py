"""The failures a worker or a command reports as one line and an exit code, never as a traceback."""

from __future__ import annotations

import importlib
from types import ModuleType

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from tierpool.model.resource import SpecError
from tierpool.protocol.submission import SubmitError
from tierpool.runtime.health import CannotListen
from tierpool.store.registry import UnknownPool


class MissingExtra(RuntimeError):
    """A command needs an optional dependency that is not installed; the message names the extra to install."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """``module``, imported; MissingExtra naming ``pip install 'tierpool[extra]'`` when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtra(
            f"{what} needs {module}, from tierpool's {extra!r} extra: pip install 'tierpool[{extra}]'"
        ) from error


USER_ERRORS = (SpecError, SubmitError, UnknownPool, ValueError, TimeoutError, CannotListen, MissingExtra)
"""Errors whose own message says what to fix."""

EXPECTED_ERRORS = (*USER_ERRORS, ConnectionError, RedisConnectionError, ResponseError)
"""Errors reported as one line and exit code 1 (``describe``), not as a traceback."""


def describe(error: BaseException) -> str:
    """The one line an error of ``EXPECTED_ERRORS`` is reported as on the command line (a command's, or
    ``tierpool worker``'s): the library's message, and for an unknown pool what to pass on the command line."""
    if isinstance(error, UnknownPool):
        return f"{error}; on the command line: pass --file pool.yaml instead of --pool {error.ref}"
    if isinstance(error, USER_ERRORS):
        return str(error)
    if isinstance(error, ConnectionError | RedisConnectionError):
        return f"cannot reach redis: {error}"
    return f"redis refused the command: {error}"
