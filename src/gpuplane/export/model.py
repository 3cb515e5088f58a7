"""What an export produces: manifests grouped by output file, and warnings for what did not translate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Manifest:
    """One Kubernetes object (or one non-object document such as a dashboard) and the file it goes to."""

    file: str
    body: Obj

    @property
    def kind(self) -> str:
        """The object's kind, or '' for documents that are not Kubernetes objects."""
        return str(self.body.get("kind", ""))

    @property
    def name(self) -> str:
        """metadata.name, or '' when the document has none."""
        return str(self.body.get("metadata", {}).get("name", ""))


@dataclass(frozen=True, slots=True)
class ExportWarning:
    """A policy feature the target stack expresses only approximately (or not at all), and why.

    ``field`` is the policy field path (``teams[recsys].max_running_jobs``), ``effect`` says what the
    exported objects do instead: 'approximated' (a close but not equal mapping) or 'dropped' (no mapping).
    """

    field: str
    feature: str
    why: str
    effect: Literal["approximated", "dropped"]

    def render(self) -> str:
        """One line for the terminal and the NOTES file."""
        return f"{self.field}: {self.feature} is {self.effect} - {self.why}"


class ExportError(ValueError):
    """A policy that cannot be exported at all (e.g. names that are not valid Kubernetes names)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass
class ExportBundle:
    """Everything one export produces."""

    manifests: list[Manifest] = field(default_factory=list)
    warnings: list[ExportWarning] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    """Files that are not YAML objects (slurm.conf, scripts), by name, written as they are."""

    def add(self, file: str, *bodies: Obj) -> None:
        """Append objects destined for ``file``."""
        self.manifests.extend(Manifest(file, body) for body in bodies)

    def add_text(self, file: str, text: str) -> None:
        """Add a file written verbatim (one per name)."""
        if file in self.texts:
            raise ValueError(f"{file} is already in the bundle")
        self.texts[file] = text

    def warn(self, field_path: str, feature: str, why: str, effect: Literal["approximated", "dropped"]) -> None:
        """Record a feature that did not translate exactly."""
        self.warnings.append(ExportWarning(field_path, feature, why, effect))

    def files(self) -> dict[str, list[Obj]]:
        """Objects grouped by output file, in the order they were added."""
        out: dict[str, list[Obj]] = {}
        for manifest in self.manifests:
            out.setdefault(manifest.file, []).append(manifest.body)
        return out

    def of_kind(self, kind: str) -> list[Obj]:
        """Every emitted object of one kind."""
        return [m.body for m in self.manifests if m.kind == kind]
