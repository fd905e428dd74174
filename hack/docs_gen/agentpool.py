"""The AgentPool reference: every spec field, from the model's field docstrings and the generated CRD schema
(types and defaults as the API server sees them)."""

from __future__ import annotations

from typing import Any

from hack.docs_gen.markdown import banner, table
from pydantic import BaseModel

from tierpool.model.base import SecretKeyRef
from tierpool.model.crd import crd
from tierpool.model.durations import DURATION_PATTERN
from tierpool.model.field_docs import field_docs
from tierpool.model.spec import EnvVar, PoolSpec, Resources

LEAVES: dict[type[BaseModel], str] = {
    SecretKeyRef: "Secret key `{name, key}`",
    EnvVar: "env var `{name, value}` or `{name, valueFrom}`",
    Resources: "`{requests, limits}`",
}
"""Models shown as one row (their inner fields are Kubernetes' own shapes)."""

INTRO = """\
# AgentPool reference

`apiVersion: tierpool.io/v1alpha1`, `kind: AgentPool`, namespaced. Every field of `spec` below comes from the
pydantic model (`tierpool.model.spec.PoolSpec`), like the CRD in `crds/agentpool.yaml` (`make crd`). Durations are
strings like `250ms`, `30s`, `7m`, `1h30m`. A `[]` in a path is a list's item.
"""


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (itself, in a list or optional), or None for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        inner = _nested_model(arg)
        if inner is not None:
            return inner
    return None


def _type(node: dict[str, Any], model: type[BaseModel] | None) -> str:
    if model in LEAVES:
        return LEAVES[model]
    if node.get("type") == "array":
        item = node.get("items", {})
        return "list of " + ("objects" if model is not None else _type(item, None))
    if "enum" in node:
        return ", ".join(f"`{value}`" for value in node["enum"])
    if node.get("pattern") == DURATION_PATTERN:
        return "duration"
    if node.get("x-kubernetes-int-or-string"):
        return "int or string"
    return str(node.get("type", "object"))


def _default(node: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    value = node.get("default")
    if value is None or isinstance(value, dict):
        return ""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def rows(model: type[BaseModel], schema: dict[str, Any], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(path, type, default, description) of every field under ``model``, depth first."""
    docs = field_docs(model)
    required = set(schema.get("required", ()))
    found = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        node = schema["properties"][key]
        nested = _nested_model(info.annotation)
        path = f"{prefix}{key}"
        found.append((f"`{path}`", _type(node, nested), _default(node, key in required), docs.get(name, "")))
        if nested is not None and nested not in LEAVES:
            inner = node["items"] if node.get("type") == "array" else node
            found += rows(nested, inner, f"{path}[]." if node.get("type") == "array" else f"{path}.")
    return found


def page() -> str:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    out = [banner("tierpool.model.spec (field docstrings) and the CRD schema"), INTRO]
    header = ("field", "type", "default", "meaning")
    for path_type_default_doc in _sections(rows(PoolSpec, schema)):
        title, section = path_type_default_doc
        out.append(f"\n## `{title}`\n\n" + table(header, section))
    return "".join(out)


def _sections(found: list[tuple[str, str, str, str]]) -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """The rows grouped by top-level field, in the model's order."""
    grouped: dict[str, list[tuple[str, str, str, str]]] = {}
    for row in found:
        top = row[0].strip("`").split(".")[0].removesuffix("[]")
        grouped.setdefault(top, []).append(row)
    return list(grouped.items())
