"""SIGTERM and SIGINT as a stop request, from the first moment of a worker process.

Light on purpose (standard library only): the CLI installs it before it imports anything heavy, so a signal
that arrives while the process is still starting is remembered and honoured, not fatal (exit -15).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    def __init__(self) -> None:
        self.requested = False
        self._callbacks: list[Callable[[], None]] = []

    def install(self) -> None:
        """Plain signal handlers, for the time before the event loop runs."""
        for sig in SIGNALS:
            signal.signal(sig, self._on_signal)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand the signals over to the running event loop (so that they wake it)."""
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self.request)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request()

    def request(self) -> None:
        self.requested = True
        for callback in list(self._callbacks):
            callback()

    def on_request(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on a stop request; at once if one came already."""
        self._callbacks.append(callback)
        if self.requested:
            callback()


STOP = StopRequest()
"""The process-wide stop request of a worker process."""
