"""The AgentPool document (apiVersion, kind, metadata, spec) and loading it from a file or the environment."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from tierpool.model.adoption import stream_slot_violations
from tierpool.model.keys import PoolKeys
from tierpool.model.redis_spec import RedisMode
from tierpool.model.spec import DNS_LABEL, PoolSpec

GROUP = "tierpool.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "AgentPool"
SPEC_ENV_VAR = "TIERPOOL_POOL_SPEC"
"""The worker reads the whole AgentPool document, as JSON, from this variable when no file is given."""


class Metadata(BaseModel):
    """The part of Kubernetes object metadata a pool needs; the rest is accepted and ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
    namespace: Annotated[str, Field(pattern=DNS_LABEL, max_length=63)] = "default"


class AgentPool(BaseModel):
    """An AgentPool document, as ``kubectl apply`` takes it."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: Annotated[str, Field(alias="apiVersion", pattern=f"^{GROUP}/{VERSION}$")] = API_VERSION
    kind: Annotated[str, Field(pattern=f"^{KIND}$")] = KIND
    metadata: Metadata
    spec: PoolSpec
    status: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _streams_in_slot(self) -> AgentPool:
        cluster = self.spec.redis.mode is RedisMode.CLUSTER
        violations = stream_slot_violations(self.ref, cluster, [tier.stream for tier in self.spec.tiers])
        if violations:
            detail = "; ".join(f"{path}: {message}" for path, message in violations)
            raise PydanticCustomError("tierpool_rules", detail, {"violations": violations})
        return self

    @property
    def ref(self) -> str:
        """``namespace/name``: the pool's identity in Redis keys and metric labels."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def keys(self) -> PoolKeys:
        """The pool's key names, its adopted streams and consumer group included."""
        return pool_keys(self.ref, self.spec)


def pool_keys(ref: str, spec: PoolSpec) -> PoolKeys:
    """The key names of pool ``ref`` with ``spec``'s consumer group and adopted streams."""
    return PoolKeys.parse(ref, spec.consumer_group, spec.adopted_streams)


@dataclass(frozen=True)
class SpecError(Exception):
    """A pool document that breaks the model's rules; each violation is (field path, message)."""

    violations: Sequence[tuple[str, str]]
    source: str = "pool"

    def __str__(self) -> str:
        lines = [f"{self.source}: {len(self.violations)} error(s)"]
        lines += [f"  {path}: {message}" for path, message in self.violations]
        return "\n".join(lines)


def format_loc(loc: Sequence[str | int]) -> str:
    """``('spec', 'tiers', 0, 'weight')`` -> ``spec.tiers[0].weight``. Pure."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def violations_from(error: ValidationError) -> list[tuple[str, str]]:
    """Flatten a pydantic ValidationError into (path, message) pairs, rule violations included. Pure."""
    found: list[tuple[str, str]] = []
    for item in error.errors(include_url=False):
        prefix = format_loc(item["loc"])
        ctx = item.get("ctx") or {}
        if item["type"] == "tierpool_rules":
            found += [(f"{prefix}.{path}" if prefix else path, msg) for path, msg in ctx["violations"]]
        elif item["type"] == "extra_forbidden":
            found.append((prefix, "unknown field"))
        else:
            found.append((prefix or "(document)", item["msg"].removeprefix("Value error, ")))
    return found


def parse_pool(document: Any, source: str = "pool") -> AgentPool:
    """Validate a decoded AgentPool document; SpecError names every offending field."""
    if not isinstance(document, Mapping):
        raise SpecError([("(document)", "expected a mapping with apiVersion, kind, metadata and spec")], source)
    try:
        return AgentPool.model_validate(document)
    except ValidationError as error:
        raise SpecError(violations_from(error), source) from None


def _documents(path: str | os.PathLike[str]) -> list[tuple[int, Any]]:
    """The documents of a YAML (or JSON) file, each with its position in the file (from 1), empty ones left out."""
    import yaml  # here, not at the top: a worker gets its spec as JSON and need not import a YAML parser

    text = Path(path).read_text(encoding="utf-8")
    try:
        return [(index, doc) for index, doc in enumerate(yaml.safe_load_all(text), start=1) if doc is not None]
    except yaml.YAMLError as error:
        raise SpecError([("(document)", f"not valid YAML: {error}")], str(path)) from None


def _is_pool(document: Any) -> bool:
    return isinstance(document, Mapping) and document.get("kind") == KIND


def load_pool_file(path: str | os.PathLike[str]) -> AgentPool:
    """Read an AgentPool YAML (or JSON) file; the first AgentPool document in a multi-document file wins."""
    pools = [doc for _, doc in _documents(path) if _is_pool(doc)]
    if not pools:
        raise SpecError([("kind", f"no document with kind: {KIND} in the file")], str(path))
    return parse_pool(pools[0], str(path))


@dataclass(frozen=True)
class DocumentCheck:
    """One document of a file, checked against the model: its pool, or why it is not a valid one."""

    index: int
    """Its position in the file, from 1."""
    pool: AgentPool | None
    error: SpecError | None


def check_pool_file(path: str | os.PathLike[str]) -> list[DocumentCheck]:
    """Check every AgentPool document of a file; a document of another kind (a Secret beside the pool) is not
    checked, a document that is no Kubernetes object (no ``kind``) is an error. Empty when the file holds no
    AgentPool; SpecError when it is not YAML."""
    found: list[DocumentCheck] = []
    pools = 0
    for index, document in _documents(path):
        source = f"{path}: document {index}"
        if _is_pool(document):
            pools += 1
            try:
                found.append(DocumentCheck(index, parse_pool(document, source), None))
            except SpecError as invalid:
                found.append(DocumentCheck(index, None, invalid))
        elif not isinstance(document, Mapping) or "kind" not in document:
            stray = [("kind", "not a Kubernetes object: expected a mapping with apiVersion and kind")]
            found.append(DocumentCheck(index, None, SpecError(stray, source)))
    return found if pools else []


def pool_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The ``*.yaml`` and ``*.yml`` files of a folder (not of its subfolders), sorted."""
    return sorted(path for path in Path(folder).iterdir() if path.suffix in (".yaml", ".yml") and path.is_file())


def load_pool_env(environ: Mapping[str, str]) -> AgentPool:
    """Read the AgentPool document from ``TIERPOOL_POOL_SPEC`` (JSON), as the operator passes it."""
    raw = environ.get(SPEC_ENV_VAR)
    if not raw:
        raise SpecError([(SPEC_ENV_VAR, "not set; pass --file pool.yaml or set it")], "environment")
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as error:
        raise SpecError([(SPEC_ENV_VAR, f"not valid JSON: {error}")], "environment") from None
    return parse_pool(document, "environment")


def pool_from_spec(name: str, namespace: str, spec: PoolSpec) -> AgentPool:
    """Wrap a spec in a document, e.g. for a pool given only as ``--pool NAMESPACE/NAME``."""
    return AgentPool(metadata=Metadata(name=name, namespace=namespace), spec=spec)
