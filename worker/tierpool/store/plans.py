"""What a plan yields: the words shared by the producer's operations and their drivers (tierpool.store.drivers).

A plan is one operation written once, as a generator: it yields the steps it needs and receives their replies,
and what it returns is the operation's result. A driver runs it on a sync or on an async client; the plan itself
does no I/O, so a test can drive it by hand with scripted replies (the pattern of httpx's ``Auth.auth_flow``).

- :class:`Command`, yielded alone: one call on the client itself; its reply comes back, an error is raised.
- :class:`Batch`: commands sent on one pipeline; the list of replies comes back (errors as values, unless
  ``raise_on_error``).
- :class:`Emit`: an item for the caller of a streaming operation (``follow``); None comes back.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias, TypeVar

R = TypeVar("R")


class Command(NamedTuple):
    """A client or pipeline method by name, with its arguments."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def call(name: str, *args: Any, **kwargs: Any) -> Command:
    """``call("get", key)`` is the command ``client.get(key)``."""
    return Command(name, args, kwargs)


@dataclass(frozen=True)
class Batch:
    """Commands sent together on one pipeline (one round trip); iterating it gives the commands."""

    commands: Sequence[Command]
    transaction: bool = False
    """MULTI/EXEC around the commands."""
    raise_on_error: bool = False
    """Raise the first error reply instead of returning it among the replies."""

    def __iter__(self) -> Iterator[Command]:
        return iter(self.commands)

    def __len__(self) -> int:
        return len(self.commands)


@dataclass(frozen=True)
class Emit:
    """An item a streaming plan hands to its caller."""

    item: Any


Step: TypeAlias = Command | Batch | Emit
Plan: TypeAlias = Generator[Step, Any, R]
"""A plan that returns an R (``Plan[R]``)."""
