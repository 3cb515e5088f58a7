"""GPU models and their MIG geometry (how a GPU can be cut into isolated slices)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

MILLI_PER_GPU = 1000
_PROFILE_RE = re.compile(r"^(?P<compute>[1-8])g\.(?P<memory>\d+(?:\.\d+)?)gb$")


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile, e.g. ``3g.40gb``: compute slices and memory slices it occupies on one GPU."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_gib: float


@dataclass(frozen=True, slots=True)
class MigGeometry:
    """How a GPU model partitions: its total compute and memory slices and the profiles it offers."""

    compute_slices: int
    memory_slices: int
    profiles: Mapping[str, MigProfile]

    def quota_milli(self, profile: str) -> int:
        """Quota charge of one slice in milli-GPUs: its share of the GPU's compute, rounded up.

        Rounding up keeps quota conservative: seven 1g slices of a 7-slice GPU charge slightly more
        than one whole GPU, never less.
        """
        return math.ceil(MILLI_PER_GPU * self.profiles[profile].compute_slices / self.compute_slices)


def parse_mig_profile(name: str, gpu_memory_gib: float, compute_slices: int, memory_slices: int) -> MigProfile:
    """Read a profile name such as ``1g.10gb`` into the slices it occupies on a GPU of this geometry.

    The memory slices are the profile's memory divided by the size of one memory slice, rounded to the
    nearest whole slice (NVIDIA's own profile names round the same way, e.g. ``1g.18gb`` on a 141 GB H200).
    Raises ValueError with the reason when the name is malformed or does not fit the GPU.
    """
    match = _PROFILE_RE.match(name)
    if match is None:
        raise ValueError(f"'{name}' is not a MIG profile name; expected the form '<N>g.<M>gb', e.g. '1g.10gb'")
    compute = int(match["compute"])
    memory_gib = float(match["memory"])
    slice_gib = gpu_memory_gib / memory_slices
    memory = max(1, round(memory_gib / slice_gib))
    if compute > compute_slices:
        raise ValueError(f"'{name}' needs {compute} compute slices but the GPU has {compute_slices}")
    if memory > memory_slices or memory_gib > gpu_memory_gib * 1.02:
        raise ValueError(f"'{name}' needs {memory_gib:g} GiB but the GPU has {gpu_memory_gib:g} GiB")
    return MigProfile(name=name, compute_slices=compute, memory_slices=memory, memory_gib=memory_gib)
