"""Kubernetes core objects: team Namespaces, PriorityClasses, ResourceQuotas, and Kueue's own settings."""

from __future__ import annotations

from gpuplane.export.kueue_quota import quota_hard, resource_transformations
from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import TEAM_LABEL, PolicyView, metadata

MAX_USER_PRIORITY = 1_000_000_000


def emit_core(view: PolicyView, bundle: ExportBundle) -> None:
    """Namespaces and ResourceQuotas per team, PriorityClasses per tier."""
    _namespaces_and_quotas(view, bundle)
    emit_priority_classes(view, bundle)


def _namespaces_and_quotas(view: PolicyView, bundle: ExportBundle) -> None:
    for team in view.policy.teams:
        ns = view.namespace(team.name)
        bundle.add(
            "namespaces.yaml",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata(ns, **{TEAM_LABEL: team.name})},
        )
        bundle.add(
            "namespaces.yaml",
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": metadata("gpuplane-gpus", ns, **{TEAM_LABEL: team.name}),
                "spec": {"hard": quota_hard(view, team)},
            },
        )


def emit_priority_classes(view: PolicyView, bundle: ExportBundle, note: str = "Kueue") -> None:
    """A PriorityClass per tier (the policy's default tier is the global default); ``note`` names the
    queueing system that decides queue-level preemption with it."""
    default = view.policy.default_priority
    for tier in view.policy.priorities:
        if abs(tier.value) > MAX_USER_PRIORITY:
            bundle.warn(
                f"priorities[{tier.name}].value",
                "priority values above one billion",
                "Kubernetes reserves them for system PriorityClasses; the value is clamped",
                "approximated",
            )
        body: Obj = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": metadata(tier.name),
            "value": max(-MAX_USER_PRIORITY, min(MAX_USER_PRIORITY, tier.value)),
            "globalDefault": tier.name == default,
            "preemptionPolicy": "PreemptLowerPriority" if tier.may_preempt else "Never",
            "description": f"gpuplane tier '{tier.name}'; "
            + (
                "Kueue decides queue-level preemption with the WorkloadPriorityClass of the same name"
                if note == "Kueue"
                else f"{note} orders and preempts jobs by it"
            ),
        }
        bundle.add("priorityclasses.yaml", body)


def kueue_configuration(view: PolicyView) -> Obj:
    """The parts of Kueue's manager Configuration the policy depends on (merged into the installed config)."""
    scheduling = view.policy.scheduling
    config: Obj = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "waitForPodsReady": {
            "enable": True,
            "timeout": "10m",
            "blockAdmission": True,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60},
        },
        "metrics": {"enableClusterQueueResources": True},
        "integrations": {"frameworks": ["batch/job", "pod", "deployment", "kubeflow.org/pytorchjob", "ray.io/rayjob"]},
    }
    transformations = resource_transformations(view)
    if transformations:
        config["resources"] = {"transformations": transformations}
    if scheduling.fair_sharing:
        config["fairSharing"] = {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
    return config
