"""Validate emitted Kubernetes objects the way an API server would, offline.

- Core kinds: the OpenAPI schemas shipped by `kubernetes-validate`, strict (unknown fields are errors).
- Custom resources: the served version's `openAPIV3Schema` from the CRDs in tests/data/crds (jsonschema),
  plus a pruning check (a field the schema does not declare would be silently dropped by the API server,
  so it is an error here), plus the CRDs' CEL rules (`x-kubernetes-validations`) evaluated with cel-python.
  Transition rules (those reading `oldSelf`) only apply to updates and are skipped.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import yaml
from celpy import celtypes

CRD_DIR = Path(__file__).parent / "data" / "crds"
K8S_VERSION = "1.33"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

# kubernetes-validate reads and parses its schema files (the definitions alone are megabytes) on every call;
# they never change within a run, and it does not modify what it reads.
kubernetes_validate.utils.schema_contents = cache(kubernetes_validate.utils.schema_contents)
kubernetes_validate.utils.all_versions = cache(kubernetes_validate.utils.all_versions)


def _python_patterns(node: Any) -> Any:
    """Go's RE2 accepts inline flags after '^' (as in '^(?i)[a-z]'); Python's re wants them first."""
    if isinstance(node, dict):
        return {
            k: (v.replace("^(?i)", "(?i)^") if k == "pattern" and isinstance(v, str) else _python_patterns(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_python_patterns(v) for v in node]
    return node


@cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema for every served version of the shipped CRDs."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(CRD_DIR.glob("*/*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                out[(f"{group}/{version['name']}", kind)] = _python_patterns(version["schema"]["openAPIV3Schema"])
    return out


def _find(text: celtypes.StringType, pattern: celtypes.StringType) -> celtypes.StringType:
    """Kubernetes' CEL regex extension: the first match of the pattern, or ''."""
    match = re.search(str(pattern), str(text))
    return celtypes.StringType(match.group(0) if match else "")


_ENV = celpy.Environment()


@cache
def _program(rule: str) -> Any:
    return _ENV.program(_ENV.compile(rule), functions={"find": _find})


def _walk(schema: dict[str, Any], data: Any, path: str, errors: list[str]) -> None:
    if data is None:
        return
    for rule in schema.get("x-kubernetes-validations", []) or []:
        if "oldSelf" in rule["rule"]:
            continue
        result = _program(rule["rule"]).evaluate({"self": celpy.json_to_cel(data)})
        if isinstance(result, Exception) or not bool(result):
            errors.append(f"{path}: CEL rule failed: {rule.get('message', rule['rule'])} ({result!r})")
    if isinstance(data, dict):
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
        for key, value in data.items():
            if props is not None and key in props:
                _walk(props[key], value, f"{path}.{key}", errors)
            elif isinstance(additional, dict):
                _walk(additional, value, f"{path}.{key}", errors)
            elif not preserve and not (path.endswith(".metadata") or path == ""):
                errors.append(f"{path}.{key}: unknown field (the API server would prune it)")
    elif isinstance(data, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(data):
            _walk(schema["items"], item, f"{path}[{index}]", errors)


def validate(obj: dict[str, Any]) -> list[str]:
    """Every problem an API server would report for this object (empty when it would be accepted)."""
    errors: list[str] = []
    name = obj.get("metadata", {}).get("name", "")
    if not _NAME.match(name) or len(name) > 253:
        errors.append(f"metadata.name '{name}' is not a DNS subdomain")
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    schema = crd_schemas().get(key)
    if schema is None:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(str(exc).splitlines()[0])
        return errors
    validator = jsonschema.Draft7Validator(schema)
    errors += [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]
    for key_, value in obj.items():
        props = schema.get("properties", {})
        if key_ in props:
            _walk(props[key_], value, f".{key_}" if key_ != "metadata" else ".metadata", errors)
        else:
            errors.append(f".{key_}: unknown top-level field")
    return errors
