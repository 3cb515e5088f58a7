"""The replica-scaling policies `simulate-serving` compares: a registry of typed variants, not parsed names.

A variant is a kind (``PolicyKind``) and its one parameter, typed: the HPA's requests/s target (absolute,
or a share of a replica's full-batch rate), whether gpuplane may use the service's fallback variant.
``PolicyVariant.parse`` reads the names people type (``gpuplane``, ``gpuplane@no-fallback``, ``hpa``,
``hpa@4.4``, ``hpa@80%``, ``static``, ``oracle``) and ``name`` writes them back, so the CLI and the JSON
keep the names they always had. A bad name raises ``PolicyVariantError``, which names the policy field
the variant stands for (e.g. ``services[].autoscaling.target_rps_per_replica``), not a command-line flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class PolicyKind(StrEnum):
    """The families of policies: the service's own autoscaler, an HPA, a peak-sized fleet, the oracle."""

    GPUPLANE = "gpuplane"
    HPA = "hpa"
    STATIC = "static"
    ORACLE = "oracle"


class PolicyVariantError(ValueError):
    """A policy variant that does not exist, with the policy field it would set and the fix."""

    def __init__(self, name: str, field: str, problem: str, fix: str) -> None:
        super().__init__(f"policy variant '{name}' ({field}): {problem}. Fix: {fix}")
        self.field = field


@dataclass(frozen=True)
class HpaTarget:
    """An HPA's requests/s target per replica: ``value`` requests/s, or ``value`` % of what a replica
    completes at full batch when ``share``."""

    value: float
    share: bool = False

    def requests_per_s(self, capacity_rps: float) -> float:
        """The target in requests/s for a replica of ``capacity_rps`` at full batch."""
        return self.value / 100 * capacity_rps if self.share else self.value

    @property
    def label(self) -> str:
        """As typed: ``4.4`` or ``80%``."""
        return f"{self.value:g}%" if self.share else f"{self.value:g}"


@dataclass(frozen=True)
class PolicyVariant:
    """One policy to run: its kind and its parameter."""

    kind: PolicyKind
    hpa_target: HpaTarget | None = None
    """HPA only: the requests/s target (None: the service's ``target_rps_per_replica``, else 80 % of a
    replica's full-batch rate)."""
    fallback: bool = True
    """gpuplane only: whether the service's fallback variant may serve when GPUs run short."""

    @property
    def name(self) -> str:
        """The variant's name as typed on the command line and written in the JSON."""
        if self.kind is PolicyKind.HPA and self.hpa_target is not None:
            return f"hpa@{self.hpa_target.label}"
        if self.kind is PolicyKind.GPUPLANE and not self.fallback:
            return "gpuplane@no-fallback"
        return self.kind.value

    @property
    def autoscaled(self) -> bool:
        """Whether the replica autoscaler runs it (gpuplane, HPA) rather than a fixed plan (static, oracle)."""
        return self.kind in (PolicyKind.GPUPLANE, PolicyKind.HPA)

    @staticmethod
    def parse(name: str) -> PolicyVariant:
        """The variant a name stands for (module docstring); ``PolicyVariantError`` naming the field."""
        kind_name, sep, raw = name.strip().partition("@")
        try:
            kind = PolicyKind(kind_name)
        except ValueError:
            raise PolicyVariantError(
                name, "policy", "no such policy", f"use one of {', '.join(k.value for k in PolicyKind)}"
            ) from None
        if not sep:
            return PolicyVariant(kind)
        if kind is PolicyKind.HPA:
            return PolicyVariant(kind, hpa_target=_hpa_target(name, raw))
        if kind is PolicyKind.GPUPLANE and raw == "no-fallback":
            return PolicyVariant(kind, fallback=False)
        raise PolicyVariantError(
            name,
            f"{kind.value}",
            f"{kind.value} takes no parameter '{raw}'",
            "use gpuplane@no-fallback (services[].fallback unused), hpa@<requests/s> or hpa@<share>%",
        )


def _hpa_target(name: str, raw: str) -> HpaTarget:
    share = raw.endswith("%")
    try:
        value = float(raw.removesuffix("%"))
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise PolicyVariantError(
            name,
            "services[].autoscaling.target_rps_per_replica",
            f"'{raw}' is not a positive requests/s target per replica",
            "hpa@4.4 for 4.4 requests/s per replica, hpa@80% for 80 % of a replica's full-batch rate",
        )
    return HpaTarget(value, share)


def parse_variants(names: tuple[str | PolicyVariant, ...]) -> tuple[PolicyVariant, ...]:
    """Variants from names or variants, in order, without repeats."""
    variants = [n if isinstance(n, PolicyVariant) else PolicyVariant.parse(n) for n in names]
    return tuple(dict.fromkeys(variants))


def is_variant(name: str) -> bool:
    """Whether ``name`` is a policy variant's name (for the command line's check)."""
    try:
        PolicyVariant.parse(name)
    except PolicyVariantError:
        return False
    return True


DEFAULT_VARIANTS = tuple(PolicyVariant(kind) for kind in PolicyKind)
"""What `simulate-serving` compares by default: gpuplane, hpa, static, oracle."""
