"""Loading the pool's handler from ``module:function``, and telling async handlers from sync ones."""

from __future__ import annotations

import importlib
import inspect
import traceback
from collections.abc import Callable, MutableSequence
from typing import Any

from tierpool.protocol.apps import App
from tierpool.protocol.envelope import Task

Handler = Callable[[Task], Any]


class HandlerNotFound(ImportError):
    """The configured ``module:function`` cannot be imported or is not callable."""


def import_from(directory: str, search_path: MutableSequence[str]) -> None:
    """Put ``directory`` first on ``search_path`` (``sys.path``) unless it is there: ``python -m tierpool`` imports
    handler modules from the current folder, and so must the ``tierpool`` console script, whose ``sys.path`` starts
    with its own bin folder instead."""
    if directory not in search_path:
        search_path.insert(0, directory)


def load_handler(path: str) -> Handler:
    """Import ``module:function`` (or ``module:app``, an App: its tasks' annotations resolved now); HandlerNotFound
    with a clear message otherwise."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise HandlerNotFound(f"handler {path!r} should look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise HandlerNotFound(f"handler {path!r}: cannot import module {module_name!r}: {error}") from None
    except Exception as error:  # noqa: BLE001 - the module itself fails: a SyntaxError, or any exception at import
        raise HandlerNotFound(f"handler {path!r}: cannot import module {module_name!r}: {_failure(error)}") from None
    handler = getattr(module, attribute, None)
    if not callable(handler):
        raise HandlerNotFound(f"handler {path!r}: module {module_name!r} has no callable {attribute!r}")
    if isinstance(handler, App):
        check_app(path, handler)
    return handler  # type: ignore[no-any-return]


def check_app(path: str, app: App) -> None:
    """HandlerNotFound for an App with no tasks, or with annotations that do not resolve to types."""
    if not app.tasks:
        raise HandlerNotFound(f"handler {path!r}: the app has no tasks (register them with @app.task)")
    try:
        app.resolve()
    except Exception as error:  # noqa: BLE001 - a NameError, or a type pydantic cannot validate
        raise HandlerNotFound(f"handler {path!r}: a task's annotations do not resolve: {_failure(error)}") from None


def _failure(error: Exception) -> str:
    """``Type: message (at file:line)``, the line the import failed at."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


def is_async(handler: Handler) -> bool:
    """True for ``async def`` functions and for objects whose ``__call__`` is ``async def``."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)
