"""Tenant isolation: per team a ServiceAccount, a Role and RoleBinding, and default-deny NetworkPolicies with
the allowances the policy declares; a ClusterRole for the platform admins; an admission policy that keeps
each team's jobs on its own LocalQueue.

A team's Role covers its namespace only: submit batch jobs (and Kubeflow PyTorchJobs, RayJobs), read its
pods, logs, events, Kueue workloads and LocalQueue, and its services' Deployments. It cannot create bare
pods (which would bypass Kueue), LocalQueues, or anything cluster-scoped. Kueue admits a namespace's
workloads only to the team's ClusterQueue (its namespaceSelector), and the ValidatingAdmissionPolicy rejects
a job whose ``kueue.x-k8s.io/queue-name`` is not the team's LocalQueue, so jobs cannot slip past Kueue.
"""

from __future__ import annotations

from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import CLASS_LABEL, QUEUE_NAME_LABEL, TEAM_LABEL, PolicyView, metadata
from gpuplane.policy.schema import TeamSpec
from gpuplane.policy.schema_tenancy import EgressRuleSpec, PeerSpec

FILE = "tenancy.yaml"
SUBMITTER = "gpuplane-submitter"
TEAM_ROLE = "gpuplane-team"
ADMIN_ROLE = "gpuplane-platform-admin"
QUEUE_POLICY = "gpuplane-own-local-queue"
_NAME_LABEL = "kubernetes.io/metadata.name"
_JOB_KINDS = (("batch", "jobs"), ("kubeflow.org", "pytorchjobs"), ("ray.io", "rayjobs"))
_ADMIN_GROUPS = (
    "",
    "apps",
    "batch",
    "autoscaling",
    "kueue.x-k8s.io",
    "karpenter.sh",
    "keda.sh",
    "monitoring.coreos.com",
    "nvidia.com",
    "networking.k8s.io",
    "scheduling.k8s.io",
    "kubeflow.org",
    "ray.io",
)


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> Obj:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


_READ = ["get", "list", "watch"]


def team_role_rules() -> list[Obj]:
    """What a team may do in its own namespace (and nothing else anywhere)."""
    submit = ["create", "delete", *_READ]
    return [
        *(_rule([group], [resource], submit) for group, resource in _JOB_KINDS),
        _rule([""], ["pods", "events", "services"], _READ),
        _rule([""], ["pods/log"], ["get"]),
        _rule(["kueue.x-k8s.io"], ["workloads", "localqueues"], _READ),
        _rule(["apps"], ["deployments"], _READ),
        _rule(["keda.sh"], ["scaledobjects"], _READ),
    ]


def _peer(peer: PeerSpec) -> Obj:
    out: Obj = {"namespaceSelector": {"matchLabels": {_NAME_LABEL: peer.namespace}}}
    if peer.pod_labels:
        out["podSelector"] = {"matchLabels": dict(peer.pod_labels)}
    return out


def _netpol(name: str, namespace: str, spec: Obj) -> Obj:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(name, namespace),
        "spec": spec,
    }


def _egress_rule(rule: EgressRuleSpec) -> Obj:
    to: list[Obj] = [{"ipBlock": {"cidr": cidr}} for cidr in rule.cidrs]
    to += [{"namespaceSelector": {"matchLabels": {_NAME_LABEL: ns}}} for ns in rule.namespaces]
    out: Obj = {"to": to}
    if rule.ports:
        out["ports"] = [{"protocol": rule.protocol, "port": port} for port in rule.ports]
    return out


def network_policies(view: PolicyView, team: TeamSpec) -> list[Obj]:
    """Default deny, then: within the namespace, DNS, monitoring's scrape, the gateway to the team's
    inference services on their ports, and the egress rules that name the team (or all teams)."""
    tenancy = view.policy.tenancy
    ns = view.namespace(team.name)
    everything: Obj = {"podSelector": {}}
    out = [
        _netpol("default-deny", ns, {**everything, "policyTypes": ["Ingress", "Egress"]}),
        _netpol(
            "allow-same-namespace",
            ns,
            {
                **everything,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [everything]}],
                "egress": [{"to": [everything]}],
            },
        ),
        _netpol(
            "allow-dns",
            ns,
            {
                **everything,
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [_peer(tenancy.dns)],
                        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                    }
                ],
            },
        ),
        _netpol(
            "allow-monitoring-scrape",
            ns,
            {**everything, "policyTypes": ["Ingress"], "ingress": [{"from": [_peer(tenancy.monitoring)]}]},
        ),
    ]
    ports = sorted({s.port for s in view.policy.services if s.team == team.name})
    if ports:
        out.append(
            _netpol(
                "allow-gateway-to-inference",
                ns,
                {
                    "podSelector": {"matchLabels": {CLASS_LABEL: "inference"}},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {"from": [_peer(tenancy.gateway)], "ports": [{"protocol": "TCP", "port": p} for p in ports]}
                    ],
                },
            )
        )
    rules = [r for r in tenancy.egress if not r.teams or team.name in r.teams]
    if rules:
        out.append(
            _netpol(
                "allow-declared-egress",
                ns,
                {**everything, "policyTypes": ["Egress"], "egress": [_egress_rule(r) for r in rules]},
            )
        )
    return out


def _team_access(view: PolicyView, team: TeamSpec) -> list[Obj]:
    ns = view.namespace(team.name)
    group = f"{view.policy.tenancy.team_group_prefix}{team.name}"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(SUBMITTER, ns, **{TEAM_LABEL: team.name})},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(TEAM_ROLE, ns, **{TEAM_LABEL: team.name}),
            "rules": team_role_rules(),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(TEAM_ROLE, ns, **{TEAM_LABEL: team.name}),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TEAM_ROLE},
            "subjects": [
                {"kind": "ServiceAccount", "name": SUBMITTER, "namespace": ns},
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group},
            ],
        },
    ]


def queue_expression() -> str:
    """CEL of the admission policy: a job names its own namespace's LocalQueue (the team's)."""
    label = QUEUE_NAME_LABEL
    return (
        f"has(object.metadata.labels) && '{label}' in object.metadata.labels && "
        f"object.metadata.labels['{label}'] == namespaceObject.metadata.name"
    )


def _queue_policy() -> list[Obj]:
    rules = [
        {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": [resource]}
        for group, resource in (*_JOB_KINDS, ("apps", "deployments"))
    ]
    team_namespaces = {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": metadata(QUEUE_POLICY),
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": rules, "namespaceSelector": team_namespaces},
                "validations": [
                    {
                        "expression": queue_expression(),
                        "message": f"jobs in a team namespace must set the label {QUEUE_NAME_LABEL} to the team's "
                        "LocalQueue (named after the namespace)",
                        "reason": "Forbidden",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": metadata(QUEUE_POLICY),
            "spec": {"policyName": QUEUE_POLICY, "validationActions": ["Deny"]},
        },
    ]


def _admin_access(view: PolicyView) -> list[Obj]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": metadata(ADMIN_ROLE),
            "rules": [
                _rule(list(_ADMIN_GROUPS), ["*"], ["*"]),
                _rule(["rbac.authorization.k8s.io"], ["roles", "rolebindings"], ["*"]),
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": metadata(ADMIN_ROLE),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ADMIN_ROLE},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": view.policy.tenancy.admin_group}
            ],
        },
    ]


def emit_tenancy(view: PolicyView, bundle: ExportBundle) -> None:
    """Every team's access and network isolation, the admins' ClusterRole, and the own-queue admission policy."""
    for team in view.policy.teams:
        bundle.add(FILE, *_team_access(view, team))
        if view.policy.tenancy.isolate:
            bundle.add(FILE, *network_policies(view, team))
    bundle.add(FILE, *_admin_access(view), *_queue_policy())
