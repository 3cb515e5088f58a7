"""API tokens: `check` refuses empty, weak and shared tokens; the API never maps a malformed header to anyone."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuplane.cli import main
from gpuplane.io.policy_file import load_policy
from gpuplane.live.api import bearer_token
from gpuplane.live.auth import ADMIN, AuthConfigError, TokenTable, resolve_tokens

POLICY = Path(__file__).parents[1] / "data" / "live_policy.yaml"


def policy_with_auth(tmp_path: Path, auth: dict[str, object]) -> Path:
    raw = yaml.safe_load(POLICY.read_text())
    raw["auth"] = auth
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    ("auth", "where"),
    [
        ({"admin_token": {"value": ""}}, "auth.admin_token.value: the token is empty"),
        ({"admin_token": {"value": "\x85"}}, "auth.admin_token.value: the token has characters"),
        ({"admin_token": {"value": "short"}}, "fewer than 16"),
        (
            {
                "admin_token": {"value": "shared-token-0123456"},
                "team_tokens": {"research": {"value": "shared-token-0123456"}},
            },
            "auth.team_tokens.research.value: the same token as auth.admin_token",
        ),
        (
            {"team_tokens": {"research": {"env": "TEAM_TOKEN"}, "product": {"env": "TEAM_TOKEN"}}},
            "env: the same variable TEAM_TOKEN as auth.team_tokens.",
        ),
    ],
)
def test_check_refuses_empty_weak_and_shared_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], auth: dict[str, object], where: str
) -> None:
    assert main(["check", str(policy_with_auth(tmp_path, auth))]) == 2
    err = capsys.readouterr().err
    assert where in err and "Fix:" in err
    assert "shared-token-0123456" not in err, "a token is never echoed"


def test_serve_refuses_weak_or_shared_tokens_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = load_policy(
        str(policy_with_auth(tmp_path, {"team_tokens": {"research": {"env": "T_R"}, "product": {"env": "T_P"}}}))
    )
    monkeypatch.setenv("T_R", "same-token-0123456789")
    monkeypatch.setenv("T_P", "same-token-0123456789")
    with pytest.raises(AuthConfigError, match=r"auth\.team_tokens\.product: the same token as team research") as info:
        resolve_tokens(policy, tmp_path, generate_missing=True)
    assert "same-token-0123456789" not in str(info.value)
    monkeypatch.setenv("T_P", "weak")
    with pytest.raises(AuthConfigError, match="fewer than 16"):
        resolve_tokens(policy, tmp_path, generate_missing=True)


def test_an_empty_or_unicode_whitespace_token_identifies_no_one() -> None:
    table = TokenTable({ADMIN: "", "research": "research-secret-token-0"})
    assert table.identify("") is None
    assert bearer_token("Bearer \x85") == "\x85" and table.identify("\x85") is None
    assert bearer_token("Bearer") is None and bearer_token("Basic abc") is None and bearer_token(None) is None
    assert bearer_token("bearer  research-secret-token-0 ") == "research-secret-token-0"
    who = table.identify("research-secret-token-0")
    assert who is not None and who.team == "research"
    assert table.identify("research-secret-token-") is None
