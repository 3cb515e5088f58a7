"""Policy errors that name the file, the line, the field, what is wrong and how to fix it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Path = tuple[str | int, ...]


def format_path(path: Path) -> str:
    """Render a field path as ``teams[1].quotas.h100.nominal``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(top level)"


@dataclass(frozen=True, slots=True)
class PolicyIssue:
    """One problem found in a policy: where, what, and the fix."""

    path: Path
    message: str
    fix: str
    line: int | None = None
    where: str | None = None

    def render(self, filename: str) -> str:
        """One line a user can act on: ``file:line: field: problem. Fix: ...``."""
        where = f"{filename}:{self.line}" if self.line is not None else filename
        return f"{where}: {self.where or format_path(self.path)}: {self.message}. Fix: {self.fix}"


class PolicyError(ValueError):
    """A policy file that cannot be used, with every issue found (not just the first)."""

    def __init__(self, filename: str, issues: Sequence[PolicyIssue]) -> None:
        self.filename = filename
        self.issues = tuple(issues)
        super().__init__("\n".join(i.render(filename) for i in self.issues))
