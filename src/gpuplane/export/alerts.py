"""PrometheusRules: recording rules for pool, GPU and team cost, and the policy's alerts.

Sources are the metrics the Kubernetes GPU stack already exposes: Kueue (queues), kube-state-metrics
(nodes and pod requests; the node label gpuplane.io/pool must be in its --metric-labels-allowlist), the
DCGM exporter (GPU utilization), Karpenter or Cluster Autoscaler (provisioning), and the serving engine.
"""

from __future__ import annotations

from gpuplane.export.inference import ServingMetrics
from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import GPU, PolicyView, metadata, minutes

NODE_POOL = "gpuplane:node_pool:info"
NODE_PRICE = "gpuplane:node_price_per_hour"
NODE_GPU_PRICE = "gpuplane:node_gpu_price_per_hour"
POOL_UTIL = "gpuplane:pool_gpu_utilization:avg"
POOL_COST = "gpuplane:pool_cost_per_hour:sum"
TEAM_COST = "gpuplane:team_gpu_cost_per_hour:sum"
_POOL_OF_NODE = (
    'max by (node, pool) (label_replace(kube_node_labels{label_gpuplane_io_pool!=""}, '
    '"pool", "$1", "label_gpuplane_io_pool", "(.*)"))'
)


def recording_rules(view: PolicyView) -> list[Obj]:
    """Per-node pool and price, pool utilization and cost, and GPU cost per team namespace."""
    rules: list[Obj] = [{"record": NODE_POOL, "expr": _POOL_OF_NODE}]
    for pool in view.policy.pools:
        rules.append(
            {"record": NODE_PRICE, "expr": f'{NODE_POOL}{{pool="{pool.name}"}} * {pool.price_per_node_hour:g}'}
        )
        per_gpu = pool.price_per_node_hour / pool.gpus_per_node
        rules.append({"record": NODE_GPU_PRICE, "expr": f'{NODE_POOL}{{pool="{pool.name}"}} * {per_gpu:g}'})
    rules += [
        {
            "record": POOL_UTIL,
            "expr": 'avg by (pool) (label_replace(DCGM_FI_DEV_GPU_UTIL, "node", "$1", "Hostname", "(.*)") '
            f"* on (node) group_left (pool) {NODE_POOL}) / 100",
        },
        {"record": POOL_COST, "expr": f"sum by (pool) ({NODE_PRICE})"},
        {
            "record": TEAM_COST,
            "expr": 'sum by (namespace) (kube_pod_container_resource_requests{resource="nvidia_com_gpu"} '
            f"* on (node) group_left () {NODE_GPU_PRICE})",
        },
    ]
    return rules


def _alert(name: str, expr: str, for_minutes: float, severity: str, summary: str, description: str) -> Obj:
    return {
        "alert": name,
        "expr": expr,
        "for": minutes(for_minutes),
        "labels": {"severity": severity, "source": "gpuplane-policy"},
        "annotations": {"summary": summary, "description": description},
    }


def alert_rules(view: PolicyView, metrics: ServingMetrics, node_autoscaler: str) -> list[Obj]:
    """The alerts the policy asks for, with its thresholds."""
    alerts = view.policy.alerts
    out: list[Obj] = []
    if alerts.pending_jobs is not None:
        pending = alerts.pending_jobs
        out.append(
            _alert(
                "GpuplanePendingJobsHigh",
                f"sum by (cluster_queue) (kueue_pending_workloads) > {pending.above}",
                pending.for_minutes,
                pending.severity,
                "Many jobs waiting in {{ $labels.cluster_queue }}",
                f"More than {pending.above} workloads pending in team queue {{{{ $labels.cluster_queue }}}} for "
                f"{pending.for_minutes:g} minutes. Ask `gpuplane why` or `kubectl describe workload` for the reason.",
            )
        )
    if alerts.queue_wait is not None:
        wait = alerts.queue_wait
        out.append(
            _alert(
                "GpuplaneQueueWaitHigh",
                "histogram_quantile(0.95, sum by (cluster_queue, le) "
                f"(rate(kueue_admission_wait_time_seconds_bucket[30m]))) > {wait.p95_above_minutes * 60:g}",
                wait.for_minutes,
                wait.severity,
                "Long queue waits in {{ $labels.cluster_queue }}",
                f"p95 wait before admission above {wait.p95_above_minutes:g} minutes.",
            )
        )
    if alerts.quota_guarantee is not None:
        owed = alerts.quota_guarantee
        unused = (
            f'sum by (cluster_queue) (kueue_cluster_queue_nominal_quota{{resource="{GPU}"}}) - '
            f'sum by (cluster_queue) (kueue_cluster_queue_resource_usage{{resource="{GPU}"}})'
        )
        out.append(
            _alert(
                "GpuplaneQuotaGuaranteeMissed",
                f"({unused}) > 0 and on (cluster_queue) sum by (cluster_queue) (kueue_pending_workloads) > 0",
                owed.for_minutes,
                owed.severity,
                "{{ $labels.cluster_queue }} waits while part of its nominal GPU quota is unused",
                f"Team queue {{{{ $labels.cluster_queue }}}} has had pending workloads for {owed.for_minutes:g} "
                "minutes while it uses less than its nominal GPU quota: the quota is lent out and not reclaimed, "
                "or the pending work does not fit in the rest. Needs Kueue's metrics.enableClusterQueueResources.",
            )
        )
    if alerts.inference_slo is not None:
        slo = alerts.inference_slo
        for service in view.policy.services:
            ns = view.namespace(service.team)
            q = service.slo.quantile
            latency = (
                f"histogram_quantile({q:g}, sum by (le) (rate({metrics.latency_bucket}"
                f'{{namespace="{ns}",service="{service.name}"}}[5m])))'
            )
            out.append(
                _alert(
                    "GpuplaneInferenceSloBreach",
                    f"{latency} > {service.slo.latency_ms / 1000:g}",
                    slo.for_minutes,
                    slo.severity,
                    f"{service.name}: {service.slo.label} latency above its SLO",
                    f"{service.slo.label} latency of {ns}/{service.name} above {service.slo.latency_ms:g} ms.",
                )
            )
    if alerts.node_provisioning is not None:
        prov = alerts.node_provisioning
        expr = (
            'sum(increase(karpenter_cloudprovider_errors_total{method="Create"}[15m])) > 0'
            if node_autoscaler == "karpenter"
            else "sum(increase(cluster_autoscaler_failed_scale_ups_total[15m])) > 0"
        )
        out.append(
            _alert(
                "GpuplaneNodeProvisioningFailing",
                expr,
                prov.for_minutes,
                prov.severity,
                "GPU nodes fail to provision",
                f"The node autoscaler ({node_autoscaler}) has failed to create nodes for {prov.for_minutes:g} minutes "
                "(capacity, quota or spot availability).",
            )
        )
    if alerts.low_gpu_utilization is not None:
        low = alerts.low_gpu_utilization
        expr = f"{POOL_UTIL} < {low.below:g}"
        if low.min_cost_per_hour > 0:
            expr += f" and on (pool) {POOL_COST} > {low.min_cost_per_hour:g}"
        out.append(
            _alert(
                "GpuplaneLowGpuUtilization",
                expr,
                low.for_minutes,
                low.severity,
                "Pool {{ $labels.pool }} is paid for but idle",
                f"GPU utilization below {low.below:.0%} for {low.for_minutes:g} minutes"
                + (f" while the pool costs more than {low.min_cost_per_hour:g}/h." if low.min_cost_per_hour else "."),
            )
        )
    return out


def emit_rules(view: PolicyView, bundle: ExportBundle, metrics: ServingMetrics, node_autoscaler: str) -> None:
    """One PrometheusRule with the recording group and the alert group."""
    groups: list[Obj] = [{"name": "gpuplane.recording", "interval": "1m", "rules": recording_rules(view)}]
    alerts = alert_rules(view, metrics, node_autoscaler)
    if alerts:
        groups.append({"name": "gpuplane.alerts", "rules": alerts})
    bundle.add(
        "prometheus-rules.yaml",
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": metadata("gpuplane", "monitoring"),
            "spec": {"groups": groups},
        },
    )
