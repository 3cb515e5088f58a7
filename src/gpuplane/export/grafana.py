"""A Grafana dashboard for the exported stack: GPU utilization, allocation, pending work, queue wait, node
startup, preemptions and cost per team, on DCGM exporter, kube-state-metrics, Kueue and Karpenter metrics."""

from __future__ import annotations

from gpuplane.export.accounting_panels import accounting_panels
from gpuplane.export.alerts import NODE_POOL, POOL_COST, POOL_UTIL, TEAM_COST
from gpuplane.export.inference import ServingMetrics
from gpuplane.export.model import Obj
from gpuplane.export.view import PolicyView

_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _panel(panel_id: int, title: str, unit: str, targets: list[tuple[str, str]], description: str = "") -> Obj:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": _DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": 12 * ((panel_id - 1) % 2), "y": 8 * ((panel_id - 1) // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": _DATASOURCE, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard(view: PolicyView, metrics: ServingMetrics, node_autoscaler: str) -> Obj:
    """The dashboard JSON model (import it in Grafana, or load it from a ConfigMap with the sidecar)."""
    gpu_by_pool = f"* on (node) group_left (pool) {NODE_POOL}"
    if node_autoscaler == "karpenter":
        startup: list[tuple[str, str]] = [
            (
                'max by (quantile) (karpenter_pods_startup_duration_seconds{quantile=~"0.5|0.9"})',
                "pod start p{{quantile}}",
            ),
            ("sum by (nodepool) (increase(karpenter_nodeclaims_created_total[1h]))", "nodes created/h {{nodepool}}"),
        ]
    else:
        startup = [("sum(increase(cluster_autoscaler_scaled_up_nodes_total[1h]))", "nodes added/h")]
    panels = [
        _panel(1, "GPU utilization by pool", "percentunit", [(POOL_UTIL, "{{pool}}")], "DCGM_FI_DEV_GPU_UTIL per pool"),
        _panel(
            2,
            "GPUs allocated / allocatable by pool",
            "short",
            [
                (
                    f'sum by (pool) (kube_pod_container_resource_requests{{resource="nvidia_com_gpu"}} {gpu_by_pool})',
                    "allocated {{pool}}",
                ),
                (
                    f'sum by (pool) (kube_node_status_allocatable{{resource="nvidia_com_gpu"}} {gpu_by_pool})',
                    "allocatable {{pool}}",
                ),
            ],
        ),
        _panel(
            3,
            "Pending work",
            "short",
            [
                ("sum by (cluster_queue) (kueue_pending_workloads)", "workloads {{cluster_queue}}"),
                (
                    'sum by (namespace) (kube_pod_container_resource_requests{resource="nvidia_com_gpu"} '
                    '* on (namespace, pod) group_left () (kube_pod_status_phase{phase="Pending"} == 1))',
                    "GPUs in pending pods {{namespace}}",
                ),
            ],
            "Kueue workloads waiting for admission, and GPUs requested by admitted pods still waiting for a node",
        ),
        _panel(
            4,
            "Queue wait before admission",
            "s",
            [
                (
                    f"histogram_quantile({q}, sum by (cluster_queue, le) "
                    "(rate(kueue_admission_wait_time_seconds_bucket[30m])))",
                    f"p{int(float(q) * 100)} {{{{cluster_queue}}}}",
                )
                for q in ("0.5", "0.95")
            ],
        ),
        _panel(5, "Node startup and scale-up", "s", startup),
        _panel(
            6,
            "Preemptions and evictions per hour",
            "short",
            [
                (
                    "sum by (preempting_cluster_queue, reason) (increase(kueue_preempted_workloads_total[1h]))",
                    "preempted by {{preempting_cluster_queue}} ({{reason}})",
                ),
                (
                    "sum by (cluster_queue, reason) (increase(kueue_evicted_workloads_total[1h]))",
                    "evicted from {{cluster_queue}} ({{reason}})",
                ),
            ],
        ),
        _panel(7, "GPU cost per team (per hour)", "currencyUSD", [(TEAM_COST, "{{namespace}}")]),
        _panel(8, "Pool cost (per hour)", "currencyUSD", [(POOL_COST, "{{pool}}")]),
    ]
    if view.policy.services:
        panels.append(
            _panel(
                9,
                "Inference requests/s and waiting requests",
                "short",
                [
                    (f"sum by (namespace, service) (rate({metrics.requests_total}[1m]))", "req/s {{service}}"),
                    (f"sum by (namespace, service) ({metrics.waiting})", "waiting {{service}}"),
                ],
            )
        )
    for title, unit, targets, description in accounting_panels(view):
        panels.append(_panel(len(panels) + 1, title, unit, targets, description))
    return {
        "title": f"gpuplane - {view.policy.name}",
        "uid": f"gpuplane-{view.policy.name}"[:40],
        "tags": ["gpuplane", "gpu"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "1m",
        "time": {"from": "now-24h", "to": "now"},
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]
        },
        "panels": panels,
    }
