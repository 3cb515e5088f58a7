"""The platform policy file: schema, loading with line-accurate errors, cross-field rules."""

from gpuplane.policy.errors import PolicyError, PolicyIssue
from gpuplane.policy.load import parse_policy
from gpuplane.policy.schema import PolicySpec

__all__ = ["PolicyError", "PolicyIssue", "PolicySpec", "parse_policy"]
