"""Cross-field rules of the tenancy section: egress rules name known teams, valid networks and a destination."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from gpuplane.policy.errors import PolicyIssue
from gpuplane.policy.schema import PolicySpec


def check_tenancy(policy: PolicySpec) -> Iterator[PolicyIssue]:
    """Every problem of ``tenancy``: unknown teams, malformed CIDRs, rules without a destination, duplicates."""
    teams = sorted(t.name for t in policy.teams)
    seen: set[str] = set()
    for index, rule in enumerate(policy.tenancy.egress):
        path = ("tenancy", "egress", index)
        if rule.name in seen:
            yield PolicyIssue((*path, "name"), f"duplicate egress rule '{rule.name}'", "give every rule its own name")
        seen.add(rule.name)
        for tindex, team in enumerate(rule.teams):
            if team not in teams:
                yield PolicyIssue((*path, "teams", tindex), f"unknown team '{team}'", "use one of: " + ", ".join(teams))
        for cindex, cidr in enumerate(rule.cidrs):
            try:
                ipaddress.ip_network(cidr, strict=True)
            except ValueError as exc:
                yield PolicyIssue(
                    (*path, "cidrs", cindex),
                    f"'{cidr}' is not a network: {exc}",
                    "write an address block such as 10.20.0.0/16 (host bits zero) or 203.0.113.7/32",
                )
        if not rule.cidrs and not rule.namespaces:
            yield PolicyIssue(
                path,
                f"egress rule '{rule.name}' allows no destination",
                "list cidrs (address blocks) or namespaces the teams may reach",
            )
