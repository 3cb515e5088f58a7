"""Read a policy file from disk and validate it."""

from __future__ import annotations

from gpuplane.policy import PolicyError, PolicyIssue, PolicySpec, parse_policy


def load_policy(path: str) -> PolicySpec:
    """Read and validate the policy at ``path``; unreadable files become a PolicyError too."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise PolicyError(path, [PolicyIssue((), f"cannot read the file: {exc.strerror}", "check the path")]) from None
    return parse_policy(text, path)
