"""Building blocks every section of the policy schema shares: strict frozen models and DNS-safe names."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Name = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([a-z0-9.\-]*[a-z0-9])?$")]
ClassName = Literal["training", "batch", "inference"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
