"""`export_volcano`: the policy compiled to Volcano (Queues, PriorityClasses, the scheduler configuration and
example gang jobs), with a warning for every field Volcano cannot express exactly."""

from __future__ import annotations

from gpuplane.export.core import emit_priority_classes
from gpuplane.export.model import ExportBundle
from gpuplane.export.view import TEAM_LABEL, PolicyView, metadata
from gpuplane.export.volcano.jobs import emit_example_jobs
from gpuplane.export.volcano.limits import volcano_warnings
from gpuplane.export.volcano.queues import emit_queues
from gpuplane.export.volcano.scheduler_config import scheduler_configmap
from gpuplane.policy.schema import PolicySpec

__all__ = ["export_volcano"]


def export_volcano(policy: PolicySpec) -> ExportBundle:
    """Compile a validated policy to Volcano objects in apply order.

    Raises ExportError when the policy cannot be exported (team names that are not namespace names, a cohort
    named like a team or a built-in queue).
    """
    view = PolicyView(policy)
    bundle = ExportBundle()
    for team in policy.teams:
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": metadata(team.name, **{TEAM_LABEL: team.name}),
        }
        bundle.add("namespaces.yaml", namespace)
    emit_priority_classes(view, bundle, note="Volcano")
    emit_queues(view, bundle)
    bundle.add("volcano-scheduler.yaml", scheduler_configmap(view))
    emit_example_jobs(view, bundle)
    volcano_warnings(view, bundle)
    return bundle
