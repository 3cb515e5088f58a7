"""API tokens: the policy's references resolved and checked once at start, compared in constant time, never logged."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from gpuplane.policy import PolicySpec
from gpuplane.policy.schema_auth import TOKEN_FIX, token_problem

ADMIN = "*admin*"
MONITOR = "*metrics*"


class AuthConfigError(ValueError):
    """A token reference that cannot be resolved, naming the policy field and the variable."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a request: a team, the platform admin (who sees and changes everything), or the metrics
    scraper (who reads ``/metrics`` and nothing else)."""

    team: str | None
    metrics_only: bool = False

    @property
    def is_admin(self) -> bool:
        """Whether this is the platform admin."""
        return self.team is None and not self.metrics_only

    @property
    def may_scrape(self) -> bool:
        """Whether this principal may read every team's metrics."""
        return self.team is None

    def may_access(self, team: str) -> bool:
        """Whether this principal may see and change ``team``'s jobs and services."""
        return self.is_admin or self.team == team


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def _principal_of(owner: str) -> Principal:
    if owner == ADMIN:
        return Principal(None)
    if owner == MONITOR:
        return Principal(None, metrics_only=True)
    return Principal(owner)


def _owner_label(owner: str) -> str:
    return {ADMIN: "the admin", MONITOR: "the metrics token"}.get(owner, f"team {owner}")


class TokenTable:
    """Maps bearer tokens to principals; keeps only their SHA-256 digests."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self._by_owner = {owner: _digest(secret) for owner, secret in tokens.items() if secret}

    def identify(self, token: str) -> Principal | None:
        """The principal holding ``token``, or None.

        Digests of equal length are compared with every owner's, so the time taken depends neither on the
        token's length nor on which owner (if any) it matches; an empty token matches no one.
        """
        if not token:
            return None
        offered = _digest(token)
        found: Principal | None = None
        for owner, digest in self._by_owner.items():
            if hmac.compare_digest(digest, offered):
                found = _principal_of(owner)
        return found

    @property
    def owners(self) -> list[str]:
        """Who has a token (team names, and the admin marker)."""
        return list(self._by_owner)


def token_variables(policy: PolicySpec) -> list[str]:
    """The environment variables the policy's ``auth`` section reads tokens from."""
    refs = [policy.auth.admin_token, policy.auth.metrics_token, *policy.auth.team_tokens.values()]
    return sorted({ref.env for ref in refs if ref is not None and ref.env is not None})


def resolve_tokens(policy: PolicySpec, data_dir: Path, generate_missing: bool) -> tuple[TokenTable, list[str]]:
    """Every team's and the admin's token from the policy's ``auth`` section.

    A reference to an unset environment variable is an error, unless ``generate_missing``: then a random
    token is generated and written to ``<data_dir>/tokens.json`` (mode 600), which a newcomer reads to use
    the API. Returns the table and one line per generated token naming its owner (never its value).
    """
    tokens: dict[str, str] = {}
    notes: list[str] = []
    stored_path = data_dir / "tokens.json"
    stored: dict[str, str] = json.loads(stored_path.read_text()) if stored_path.exists() else {}
    wanted: list[tuple[str, str, object]] = [(ADMIN, "auth.admin_token", policy.auth.admin_token)]
    for team in policy.teams:
        wanted.append((team.name, f"auth.team_tokens.{team.name}", policy.auth.team_tokens.get(team.name)))
    wanted.append((MONITOR, "auth.metrics_token", policy.auth.metrics_token))
    for owner, where, ref in wanted:
        value: str | None = None
        if ref is not None:
            env = getattr(ref, "env", None)
            secret = getattr(ref, "value", None)
            if env is not None:
                value = os.environ.get(env) or None
                if value is None and not generate_missing:
                    raise AuthConfigError(
                        f"{where}: environment variable {env} is not set. Fix: export {env}=<token>, or start with "
                        "--generate-tokens to have tokens generated into the data directory"
                    )
            elif secret is not None:
                value = secret.get_secret_value()
        if value is None and generate_missing and owner != MONITOR:
            value = stored.get(owner) or secrets.token_urlsafe(24)
            stored[owner] = value
            notes.append(f"token for {_owner_label(owner)} in {stored_path}")
        if value is not None:
            problem = token_problem(value)
            if problem is not None:
                raise AuthConfigError(f"{where}: {problem}. Fix: {TOKEN_FIX}")
            if value in tokens.values():
                other = next(o for o, v in tokens.items() if v == value)
                raise AuthConfigError(
                    f"{where}: the same token as {_owner_label(other)}; whoever holds it would act as both. "
                    "Fix: give every team and the admin a token of its own"
                )
            tokens[owner] = value
    if notes:
        data_dir.mkdir(parents=True, exist_ok=True)
        stored_path.touch(mode=0o600, exist_ok=True)
        stored_path.chmod(0o600)
        stored_path.write_text(json.dumps(stored, indent=2))
    return TokenTable(tokens), notes
