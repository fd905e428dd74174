"""What every spec model shares: the base class and a reference to a Secret's key."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class Model(BaseModel):
    """Base for every spec object: camelCase aliases, unknown fields rejected, values immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


class SecretKeyRef(Model):
    """A key in a Secret in the pool's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    """Secret name."""
    key: Annotated[str, Field(min_length=1)]
    """Key within the Secret."""
