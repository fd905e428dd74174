"""Generating the AgentPool CRD from the pydantic model: the only writer of ``crds/agentpool.yaml``.

Pydantic's JSON Schema is turned into a Kubernetes structural schema: ``$ref`` inlined, ``Optional`` as
``nullable``, ``exclusiveMinimum`` in OpenAPI 3.0 form, field docstrings as descriptions. Cross-field rules
(:func:`tierpool.model.spec.spec_rule_violations`) become CEL ``x-kubernetes-validations`` so the API server rejects
the same specs ``tierpool validate`` does.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tierpool.model.durations import DURATION_PATTERN, format_duration
from tierpool.model.field_docs import add_descriptions
from tierpool.model.resource import GROUP, KIND, VERSION
from tierpool.model.spec import PoolSpec

PLURAL = "agentpools"
SHORT_NAMES = ["ap", "pool"]
DROP = {"title", "additionalProperties"}

CEL_RULES: dict[str, list[dict[str, str]]] = {
    # Keyed by the path of the schema node they attach to. Rules guard with has(): the API server also checks
    # them against each object's `{}` default, before nested defaults apply.
    "spec.recovery": [
        {
            "rule": "!has(self.claimIdle) || !has(self.heartbeat)"
            " || duration(self.claimIdle) > duration(self.heartbeat)",
            "message": "spec.recovery.claimIdle: must be greater than recovery.heartbeat",
            "fieldPath": ".claimIdle",
            "reason": "FieldValueInvalid",
        },
    ],
    "spec.tiers": [
        {
            "rule": "size(self) == 0 || !has(self[0].escalateAfter)",
            "message": "spec.tiers[0].escalateAfter: not allowed on the top tier",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "size(self) == 0 || !has(self[0].preemptible) || !self[0].preemptible",
            "message": "spec.tiers[0].preemptible: not allowed on the top tier",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "size(self) == 0 || !has(self[size(self) - 1].reservedSlots)"
            " || self[size(self) - 1].reservedSlots == 0",
            "message": "spec.tiers[].reservedSlots: not allowed on the lowest tier",
            "reason": "FieldValueForbidden",
        },
    ],
    "spec": [
        {
            "rule": "!has(self.tiers) || self.tiers.map(t, has(t.reservedSlots) ? t.reservedSlots : 0).sum()"
            " < (has(self.worker) && has(self.worker.concurrency) ? self.worker.concurrency : 8)",
            "message": "spec.tiers[].reservedSlots: the tiers' reservations together must be less than "
            "worker.concurrency",
            "fieldPath": ".tiers",
            "reason": "FieldValueInvalid",
        },
        {
            # the slot itself needs the pool's namespace and a CRC16: the operator and the workers check it
            # (tierpool.model.adoption.stream_slot_violations); here, that the stream has a hash tag at all
            "rule": "!has(self.redis) || !has(self.redis.mode) || self.redis.mode != 'cluster' || !has(self.tiers)"
            " || self.tiers.all(t, !has(t.stream) || t.stream.matches('^[^{]*[{][^}]+[}]'))",
            "message": "spec.tiers[].stream: with redis.mode cluster an adopted stream must hash to the pool's slot: "
            "give it the pool's hash tag, {NAMESPACE/NAME}",
            "fieldPath": ".tiers",
            "reason": "FieldValueInvalid",
        },
    ],
    "spec.tiers[]": [
        {
            "rule": "!has(self.escalateMaxTargetBacklog) || has(self.escalateAfter)",
            "message": "escalateMaxTargetBacklog needs escalateAfter on the same tier",
            "fieldPath": ".escalateMaxTargetBacklog",
            "reason": "FieldValueForbidden",
        },
    ],
    "spec.replicas": [
        {
            "rule": "!has(self.min) || !has(self.max) || self.min <= self.max",
            "message": "spec.replicas.min: must be <= replicas.max",
            "fieldPath": ".min",
            "reason": "FieldValueInvalid",
        },
    ],
    "spec.tasks": [
        {
            "rule": "!has(self.timeout) || duration(self.timeout) > duration('0s')",
            "message": "spec.tasks.timeout: must be greater than 0",
            "fieldPath": ".timeout",
            "reason": "FieldValueInvalid",
        },
    ],
    "spec.redis": [
        {
            "rule": "(has(self.mode) && self.mode == 'sentinel') == has(self.sentinel)",
            "message": "spec.redis.sentinel: required with mode sentinel, and only allowed there",
            "fieldPath": ".sentinel",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.waitReplicas) || self.waitReplicas == 0 || !has(self.mode) || self.mode != 'cluster'",
            "message": "spec.redis.waitReplicas: not supported with mode cluster (yet)",
            "fieldPath": ".waitReplicas",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "!has(self.waitTimeout) || duration(self.waitTimeout) > duration('0s')",
            "message": "spec.redis.waitTimeout: must be greater than 0",
            "fieldPath": ".waitTimeout",
            "reason": "FieldValueInvalid",
        },
        {
            # with urlSecretRef the URL is unknown here: the operator checks it once it has read the Secret
            "rule": "has(self.urlSecretRef) || !has(self.tls) || (has(self.tls.enabled) && self.tls.enabled)"
            " || (has(self.url) && self.url.startsWith('rediss://'))"
            " || !(has(self.tls.caSecretRef) || has(self.tls.certSecretRef) || has(self.tls.keySecretRef)"
            " || (has(self.tls.insecureSkipVerify) && self.tls.insecureSkipVerify))",
            "message": "spec.redis.tls: caSecretRef, certSecretRef, keySecretRef and insecureSkipVerify need TLS, "
            "which is off: set redis.tls.enabled or use a rediss:// URL",
            "fieldPath": ".tls",
            "reason": "FieldValueForbidden",
        },
    ],
    "spec.redis.tls": [
        {
            "rule": "!has(self.insecureSkipVerify) || !self.insecureSkipVerify || !has(self.caSecretRef)",
            "message": "spec.redis.tls.insecureSkipVerify: cannot be combined with caSecretRef",
        },
        {
            "rule": "has(self.certSecretRef) == has(self.keySecretRef)",
            "message": "spec.redis.tls.certSecretRef: needs keySecretRef, and keySecretRef needs certSecretRef",
            "reason": "FieldValueRequired",
        },
    ],
}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
            extra = {k: v for k, v in node.items() if k != "$ref"}
            return _inline({**target, **extra}, defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node


def _fix_default(node: dict[str, Any]) -> None:
    if node.get("default", 0) is None:
        node.pop("default")
    elif isinstance(node.get("default"), dict):
        node["default"] = {}  # let the API server apply each nested field's own default
    elif node.get("pattern") == DURATION_PATTERN and isinstance(node.get("default"), int | float):
        node["default"] = format_duration(node["default"])


def _structural(node: Any) -> Any:
    """Rewrite a JSON Schema node into the subset Kubernetes accepts."""
    if isinstance(node, list):
        return [_structural(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "anyOf" in node and any(option.get("type") == "null" for option in node["anyOf"]):
        options = [option for option in node.pop("anyOf") if option.get("type") != "null"]
        merged = options[0] if len(options) == 1 else {"anyOf": options}
        node = {**merged, **node, "nullable": True}
    _fix_default(node)
    if isinstance(node.get("description"), str):
        node["description"] = node["description"].replace("``", "`")
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node and not isinstance(node[bound], bool):  # JSON Schema 2020 -> OpenAPI 3.0 form
            node[limit], node[bound] = node[bound], True
    if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _structural(node["additionalProperties"])
        keep_additional = True
    else:
        keep_additional = False
    if "enum" in node and "type" not in node:
        node["type"] = "string"
    out = {
        k: _structural(v) for k, v in node.items() if k not in DROP or (k == "additionalProperties" and keep_additional)
    }
    if "properties" in out:
        out["properties"] = {name: _structural(prop) for name, prop in node["properties"].items()}
    return out


def _attach_rules(schema: dict[str, Any], path: str = "spec") -> None:
    if path in CEL_RULES:
        schema["x-kubernetes-validations"] = CEL_RULES[path]
    else:
        schema.pop("x-kubernetes-validations", None)
    for name, child in schema.get("properties", {}).items():
        _attach_rules(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        _attach_rules(schema["items"], f"{path}[]")
    if path in ("spec.tiers", "spec.rateLimits"):
        schema["x-kubernetes-list-type"] = "map"
        schema["x-kubernetes-list-map-keys"] = ["name"]


def spec_schema() -> dict[str, Any]:
    raw = add_descriptions(PoolSpec.model_json_schema(by_alias=True), PoolSpec)
    schema = _structural(_inline({k: v for k, v in raw.items() if k != "$defs"}, raw.get("$defs", {})))
    assert isinstance(schema, dict)
    schema.pop("nullable", None)
    _attach_rules(schema)
    return schema


STATUS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {
        "observedGeneration": {"type": "integer"},
        "replicas": {"type": "integer", "description": "Workers that exist (the Deployment's replicas)."},
        "readyReplicas": {"type": "integer"},
        "desiredReplicas": {"type": "integer", "description": "The scaler's latest decision."},
        "selector": {"type": "string", "description": "Label selector of the worker pods (for /scale)."},
        "backlog": {"type": "integer", "description": "Waiting tasks over all tiers."},
        "oldestAgeSeconds": {"type": "number", "description": "Oldest waiting task over all tiers."},
        "tiers": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        "drainingTiers": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Tiers removed from spec.tiers whose streams still hold work; drained, then dropped.",
        },
        "adoptedStreams": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"tier": {"type": "string"}, "stream": {"type": "string"}},
            },
            "description": "The streams the tiers adopt (tiers[].stream), draining tiers included: a tier removed "
            "from spec.tiers drains the stream it adopted.",
        },
        "conditions": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        "lastScale": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "scaler": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}

PRINTER_COLUMNS = [
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas"},
    {"name": "Backlog", "type": "integer", "jsonPath": ".status.backlog"},
    {"name": "Oldest", "type": "number", "jsonPath": ".status.oldestAgeSeconds", "description": "seconds"},
    {"name": "Policy", "type": "string", "jsonPath": ".spec.scaling.policy", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition as a dict."""
    spec = spec_schema()
    spec["description"] = "The spec of an AgentPool: tiers, worker, recovery, replicas and scaling."
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}", "labels": {"app.kubernetes.io/part-of": "tierpool"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": "agentpool",
                "shortNames": SHORT_NAMES,
                "categories": ["tierpool"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A pool of AI-agent workers fed by priority-tiered Redis Streams.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": STATUS_SCHEMA,
                            },
                        }
                    },
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas.desired",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated by `tierpool crd` from tierpool.model.spec.PoolSpec. Do not edit; run `make crd`.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=120)


def helm_template() -> str:
    """The chart's copy of the CRD: the same document behind ``crds.install``, with ``crds.keep`` honoured."""
    body = yaml.safe_dump(crd(), sort_keys=False, width=120)
    keep = "  {{- if .Values.crds.keep }}\n  annotations:\n    helm.sh/resource-policy: keep\n  {{- end }}\n"
    body = body.replace("metadata:\n", "metadata:\n" + keep, 1)
    header = "# Generated by `make crd` from tierpool.model.spec.PoolSpec (same as crds/agentpool.yaml). Do not edit.\n"
    return header + "{{- if .Values.crds.install }}\n" + body + "{{- end }}\n"
