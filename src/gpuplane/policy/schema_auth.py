"""Policy section for the live control plane's API tokens: the platform admin's and one per team.

A token is either a reference to an environment variable (recommended: the policy file can then be
committed) or a literal value; literal values are kept as ``SecretStr`` so they never appear in a repr,
a log line or an error message.
"""

from __future__ import annotations

import re

from pydantic import Field, SecretStr, model_validator

from gpuplane.policy.schema_base import _Spec

MIN_TOKEN_LENGTH = 16
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~+/-]+=*")
TOKEN_FIX = (
    f"use a random string of at least {MIN_TOKEN_LENGTH} characters from A-Z a-z 0-9 . _ ~ + / - "
    "(python -c 'import secrets; print(secrets.token_urlsafe(24))')"
)


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be an API token (None when it can), without quoting it.

    A token is what follows ``Bearer`` in a header (RFC 6750's token68 characters), long enough not to be
    guessed: an empty or whitespace token would match a header that carries no token at all.
    """
    if not token:
        return "the token is empty"
    if not _TOKEN_CHARS.fullmatch(token):
        return "the token has characters a bearer token cannot carry (spaces, control or non-ASCII characters)"
    if len(token) < MIN_TOKEN_LENGTH:
        return f"the token has {len(token)} characters, fewer than {MIN_TOKEN_LENGTH}"
    return None


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
    metrics_token: TokenRef | None = None
    """A token that may read ``/metrics`` and nothing else (a Prometheus scraper's)."""
