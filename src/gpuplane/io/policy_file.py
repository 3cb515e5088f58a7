"""Read a policy file from disk, apply command-line overrides, and validate it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import yaml

from gpuplane.policy import PolicyError, PolicyIssue, PolicySpec, parse_policy
from gpuplane.policy.errors import Path
from gpuplane.policy.yamlsource import MAX_CHARS, parse_yaml


def load_policy(path: str, overrides: Sequence[str] = ()) -> PolicySpec:
    """Read and validate the policy at ``path``; unreadable files become a PolicyError too.

    ``overrides`` are ``field.path=value`` settings (``scheduling.starvation_guard_hours=130``,
    ``teams.0.quotas.h100.nominal=16``; the value is read as YAML) applied to the file's document before
    validation, so a what-if run is checked exactly like an edited file."""
    text = read_text(path)
    policy = parse_policy(text, path)
    if not overrides:
        return policy
    document, _ = parse_yaml(text, path)
    for override in overrides:
        _apply(document, override, path)
    label = policy_label(path, overrides)
    try:
        return parse_policy(yaml.safe_dump(document, sort_keys=False), label)
    except PolicyError as exc:  # lines of the rewritten document would not match the file
        raise PolicyError(label, [dataclasses.replace(i, line=None) for i in exc.issues]) from None


def read_text(path: str) -> str:
    """The UTF-8 text of a policy (or snapshot) file of at most MAX_CHARS bytes; PolicyError otherwise.

    A byte that is not UTF-8 is reported with its line and column, so a file saved as Latin-1 or a
    binary passed by mistake is a located error, not a decoding traceback."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CHARS + 1)
    except OSError as exc:
        raise PolicyError(path, [PolicyIssue((), f"cannot read the file: {exc.strerror}", "check the path")]) from None
    if len(raw) > MAX_CHARS:
        raise PolicyError(
            path, [PolicyIssue((), f"the file is larger than {MAX_CHARS:,} bytes", "pass the right file")]
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise PolicyError(
            path,
            [
                PolicyIssue(
                    (),
                    f"byte 0x{raw[exc.start]:02x} at column {column} is not UTF-8",
                    "save the file as UTF-8 text",
                    line,
                )
            ],
        ) from None


def policy_label(path: str, overrides: Sequence[str] = ()) -> str:
    """Name a policy as the user gave it (file and ``--set`` overrides), for messages about it."""
    return " ".join([path, *(f"--set {o}" for o in overrides)])


def _apply(document: Any, override: str, filename: str) -> None:
    """Set one ``field.path=value`` in the policy document; a PolicyError names the part that does not exist."""
    key, sep, raw = override.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not sep or not parts:
        raise PolicyError(
            filename,
            [PolicyIssue((), f"override '{override}' is not FIELD=VALUE", "write e.g. scheduling.fair_sharing=true")],
        )
    try:
        value, _ = parse_yaml(raw, filename)
    except PolicyError:
        raise PolicyError(
            filename, [PolicyIssue(tuple(parts), f"value '{raw}' is not YAML", "quote strings, e.g. name='x'")]
        ) from None
    node: Any = document
    done: Path = ()
    for part in parts[:-1]:
        step = _key(node, part, done, filename)
        if isinstance(node, dict) and node.get(step) is None:
            node[step] = {}
        node, done = node[step], (*done, step)
    node[_key(node, parts[-1], done, filename)] = value


def _key(node: Any, part: str, done: Path, filename: str) -> str | int:
    """``part`` as a key of the section ``node`` (a list index in a list); a PolicyError where it cannot be."""
    if isinstance(node, dict):
        return part
    if isinstance(node, list):
        if part.isdigit() and int(part) < len(node):
            return int(part)
        raise PolicyError(
            filename, [PolicyIssue(done, f"no item '{part}' in this list of {len(node)}", "use an index from 0")]
        )
    raise PolicyError(
        filename, [PolicyIssue(done, f"is a value, not a section: cannot set '{part}' in it", "set the field itself")]
    )
