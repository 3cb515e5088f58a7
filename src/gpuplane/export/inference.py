"""Replica autoscaling for inference services: KEDA ScaledObjects, or HPA v2 with prometheus-adapter rules.

Each service's signals become Prometheus queries over the serving engine's metrics (vLLM or TGI names) and
the DCGM exporter's GPU metrics; HPA takes the largest desired count across them, as gpuplane does. Windows
and rate limits map to HPA behavior; panic mode and predictive scale-ahead have no equivalent.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import PolicyView, metadata
from gpuplane.policy.schema_serving import ScalingRulesSpec, ServiceSpec

KEDA_API = "keda.sh/v1alpha1"
HPA_DEFAULT_TOLERANCE = 0.1


@dataclass(frozen=True)
class ServingMetrics:
    """Metric names of one serving engine: a request counter, a waiting-requests gauge, a latency histogram."""

    requests_total: str
    waiting: str
    latency_bucket: str


SERVING_METRICS = {
    "vllm": ServingMetrics(
        "vllm:request_success_total", "vllm:num_requests_waiting", "vllm:e2e_request_latency_seconds_bucket"
    ),
    "tgi": ServingMetrics("tgi_request_count", "tgi_queue_size", "tgi_request_duration_bucket"),
}


@dataclass(frozen=True)
class Signal:
    """One scaling signal: its name, PromQL, the HPA target type and the target value."""

    name: str
    series: str
    query: str
    metric_type: str
    target: float


def service_signals(view: PolicyView, service: ServiceSpec, metrics: ServingMetrics) -> list[Signal]:
    """The PromQL signals a service scales on, from its autoscaling targets and SLO."""
    ns = view.namespace(service.team)
    sel = f'namespace="{ns}",service="{service.name}"'
    pods = f'namespace="{ns}",pod=~"{service.name}-.*"'
    spec = service.autoscaling
    out: list[Signal] = []
    if spec.target_rps_per_replica is not None:
        out.append(
            Signal(
                "rps",
                metrics.requests_total,
                f"sum(rate({metrics.requests_total}{{{sel}}}[1m]))",
                "AverageValue",
                spec.target_rps_per_replica,
            )
        )
    if spec.target_queue_depth_per_replica is not None:
        out.append(
            Signal(
                "queue",
                metrics.waiting,
                f"sum({metrics.waiting}{{{sel}}})",
                "AverageValue",
                spec.target_queue_depth_per_replica,
            )
        )
    if spec.scale_on_latency:
        quantile = service.slo.quantile
        out.append(
            Signal(
                "latency",
                metrics.latency_bucket,
                f"histogram_quantile({quantile:g}, sum by (le) (rate({metrics.latency_bucket}{{{sel}}}[2m])))",
                "Value",
                service.slo.latency_ms / 1000,
            )
        )
    if spec.target_gpu_utilization is not None:
        out.append(
            Signal(
                "gpu-util",
                "DCGM_FI_DEV_GPU_UTIL",
                f"avg(DCGM_FI_DEV_GPU_UTIL{{{pods}}})",
                "Value",
                spec.target_gpu_utilization * 100,
            )
        )
    if spec.min_gpu_memory_headroom is not None:
        used = f"DCGM_FI_DEV_FB_USED{{{pods}}}"
        free = f"DCGM_FI_DEV_FB_FREE{{{pods}}}"
        out.append(
            Signal(
                "gpu-memory",
                "DCGM_FI_DEV_FB_USED",
                f"avg({used} / ({used} + {free}))",
                "Value",
                1 - spec.min_gpu_memory_headroom,
            )
        )
    return out


def _rules(rules: ScalingRulesSpec, tolerance: float) -> Obj:
    policies: list[Obj] = []
    if rules.max_percent_per_period is not None:
        policies.append(
            {"type": "Percent", "value": rules.max_percent_per_period, "periodSeconds": int(rules.period_s)}
        )
    if rules.max_replicas_per_period is not None:
        policies.append({"type": "Pods", "value": rules.max_replicas_per_period, "periodSeconds": int(rules.period_s)})
    out: Obj = {"stabilizationWindowSeconds": int(rules.stabilization_s)}
    if policies:
        out["policies"] = policies
        out["selectPolicy"] = "Max"
    effective = tolerance if rules.tolerance is None else rules.tolerance
    if effective != HPA_DEFAULT_TOLERANCE:
        out["tolerance"] = f"{effective:g}"
    return out


def _behavior(service: ServiceSpec) -> Obj:
    spec = service.autoscaling
    return {"scaleUp": _rules(spec.scale_up, spec.tolerance), "scaleDown": _rules(spec.scale_down, spec.tolerance)}


def _fmt(value: float) -> str:
    return f"{value:g}"


def emit_keda(view: PolicyView, bundle: ExportBundle, metrics: ServingMetrics, prometheus_url: str) -> None:
    """A KEDA ScaledObject per service with one Prometheus trigger per signal."""
    for service in view.policy.services:
        spec = service.autoscaling
        triggers = [
            {
                "type": "prometheus",
                "name": signal.name,
                "metricType": signal.metric_type,
                "metadata": {"serverAddress": prometheus_url, "query": signal.query, "threshold": _fmt(signal.target)},
            }
            for signal in service_signals(view, service, metrics)
        ]
        body: Obj = {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": service.name},
            "pollingInterval": int(spec.metrics_interval_s),
            "minReplicaCount": spec.min_replicas,
            "maxReplicaCount": spec.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(service)}},
            "triggers": triggers,
        }
        if spec.scale_to_zero:
            body["idleReplicaCount"] = 0
            body["cooldownPeriod"] = int(spec.idle_before_zero_s)
        bundle.add(
            "inference-autoscaling.yaml",
            {
                "apiVersion": KEDA_API,
                "kind": "ScaledObject",
                "metadata": metadata(service.name, view.namespace(service.team)),
                "spec": body,
            },
        )
        _warnings(bundle, service, hpa=False)


def emit_hpa(view: PolicyView, bundle: ExportBundle, metrics: ServingMetrics) -> None:
    """An autoscaling/v2 HPA per service on External metrics, and the prometheus-adapter rules that serve them."""
    rules: list[Obj] = []
    for service in view.policy.services:
        spec = service.autoscaling
        ns = view.namespace(service.team)
        hpa_metrics: list[Obj] = []
        for signal in service_signals(view, service, metrics):
            metric_name = f"gpuplane_{service.name.replace('-', '_').replace('.', '_')}_{signal.name.replace('-', '_')}"
            target: Obj = (
                {"type": "AverageValue", "averageValue": _fmt(signal.target)}
                if signal.metric_type == "AverageValue"
                else {"type": "Value", "value": _fmt(signal.target)}
            )
            hpa_metrics.append({"type": "External", "external": {"metric": {"name": metric_name}, "target": target}})
            rules.append(
                {
                    "seriesQuery": f'{signal.series}{{namespace="{ns}"}}',
                    "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
                    "name": {"as": metric_name},
                    "metricsQuery": signal.query,
                }
            )
        bundle.add(
            "inference-autoscaling.yaml",
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": metadata(service.name, ns),
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": service.name},
                    "minReplicas": spec.min_replicas,
                    "maxReplicas": spec.max_replicas,
                    "metrics": hpa_metrics,
                    "behavior": _behavior(service),
                },
            },
        )
        _warnings(bundle, service, hpa=True)
    bundle.add(
        "inference-autoscaling.yaml",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata("gpuplane-adapter-rules", "monitoring"),
            "data": {"config.yaml": yaml.safe_dump({"externalRules": rules}, sort_keys=False)},
        },
    )


def _warnings(bundle: ExportBundle, service: ServiceSpec, hpa: bool) -> None:
    spec = service.autoscaling
    field = f"services[{service.name}].autoscaling"
    bundle.warn(
        f"{field}.panic_window_s",
        "panic mode",
        "HPA has one evaluation window; a burst is followed at the scale-up rate limits, not doubled within "
        f"{spec.panic_window_s:g} s as gpuplane (and Knative) do",
        "dropped",
    )
    if spec.predictive:
        bundle.warn(
            f"{field}.predictive",
            "predictive scale-ahead",
            "HPA and KEDA scale on current metrics only; replicas are not started ahead of the daily peak",
            "dropped",
        )
    tolerances = {spec.tolerance, spec.scale_up.tolerance, spec.scale_down.tolerance} - {None}
    if tolerances != {HPA_DEFAULT_TOLERANCE}:
        bundle.warn(
            f"{field}.tolerance",
            "a per-service tolerance",
            "written as behavior.*.tolerance, which needs Kubernetes' HPAConfigurableTolerance feature gate",
            "approximated",
        )
    if spec.scale_to_zero and hpa:
        bundle.warn(
            f"{field}.scale_to_zero",
            "scale to zero",
            "a plain HPA keeps at least one replica (HPAScaleToZero is an alpha gate); use the KEDA export",
            "dropped",
        )
    bundle.warn(
        f"services[{service.name}].replica_startup_s",
        "the replica startup time",
        f"the Deployment's startupProbe allows {service.replica_startup_s:g} s for the model to load, but HPA "
        "does not count starting replicas as capacity ahead of time as gpuplane's autoscaler does",
        "approximated",
    )
