"""Policy section for the live control plane's API tokens: the platform admin's and one per team.

A token is either a reference to an environment variable (recommended: the policy file can then be
committed) or a literal value; literal values are kept as ``SecretStr`` so they never appear in a repr,
a log line or an error message.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from gpuplane.policy.schema_base import _Spec


class TokenRef(_Spec):
    env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: SecretStr | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> TokenRef:
        if (self.env is None) == (self.value is None):
            raise ValueError("give exactly one of 'env' (an environment variable name) or 'value'")
        return self


class AuthSpec(_Spec):
    admin_token: TokenRef | None = None
    team_tokens: dict[str, TokenRef] = Field(default_factory=dict)
