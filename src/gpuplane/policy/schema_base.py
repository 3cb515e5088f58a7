"""Building blocks every section of the policy schema shares: strict frozen models, DNS-safe names, bounds.

Numbers are finite (no ``.inf`` or ``.nan``) and counts have an upper bound far above any real cluster
(``MAX_NODES`` nodes in a pool, ``MAX_COUNT`` GPUs, replicas, jobs or CPUs), so a typo such as
``max_replicas: 9223372036854775808`` is an error instead of an overflow in an exported manifest.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Name = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([a-z0-9.\-]*[a-z0-9])?$")]
ClassName = Literal["training", "batch", "inference"]
MAX_NODES = 100_000
MAX_COUNT = 10_000_000


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
