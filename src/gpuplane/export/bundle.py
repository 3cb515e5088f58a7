"""`export_kubernetes`: the whole policy compiled to the Kubernetes stack, in apply order, with warnings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from gpuplane.export.accounting_rules import add_accounting_rules
from gpuplane.export.alerts import emit_rules
from gpuplane.export.core import emit_core, kueue_configuration
from gpuplane.export.gpu_operator import DEFAULT_SHARE_REPLICAS, emit_gpu_operator
from gpuplane.export.grafana import dashboard
from gpuplane.export.inference import SERVING_METRICS, emit_hpa, emit_keda
from gpuplane.export.kueue import emit_kueue
from gpuplane.export.kueue_admission import autoscaled_flavors, karpenter_admission_warning
from gpuplane.export.model import ExportBundle
from gpuplane.export.nodes import NodeClass, emit_cluster_autoscaler, emit_karpenter
from gpuplane.export.placeholders import emit_placeholders
from gpuplane.export.tenancy import emit_tenancy
from gpuplane.export.view import PolicyView, metadata
from gpuplane.export.workloads import emit_examples, emit_services
from gpuplane.policy.schema import PolicySpec

DASHBOARD_FILE = "grafana/gpuplane-dashboard.json"
KUEUE_CONFIG_FILE = "kueue-config-snippet.yaml"


@dataclass(frozen=True)
class ExportOptions:
    """Which tools of the stack to target and where they are."""

    node_autoscaler: Literal["karpenter", "cluster-autoscaler"] = "karpenter"
    inference_autoscaler: Literal["keda", "hpa"] = "keda"
    serving_metrics: Literal["vllm", "tgi"] = "vllm"
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    node_class: NodeClass = field(default_factory=NodeClass)
    karpenter_min_nodes: Literal["static", "placeholder"] = "static"
    gpu_share_replicas: int = DEFAULT_SHARE_REPLICAS


def export_kubernetes(policy: PolicySpec, options: ExportOptions | None = None) -> ExportBundle:
    """Compile a validated policy to Kubernetes manifests; features the stack cannot express become warnings.

    Raises ExportError when the policy cannot be exported at all (team names that are not namespace names).
    """
    options = options or ExportOptions()
    view = PolicyView(policy)
    metrics = SERVING_METRICS[options.serving_metrics]
    bundle = ExportBundle()
    emit_core(view, bundle)
    emit_tenancy(view, bundle)
    emit_kueue(view, bundle, provisioning=options.node_autoscaler == "cluster-autoscaler")
    bundle.add(KUEUE_CONFIG_FILE, kueue_configuration(view))
    emit_gpu_operator(view, bundle, options.gpu_share_replicas)
    if options.node_autoscaler == "karpenter":
        static = options.karpenter_min_nodes == "static"
        emit_karpenter(view, bundle, options.node_class, static_min_nodes=static)
        if not static:
            emit_placeholders(view, bundle)
        if autoscaled_flavors(view):
            karpenter_admission_warning(bundle)
    else:
        emit_cluster_autoscaler(view, bundle, options.gpu_share_replicas)
    emit_services(view, bundle)
    if options.inference_autoscaler == "keda":
        emit_keda(view, bundle, metrics, options.prometheus_url)
    else:
        emit_hpa(view, bundle, metrics)
    emit_rules(view, bundle, metrics, options.node_autoscaler)
    add_accounting_rules(view, bundle, options.serving_metrics)
    board = dashboard(view, metrics, options.node_autoscaler)
    bundle.add(DASHBOARD_FILE, board)
    bundle.add(
        "grafana/dashboard-configmap.yaml",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata("gpuplane-dashboard", "monitoring", grafana_dashboard="1"),
            "data": {"gpuplane-dashboard.json": json.dumps(board, indent=1)},
        },
    )
    emit_examples(view, bundle)
    return bundle
