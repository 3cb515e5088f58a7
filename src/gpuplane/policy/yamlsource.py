"""YAML text to plain data, remembering the line of every mapping key and list item.

The text may come from anyone (a policy file, a snapshot, an API request), so reading it is bounded:
at most ``MAX_CHARS`` characters, nesting at most ``MAX_DEPTH`` levels deep, aliases expanding to at
most ``MAX_EXPANDED_NODES`` nodes beyond the document's own (a "billion laughs" file of a few hundred
bytes would otherwise expand to gigabytes), no alias to a section that contains it, only the plain
YAML types (no custom or Python tags), scalar keys only, and every key once per mapping. Merge keys
(``<<: *defaults``) are honoured. Every violation is a PolicyError with its line and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from gpuplane.policy.errors import Path, PolicyError, PolicyIssue

MAX_CHARS = 4 * 1024 * 1024
MAX_DEPTH = 64
MAX_EXPANDED_NODES = 100_000
_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = frozenset(f"{_CORE}{t}" for t in ("null", "bool", "int", "float", "str", "timestamp"))
_MAP_TAG, _SEQ_TAG, _MERGE_TAG = f"{_CORE}map", f"{_CORE}seq", f"{_CORE}merge"


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


class _Refused(Exception):
    """A node the reader will not build; carries the issue to report."""

    def __init__(self, issue: PolicyIssue) -> None:
        super().__init__(issue.message)
        self.issue = issue


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a nesting limit while composing (the composer recurses per level)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.composed = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        """Compose one node, refusing nesting deeper than MAX_DEPTH before Python's stack runs out."""
        self.depth += 1
        self.composed += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _Refused(
                    PolicyIssue(
                        (),
                        f"nested more than {MAX_DEPTH} levels deep",
                        "flatten the structure (a policy is a few levels deep)",
                        mark.line + 1,
                    )
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def parse_yaml(text: str, filename: str) -> tuple[Any, LineMap]:
    """Parse YAML into dicts/lists/scalars plus the line of each node; every problem becomes PolicyError."""
    if len(text) > MAX_CHARS:
        raise PolicyError(
            filename,
            [PolicyIssue((), f"{len(text):,} characters, more than {MAX_CHARS:,}", "pass the right file", None)],
        )
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)
        node = loader.get_single_node()
    except _Refused as exc:
        raise PolicyError(filename, [exc.issue]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise PolicyError(
            filename,
            [PolicyIssue((), f"invalid YAML: {exc.problem or exc}", "correct the YAML syntax at that line", line)],
        ) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise PolicyError(
            filename,
            [
                PolicyIssue(
                    (),
                    f"character U+{int(exc.character):04X} is not allowed in YAML",
                    "remove it (control characters and NUL bytes cannot appear in a YAML file)",
                    line,
                )
            ],
        ) from None
    except yaml.YAMLError as exc:
        raise PolicyError(filename, [PolicyIssue((), f"invalid YAML: {exc}", "correct the YAML syntax")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    lines = LineMap()
    if node is None:
        return None, lines
    converter = _Converter(lines, MAX_EXPANDED_NODES + loader.composed)
    try:
        return converter.convert(node, ()), lines
    except _Refused as exc:
        raise PolicyError(filename, [exc.issue]) from None


class _Converter:
    """Nodes to plain data, counting every node built so aliases cannot blow up."""

    def __init__(self, lines: LineMap, budget: int) -> None:
        self.lines = lines
        self.budget = budget
        self.constructor = yaml.SafeLoader("")
        self.open: set[int] = set()

    def convert(self, node: yaml.Node, path: Path) -> Any:
        """The plain value of ``node`` at ``path``."""
        self.lines.lines.setdefault(path, node.start_mark.line + 1)
        line = self.lines.lines[path]
        self.budget -= 1
        if self.budget < 0:
            raise _Refused(
                PolicyIssue(
                    path[:1],
                    f"aliases expand to more than {MAX_EXPANDED_NODES:,} values",
                    "write the sections out instead of nesting aliases of aliases",
                    self.lines.lines.get(path[:1], line),
                )
            )
        if id(node) in self.open:
            raise _Refused(PolicyIssue(path, "an alias refers to a section that contains it", "remove the alias", line))
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            raise _Refused(_tag_issue(node, path))
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path)
            return [self._item(item, (*path, index)) for index, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def _item(self, node: yaml.Node, path: Path) -> Any:
        self.lines.lines[path] = node.start_mark.line + 1
        return self.convert(node, path)

    def _scalar(self, node: yaml.ScalarNode, path: Path) -> Any:
        if node.tag not in _SCALAR_TAGS:
            raise _Refused(_tag_issue(node, path))
        try:
            return self.constructor.construct_object(node)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError):
            raise _Refused(
                PolicyIssue(
                    path,
                    f"'{node.value}' is not a valid {node.tag.removeprefix(_CORE)}",
                    "correct the value or remove the tag",
                    node.start_mark.line + 1,
                )
            ) from None

    def _mapping(self, node: yaml.MappingNode, path: Path) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        first_line: dict[Any, int] = {}
        merged: list[yaml.Node] = []
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE_TAG:
                merged.extend(value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node])
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise _Refused(PolicyIssue(path, "a key is a list or a mapping", "use a plain name as the key", line))
            key = self._scalar(key_node, path)
            if key in first_line:
                raise _Refused(
                    PolicyIssue(
                        (*path, str(key)),
                        f"key '{key}' appears twice in this mapping (first at line {first_line[key]})",
                        "keep one of them",
                        line,
                    )
                )
            first_line[key] = line
            child = (*path, str(key))
            self.lines.lines[child] = line
            out[key] = self.convert(value_node, child)
        for source in merged:
            self._merge(out, source, path)
        return out

    def _merge(self, out: dict[Any, Any], source: yaml.Node, path: Path) -> None:
        """Add the keys of a ``<<:`` source that the mapping does not set itself (YAML merge key)."""
        if not isinstance(source, yaml.MappingNode):
            raise _Refused(
                PolicyIssue(
                    path,
                    "'<<' merges a value that is not a mapping",
                    "merge a mapping's alias, e.g. '<<: *defaults'",
                    source.start_mark.line + 1,
                )
            )
        own, self.lines = self.lines, LineMap()
        try:
            values = self.convert(source, path)
        finally:
            merged_lines, self.lines = self.lines, own
        for key, value in values.items():
            out.setdefault(key, value)
        for where, line in merged_lines.lines.items():
            self.lines.lines.setdefault(where, line)


def _tag_issue(node: yaml.Node, path: Path) -> PolicyIssue:
    return PolicyIssue(
        path,
        f"the YAML tag '{node.tag}' is not supported",
        "remove the tag (plain mappings, lists, strings, numbers and booleans only)",
        node.start_mark.line + 1,
    )
