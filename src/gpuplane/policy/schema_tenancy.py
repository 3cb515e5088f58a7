"""Policy section for tenant isolation: who administers the platform, which groups are a team's users, and
what traffic may cross a team's boundary (the gateway to its services, monitoring, DNS, declared egress).

Every team is isolated by default: its namespace denies all traffic except within itself and what this
section allows. Field-by-field documentation lives in docs/policy.md; cross-field rules in
``validate_tenancy.py``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpuplane.policy.schema_base import Name, _Spec

Labels = dict[str, str]
Port = Annotated[int, Field(ge=1, le=65535)]


class PeerSpec(_Spec):
    namespace: Name
    pod_labels: Labels = Field(default_factory=dict)


def _gateway() -> PeerSpec:
    return PeerSpec(namespace="gpuplane-gateway")


def _monitoring() -> PeerSpec:
    return PeerSpec(namespace="monitoring")


def _dns() -> PeerSpec:
    return PeerSpec(namespace="kube-system", pod_labels={"k8s-app": "kube-dns"})


class EgressRuleSpec(_Spec):
    name: Name
    teams: list[Name] = Field(default_factory=list)
    cidrs: list[str] = Field(default_factory=list)
    namespaces: list[Name] = Field(default_factory=list)
    ports: list[Port] = Field(default_factory=list)
    protocol: str = Field("TCP", pattern=r"^(TCP|UDP|SCTP)$")


class TenancySpec(_Spec):
    isolate: bool = True
    admin_group: str = Field("gpuplane-admins", min_length=1)
    team_group_prefix: str = Field("gpuplane-team-", min_length=1)
    gateway: PeerSpec = Field(default_factory=_gateway)
    monitoring: PeerSpec = Field(default_factory=_monitoring)
    dns: PeerSpec = Field(default_factory=_dns)
    egress: list[EgressRuleSpec] = Field(default_factory=list)
