"""Load a policy file: YAML, then the schema, then the cross-field rules; all errors at once."""

from __future__ import annotations

import difflib
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

from gpuplane.policy.errors import Path, PolicyError, PolicyIssue
from gpuplane.policy.schema import PolicySpec
from gpuplane.policy.validate import check_policy
from gpuplane.policy.yamlsource import LineMap, parse_yaml


def _field_names(model: type[BaseModel], seen: set[type[BaseModel]] | None = None) -> set[str]:
    """Every field name of ``model`` and of the models nested in it (for did-you-mean hints)."""
    seen = set() if seen is None else seen
    if model in seen:
        return set()
    seen.add(model)
    names = set(model.model_fields)
    for info in model.model_fields.values():
        stack: list[Any] = [info.annotation]
        while stack:
            annotation = stack.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                names |= _field_names(annotation, seen)
            stack.extend(get_args(annotation))
    return names


M = TypeVar("M", bound=BaseModel)


_BOUNDS = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}


def _optional(model: type[BaseModel], loc: tuple[Any, ...]) -> bool:
    """Whether the field at ``loc`` may be left out (defaults to null), so turning it off is also a fix."""
    annotation: Any = model
    default: Any = ...
    for part in loc:
        candidates = [annotation, *get_args(annotation)]
        models = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if isinstance(part, str) and models and part in models[0].model_fields:
            info = models[0].model_fields[part]
            annotation, default = info.annotation, info.default
        elif not isinstance(part, str) or not models:
            args = [a for a in get_args(annotation) if a is not type(None)]
            annotation, default = (args[-1] if args else Any), ...
        else:
            return False
    return default is None


def _fix_for(error: Any, known: list[str]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    field = str(error["loc"][-1]) if error["loc"] else "field"
    if kind == "missing":
        return f"add the field '{field}'"
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(field, known, n=1)
        return f"did you mean '{close[0]}'?" if close else "remove it (see docs/policy.md for the fields)"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "write a whole number"
    if kind in ("float_parsing", "float_type"):
        return "write a number"
    if kind == "finite_number":
        return "write a finite number (not .inf or .nan)"
    if kind in ("bool_parsing", "bool_type"):
        return "write true or false"
    if kind == "literal_error":
        return f"use one of {ctx.get('expected', 'the allowed values')}"
    if kind in _BOUNDS:
        symbol, key = _BOUNDS[kind]
        bound = ctx.get(key, "the bound")
        if isinstance(bound, int):
            return f"use a value {symbol} {bound:,}"
        return f"use a value {symbol} {bound:g}" if isinstance(bound, float) else f"use a value {symbol} {bound}"
    if kind == "string_pattern_mismatch":
        return "use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
    if kind == "too_short":
        return "give at least one entry"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "write a mapping (key: value) here"
    if kind == "list_type":
        return "write a list (- item) here"
    return "correct the value"


def _label(path: Path, data: Any) -> str:
    """Render a path with the names of the list items it passes, e.g. ``teams[1](nlp).quotas``."""
    out = ""
    node = data
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
        if isinstance(part, int):
            named = isinstance(node, dict) and isinstance(node.get("name"), str)
            out += f"[{part}]({node['name']})" if named and isinstance(node, dict) else f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def locate(issues: list[PolicyIssue], lines: LineMap, data: Any) -> list[PolicyIssue]:
    """Attach line numbers and named paths to issues found on ``data``."""
    return [PolicyIssue(i.path, i.message, i.fix, lines.line_of(i.path), _label(i.path, data)) for i in issues]


def parse_document(text: str, filename: str, model: type[M], example: str) -> tuple[M, Any, LineMap]:
    """Validate YAML (or JSON) text against ``model``; PolicyError lists every problem with its line.

    Returns the model, the raw data and the line map, so callers can locate their own later checks.
    """
    data, lines = parse_yaml(text, filename)
    if not isinstance(data, dict):
        raise PolicyError(filename, [PolicyIssue((), "the file must be a YAML mapping", f"start from {example}", 1)])
    try:
        return model.model_validate(data), data, lines
    except ValidationError as exc:
        known = sorted(_field_names(model))
        issues = [
            PolicyIssue(tuple(e["loc"]), _message_for(e), _with_off_switch(model, e, _fix_for(e, known)))
            for e in exc.errors(include_url=False)
        ]
        raise PolicyError(filename, locate(issues, lines, data)) from None


def _with_off_switch(model: type[BaseModel], error: Any, fix: str) -> str:
    """Add "or null to turn it off" to the fix of a value out of range in a field that defaults to null."""
    if error["type"] in _BOUNDS and _optional(model, tuple(error["loc"])):
        return f"{fix}, or null (or leave the field out) to turn it off"
    return fix


def parse_policy(text: str, filename: str = "<policy>") -> PolicySpec:
    """Validate policy YAML text into a PolicySpec; raise PolicyError listing every problem with its line."""
    policy, data, lines = parse_document(text, filename, PolicySpec, "examples/platform.yaml")
    semantic = check_policy(policy)
    if semantic:
        raise PolicyError(filename, locate(semantic, lines, data))
    return policy


def _message_for(error: Any) -> str:
    if error["type"] == "missing":
        return "required field is missing"
    if error["type"] == "extra_forbidden":
        return f"unknown field '{error['loc'][-1]}'"
    value = error.get("input")
    shown = repr(value) if isinstance(value, (str, int, float, bool)) else type(value).__name__
    return f"{error['msg']} (got {shown})"
