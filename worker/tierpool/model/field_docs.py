"""Field docstrings of the spec models, read from their source for the CRD's descriptions.

Pydantic's ``use_attribute_docstrings`` does the same at class creation, which cost every process that imports
tierpool.model.spec (each worker and CLI call) about 0.1 s of parsing. Only ``tierpool crd`` needs them.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from typing import Any

from pydantic import BaseModel


def own_field_docs(model: type[Any]) -> dict[str, str]:
    """The docstring under each field the class itself declares (a string right after ``name: type``); any class
    (a dataclass too) will do."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(model)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, following in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Docstrings of every field of ``model``, inherited ones included (the nearest class's wins)."""
    docs: dict[str, str] = {}
    for base in reversed(model.__mro__):
        if isinstance(base, type) and issubclass(base, BaseModel) and base is not BaseModel:
            docs.update(own_field_docs(base))
    return {name: doc for name, doc in docs.items() if name in model.model_fields}


def models_under(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every model class ``model`` contains, at any depth, by class name (as pydantic names its ``$defs``)."""
    found: dict[str, type[BaseModel]] = {}
    todo = [model]
    while todo:
        current = todo.pop()
        if found.setdefault(current.__name__, current) is not current:
            raise ValueError(f"two spec models are named {current.__name__}")
        for info in current.model_fields.values():
            for candidate in _types_in(info.annotation):
                if candidate.__name__ not in found:
                    todo.append(candidate)
    return found


def _types_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in getattr(annotation, "__args__", ()) for model in _types_in(arg)]


def add_descriptions(schema: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """Pydantic's JSON Schema of ``model`` (``by_alias``) with each field's docstring as its description."""
    definitions = schema.get("$defs", {})
    for name, cls in models_under(model).items():
        node = schema if cls is model else definitions.get(name)
        if node is None:  # a model pydantic named otherwise: its fields would lose their descriptions unseen
            raise ValueError(f"spec model {name} is not in the schema's $defs")
        for field, doc in field_docs(cls).items():
            info = cls.model_fields[field]
            prop = node["properties"][info.alias or field]
            node["properties"][info.alias or field] = dict(sorted({"description": doc, **prop}.items()))
    return schema
