"""YAML text to plain data, remembering the line of every mapping key and list item."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from gpuplane.policy.errors import Path, PolicyError, PolicyIssue


@dataclass
class LineMap:
    """Line numbers (1-based) of the YAML nodes, by field path."""

    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """The line of the deepest known node on ``path``."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None


def parse_yaml(text: str, filename: str) -> tuple[Any, LineMap]:
    """Parse YAML into dicts/lists/scalars plus the line of each node; syntax errors become PolicyError."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise PolicyError(
            filename,
            [PolicyIssue((), f"invalid YAML: {exc.problem or exc}", "correct the YAML syntax at that line", line)],
        ) from None
    lines = LineMap()
    if node is None:
        return None, lines
    return _convert(node, (), lines, yaml.SafeLoader("")), lines


def _convert(node: yaml.Node, path: Path, lines: LineMap, loader: yaml.SafeLoader) -> Any:
    lines.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            child = (*path, str(key))
            lines.lines[child] = key_node.start_mark.line + 1
            out[key] = _convert(value_node, child, lines, loader)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            child = (*path, index)
            lines.lines[child] = item.start_mark.line + 1
            items.append(_convert(item, child, lines, loader))
        return items
    return loader.construct_object(node)
