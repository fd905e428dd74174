"""The CRD is generated from the model; the committed copy must not drift."""

from pathlib import Path

import yaml

from tierpool.model.crd import CEL_RULES, crd, crd_yaml

ROOT = Path(__file__).resolve().parents[3]


def test_committed_crd_matches_the_model() -> None:
    committed = (ROOT / "crds" / "agentpool.yaml").read_text()
    assert committed == crd_yaml(), "crds/agentpool.yaml is stale: run `make crd`"


def walk(node: object) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found += walk(value)
    elif isinstance(node, list):
        for value in node:
            found += walk(value)
    return found


def test_schema_is_structural() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for node in walk(schema):
        assert "$ref" not in node and "$defs" not in node
        assert node.get("type") != "null"
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True


def test_rules_and_subresources_present() -> None:
    version = crd()["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["recovery"]["x-kubernetes-validations"] == CEL_RULES["spec.recovery"]
    assert spec["properties"]["tiers"]["x-kubernetes-list-type"] == "map"
    assert spec["properties"]["replicas"]["x-kubernetes-validations"] == CEL_RULES["spec.replicas"]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas.desired"
    assert [c["name"] for c in version["additionalPrinterColumns"]][:4] == ["Ready", "Desired", "Backlog", "Oldest"]
    assert spec["properties"]["recovery"]["properties"]["claimIdle"]["default"] == "1m"


def test_yaml_parses_back() -> None:
    assert yaml.safe_load(crd_yaml()) == crd()


def field_paths(model: type, prefix: str = "") -> list[str]:
    """Every documented field path of the spec; Secret refs, env vars and resources count as leaves."""
    from pydantic import BaseModel

    from tierpool.model.spec import EnvVar, Resources, SecretKeyRef

    paths = []
    for name, info in model.model_fields.items():  # type: ignore[attr-defined]
        path = f"{prefix}{info.alias or name}"
        inner = info.annotation
        args = getattr(inner, "__args__", ())
        candidates = [inner, *args]
        nested = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if nested is not None and nested not in (SecretKeyRef, EnvVar, Resources):
            paths += field_paths(nested, f"{path}[]." if "list" in str(inner) else f"{path}.")
        else:
            paths.append(path)
    return paths


def test_the_agentpool_reference_documents_every_spec_field() -> None:
    """docs/reference/agentpool.md is generated (its drift test is in tests/unit/test_docs_reference.py); this
    checks that the generator leaves no field out."""
    from tierpool.model.spec import PoolSpec

    page = (ROOT / "docs" / "reference" / "agentpool.md").read_text()
    missing = [path for path in field_paths(PoolSpec) if f"`{path}`" not in page]
    assert not missing, f"docs/reference/agentpool.md lacks: {missing}"
