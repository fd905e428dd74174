"""Field docstrings read from the models' source, for the CRD's descriptions (tierpool.model.field_docs). Pure."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from tierpool.model.field_docs import add_descriptions, field_docs, models_under


class Base(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel)

    shared_field: int = 0
    """From the base."""
    overridden: int = 0
    """Base text."""


class Inner(Base):
    plain: str = ""
    """Line one.

        Indented continuation."""
    overridden: int = 1
    """Child text."""
    undocumented: int = 0

    def method(self) -> None:
        """Not a field's docstring."""


class Outer(BaseModel):
    inner: Inner = Inner()
    """The inner one."""
    many: Annotated[list[Inner] | None, Field(default=None)]
    """A list of them."""


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (Base, {"shared_field": "From the base.", "overridden": "Base text."}),
        (
            Inner,
            {
                "shared_field": "From the base.",
                "overridden": "Child text.",  # the nearest class wins
                "plain": "Line one.\n\nIndented continuation.",
            },
        ),
        (Outer, {"inner": "The inner one.", "many": "A list of them."}),
    ],
)
def test_field_docs(model: type[BaseModel], expected: dict[str, str]) -> None:
    assert field_docs(model) == expected


def test_models_under_finds_nested_and_listed_models() -> None:
    assert models_under(Outer) == {"Outer": Outer, "Inner": Inner}


def test_descriptions_land_on_the_aliased_properties_in_pydantics_key_order() -> None:
    schema = add_descriptions(Outer.model_json_schema(by_alias=True), Outer)
    inner = schema["$defs"]["Inner"]["properties"]
    assert inner["sharedField"]["description"] == "From the base."
    assert "description" not in inner["undocumented"]
    assert list(inner["plain"]) == sorted(inner["plain"])
    assert schema["properties"]["many"]["description"] == "A list of them."


class WithPydanticDocs(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)

    first: int = 0
    """One line."""
    second: Annotated[str | None, Field(default=None)]
    """Two lines,

        the second indented."""
    third: int = 0

    def method(self) -> None:
        """Not a field's docstring."""


def test_matches_pydantics_own_attribute_docstrings() -> None:
    pydantic_docs = {n: f.description for n, f in WithPydanticDocs.model_fields.items() if f.description}
    assert (
        field_docs(WithPydanticDocs)
        == pydantic_docs
        == {"first": "One line.", "second": "Two lines,\n\nthe second indented."}
    )


class Explicit(BaseModel):
    given: int = Field(default=0, description="Set with Field.")
    """The docstring."""


def test_an_explicit_field_description_is_kept() -> None:
    schema = add_descriptions(Explicit.model_json_schema(by_alias=True), Explicit)
    assert schema["properties"]["given"]["description"] == "Set with Field."


def test_a_model_missing_from_the_defs_is_an_error_not_lost_descriptions() -> None:
    schema = Outer.model_json_schema(by_alias=True)
    del schema["$defs"]["Inner"]
    with pytest.raises(ValueError, match="Inner"):
        add_descriptions(schema, Outer)


def _undescribed(node: dict[str, object], path: str) -> list[str]:
    missing: list[str] = []
    properties = node.get("properties")
    for name, prop in (properties if isinstance(properties, dict) else {}).items():
        if "description" not in prop:
            missing.append(f"{path}.{name}")
        missing += _undescribed(prop, f"{path}.{name}")
    items = node.get("items")
    if isinstance(items, dict):
        missing += _undescribed(items, f"{path}[]")
    return missing


def test_every_property_of_the_crd_spec_has_a_description() -> None:
    from tierpool.model.crd import spec_schema

    assert _undescribed(spec_schema(), "spec") == []
