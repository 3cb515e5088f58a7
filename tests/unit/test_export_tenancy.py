"""Tenant isolation in the Kubernetes export: RBAC per team, default-deny NetworkPolicies with the declared
allowances (checked by evaluating the policies as Kubernetes does), the own-LocalQueue admission policy, and
the tenancy section's validation."""

from __future__ import annotations

import ipaddress

import celpy
import pytest
import yaml

from gpuplane.export import export_kubernetes
from gpuplane.io.policy_file import load_policy
from gpuplane.policy import PolicyError, parse_policy
from tests.unit.export_fixtures import PLATFORM, platform

EGRESS = {
    "egress": [
        {"name": "object-store", "teams": ["recsys"], "cidrs": ["10.20.0.0/16"], "ports": [443]},
        {"name": "registry", "namespaces": ["model-registry"], "ports": [5000]},
    ]
}


def _selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()) and all(
        (e["key"] in labels) == (e["operator"] == "Exists") for e in selector.get("matchExpressions", [])
    )


def _peer_matches(peer: dict, policy_ns: str, ns: str, pod: dict, ip: str | None) -> bool:
    if "ipBlock" in peer:
        return ip is not None and ipaddress.ip_address(ip) in ipaddress.ip_network(peer["ipBlock"]["cidr"])
    if ip is not None:
        return False
    ns_ok = (
        _selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": ns})
        if "namespaceSelector" in peer
        else ns == policy_ns
    )
    return ns_ok and _selects(peer.get("podSelector", {}), pod)


def _port_matches(rule: dict, port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    return not ports or any(p["port"] == port and p.get("protocol", "TCP") == protocol for p in ports)


def _allowed(
    policies: list[dict],
    direction: str,
    ns: str,
    pod: dict,
    peer_ns: str,
    peer_pod: dict,
    ip: str | None,
    port: int,
    protocol: str,
) -> bool:
    """Kubernetes semantics: a pod selected by no policy of this direction is open; otherwise some rule must match."""
    kind = "Ingress" if direction == "ingress" else "Egress"
    key = "from" if direction == "ingress" else "to"
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == ns
        and kind in p["spec"]["policyTypes"]
        and _selects(p["spec"]["podSelector"], pod)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(direction, []):
            peers = rule.get(key)
            if (not peers or any(_peer_matches(p, ns, peer_ns, peer_pod, ip) for p in peers)) and _port_matches(
                rule, port, protocol
            ):
                return True
    return False


def _reach(bundle, src: tuple[str, dict], dst: tuple[str, dict] | str, port: int, protocol: str = "TCP") -> bool:
    policies = bundle.of_kind("NetworkPolicy")
    src_ns, src_pod = src
    if isinstance(dst, str):
        return _allowed(policies, "egress", src_ns, src_pod, "", {}, dst, port, protocol)
    dst_ns, dst_pod = dst
    out = _allowed(policies, "egress", src_ns, src_pod, dst_ns, dst_pod, None, port, protocol)
    return out and _allowed(policies, "ingress", dst_ns, dst_pod, src_ns, src_pod, None, port, protocol)


TRAINING = {"gpuplane.io/team": "x", "gpuplane.io/workload-class": "training"}
INFERENCE = {"gpuplane.io/workload-class": "inference", "app.kubernetes.io/name": "chat-assistant"}


def test_teams_reach_only_their_own_namespace_and_what_the_policy_allows():
    bundle = export_kubernetes(parse_policy(platform(tenancy=EGRESS)))
    recsys, llm = ("recsys", TRAINING), ("llm-research", TRAINING)
    assert _reach(bundle, recsys, ("recsys", TRAINING), 29500), "a gang's pods talk to each other"
    assert not _reach(bundle, recsys, llm, 29500), "no traffic between teams"
    assert not _reach(bundle, llm, ("search-serving", INFERENCE), 8000)
    gateway = ("gpuplane-gateway", {"app": "gateway"})
    assert _reach(bundle, gateway, ("search-serving", INFERENCE), 8000), "the gateway reaches the services"
    assert not _reach(bundle, gateway, ("search-serving", INFERENCE), 9999), "only on the services' ports"
    assert not _reach(bundle, gateway, recsys, 8000), "and only inference pods"
    prometheus = ("monitoring", {"app.kubernetes.io/name": "prometheus"})
    assert _reach(bundle, prometheus, recsys, 9400) and _reach(bundle, prometheus, ("search-serving", INFERENCE), 8000)
    dns = ("kube-system", {"k8s-app": "kube-dns"})
    assert _reach(bundle, recsys, dns, 53, "UDP") and not _reach(
        bundle, recsys, ("kube-system", {"app": "x"}), 53, "UDP"
    )
    assert _reach(bundle, recsys, "10.20.3.4", 443), "declared egress for recsys"
    assert not _reach(bundle, recsys, "10.20.3.4", 80) and not _reach(bundle, llm, "10.20.3.4", 443)
    assert not _reach(bundle, recsys, "8.8.8.8", 443), "nothing else leaves"
    assert _reach(bundle, llm, ("model-registry", {}), 5000), "a rule without teams applies to every team"
    off = export_kubernetes(parse_policy(platform(tenancy={"isolate": False})))
    assert not off.of_kind("NetworkPolicy") and _reach(off, recsys, llm, 29500)


def test_a_team_may_submit_and_read_in_its_namespace_only():
    policy = load_policy(PLATFORM)
    bundle = export_kubernetes(policy)
    for team in policy.teams:
        (role,) = [r for r in bundle.of_kind("Role") if r["metadata"]["namespace"] == team.name]
        verbs = {
            (g, res): set(rule["verbs"])
            for rule in role["rules"]
            for g in rule["apiGroups"]
            for res in rule["resources"]
        }
        assert "create" in verbs[("batch", "jobs")]
        assert verbs[("", "pods/log")] == {"get"} and "create" not in verbs[("", "pods")], "bare pods bypass Kueue"
        assert "create" not in verbs[("kueue.x-k8s.io", "localqueues")]
        assert verbs[("kueue.x-k8s.io", "workloads")] == {"get", "list", "watch"}
        assert not any("*" in v for v in verbs.values())
        (binding,) = [b for b in bundle.of_kind("RoleBinding") if b["metadata"]["namespace"] == team.name]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        }
        subjects = {(s["kind"], s["name"]) for s in binding["subjects"]}
        assert ("Group", f"gpuplane-team-{team.name}") in subjects
        assert ("ServiceAccount", "gpuplane-submitter") in subjects
    (admin,) = bundle.of_kind("ClusterRoleBinding")
    assert admin["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "gpuplane-admins"}]
    assert {b["roleRef"]["kind"] for b in bundle.of_kind("RoleBinding")} == {"Role"}, "teams get nothing cluster-wide"


def _admits(policy: dict, job: dict) -> bool:
    (validation,) = policy["spec"]["validations"]
    env = celpy.Environment()
    program = env.program(env.compile(validation["expression"]))
    namespace = {"metadata": {"name": job["metadata"]["namespace"]}}
    return bool(program.evaluate({"object": celpy.json_to_cel(job), "namespaceObject": celpy.json_to_cel(namespace)}))


def test_jobs_must_name_their_own_teams_local_queue():
    bundle = export_kubernetes(load_policy(PLATFORM))
    (policy,) = bundle.of_kind("ValidatingAdmissionPolicy")
    (binding,) = bundle.of_kind("ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] and binding["spec"]["validationActions"] == [
        "Deny"
    ]
    resources = {r for rule in policy["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]}
    assert {"jobs", "deployments"} <= resources
    (job,) = bundle.files()["examples/recsys-training-job.yaml"]
    assert _admits(policy, job)
    stolen = yaml.safe_load(yaml.safe_dump(job))
    stolen["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "llm-research"
    assert not _admits(policy, stolen), "recsys cannot submit to another team's queue"
    del stolen["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert not _admits(policy, stolen), "nor run a job outside Kueue"
    for deployment in bundle.of_kind("Deployment"):
        assert _admits(policy, deployment), deployment["metadata"]["name"]


@pytest.mark.parametrize(
    ("tenancy", "where", "fix"),
    [
        (
            {"egress": [{"name": "s3", "teams": ["recsis"], "cidrs": ["10.0.0.0/8"]}]},
            "tenancy.egress[0](s3).teams[0]",
            "recsys",
        ),
        ({"egress": [{"name": "s3", "cidrs": ["10.0.0.1/8"]}]}, "tenancy.egress[0](s3).cidrs[0]", "host bits zero"),
        ({"egress": [{"name": "s3", "ports": [443]}]}, "tenancy.egress[0](s3)", "list cidrs"),
        (
            {"egress": [{"name": "s3", "cidrs": ["10.0.0.0/8"], "ports": [70000]}]},
            "tenancy.egress[0](s3).ports[0]",
            "65535",
        ),
        ({"gateway": {"namespace": "Ingress_NGINX"}}, "tenancy.gateway.namespace", "lower-case"),
    ],
)
def test_tenancy_errors_name_the_field_its_line_and_the_fix(tenancy, where, fix):
    with pytest.raises(PolicyError) as err:
        parse_policy(platform(tenancy=tenancy), "platform.yaml")
    text = str(err.value)
    assert where in text and fix in text
    assert "platform.yaml:" in text.split(where)[0].splitlines()[-1], "the line of the field"
