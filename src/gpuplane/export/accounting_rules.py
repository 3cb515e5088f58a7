"""Recording rules and the failure-rate alert for cost per run and per request, and job outcomes, on the
metrics a Kubernetes GPU stack already exposes.

Sources: kube-state-metrics (a Job's Complete/Failed conditions and failure reasons, pod owners, pod GPU
requests, the pod label ``gpuplane.io/workload-class`` when it is in ``--metric-labels-allowlist``), Kueue
(evictions by reason), the serving engine (requests and tokens) and the node GPU price recorded in
``alerts.py``. The same quantities as the simulator's and the live plane's accounting: a run's cost is its
GPUs' pool price over the time it held them, a service's cost per 1,000 requests and per million tokens
(prompt and generated) is its replicas' GPU cost spread over what it served.

A Job "finished in a window" is one whose Complete or Failed condition is true now and was not at the start
of the window, so a Job deleted (``ttlSecondsAfterFinished``) sooner than the window is not counted; keep it
longer than the baseline window (a day) for the failure rates to be complete.
"""

from __future__ import annotations

from gpuplane.export.alerts import NODE_GPU_PRICE
from gpuplane.export.inference import SERVING_METRICS, ServingMetrics
from gpuplane.export.model import ExportBundle, Obj
from gpuplane.export.view import PolicyView, minutes

RECORD_INTERVAL_S = 60
"""Interval of the group that records per-run cost: each sample of a $/h series stands for this long."""
SUM_INTERVAL_S = 900
"""Interval of the group that sums runs' cost over their life (a week of samples per Job is heavy)."""
RUN_LOOKBACK = "7d"
"""How far back a run's cost is summed: runs longer than this are charged for their last week only."""

RUN_COST_RATE = "gpuplane:job_gpu_cost_per_hour:sum"
JOB_CLASS = "gpuplane:job_workload_class:info"
RUN_COST = "gpuplane:job_cost_dollars:7d"
JOBS_FINISHED = "gpuplane:jobs_finished"
FAILURE_RATE = "gpuplane:job_failure_rate"
RUNS_PREEMPTED = "gpuplane:runs_preempted:1h"
FAILURE_REASONS = "gpuplane:job_failures_by_reason"
TEAM_COST_PER_RUN = "gpuplane:team_cost_per_finished_job:1d"
SERVICE_COST = "gpuplane:service_cost_per_hour:sum"
SERVICE_COST_PER_1K = "gpuplane:service_cost_per_1k_requests:5m"
SERVICE_COST_PER_MTOK = "gpuplane:service_cost_per_million_tokens:5m"

TOKEN_COUNTERS: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"),
    "tgi": ("tgi_request_input_length_sum", "tgi_request_generated_tokens_sum"),
}
"""Each engine's counters of prompt and generated tokens (TGI's are histogram sums)."""

_GPU_REQUESTS = 'kube_pod_container_resource_requests{resource="nvidia_com_gpu"}'
_RUNNING = '(kube_pod_status_phase{phase="Running"} == 1)'
_JOB_OF_POD = 'label_replace(kube_pod_owner{owner_kind="Job"}, "job_name", "$1", "owner_name", "(.*)")'
_CONDITION = {"succeeded": "kube_job_complete", "failed": "kube_job_failed"}
_WINDOWS = ("1h", "1d")


def _job_pods(series: str) -> str:
    """Jobs' pods among ``series`` (a per-pod 0/1 gauge), counted per namespace."""
    return f"count by (namespace) (({series} == 1) * on (namespace, pod) group_left () {_JOB_OF_POD})"


_FAILURE_REASON_SOURCES = {
    "exit_code": 'sum by (namespace) (kube_job_status_failed{reason="BackoffLimitExceeded"})',
    "timeout": 'sum by (namespace) (kube_job_status_failed{reason="DeadlineExceeded"})',
    "oom": _job_pods('kube_pod_container_status_last_terminated_reason{reason="OOMKilled"}'),
    "node_lost": _job_pods('kube_pod_status_reason{reason="NodeLost"}'),
}
"""kube-state-metrics' view of the failure reasons of ``model.outcome`` (exit code: the Job's backoff limit
was exceeded; timeout: its activeDeadlineSeconds; OOM and node lost from its pods)."""


def finished_jobs(outcome: str, window: str) -> str:
    """Jobs whose Complete (succeeded) or Failed condition became true within ``window``, one series each."""
    metric = _CONDITION[outcome]
    return (
        f'(({metric}{{condition="true"}} == 1) unless on (namespace, job_name) '
        f'({metric}{{condition="true"}} offset {window} == 1))'
    )


def _by_class(series: str) -> str:
    """``series`` (one per Job) with the Job's workload class when known, else without one."""
    with_class = f"{series} * on (namespace, job_name) group_left (workload_class) {JOB_CLASS}"
    return f"({with_class} or on (namespace, job_name) {series})"


def _finished(window: str) -> str:
    return f"{JOBS_FINISHED}:{window}"


def run_rules() -> list[Obj]:
    """Per-run GPU cost rate and workload class: the 1-minute group the run totals are summed from."""
    per_gpu = f"* on (node) group_left () {NODE_GPU_PRICE}"
    return [
        {
            "record": RUN_COST_RATE,
            "expr": f"sum by (namespace, job_name) ({_GPU_REQUESTS} {per_gpu} * on (namespace, pod) group_left () "
            f"{_RUNNING} * on (namespace, pod) group_left (job_name) {_JOB_OF_POD})",
        },
        {
            "record": JOB_CLASS,
            "expr": "max by (namespace, job_name, workload_class) (label_replace("
            f"{_JOB_OF_POD} * on (namespace, pod) group_left (label_gpuplane_io_workload_class) kube_pod_labels, "
            '"workload_class", "$1", "label_gpuplane_io_workload_class", "(.+)"))',
        },
    ]


def outcome_rules() -> list[Obj]:
    """Jobs finished per team, class and outcome over the last hour and day, the failure rate, preempted runs
    and failure reasons."""
    rules: list[Obj] = []
    for window in _WINDOWS:
        for outcome in _CONDITION:
            rules.append(
                {
                    "record": _finished(window),
                    "expr": f"count by (namespace, workload_class) ({_by_class(finished_jobs(outcome, window))})",
                    "labels": {"outcome": outcome},
                }
            )
        total = f"sum by (namespace, workload_class) ({_finished(window)})"
        failed = f'sum by (namespace, workload_class) ({_finished(window)}{{outcome="failed"}})'
        rules.append({"record": f"{FAILURE_RATE}:{window}", "expr": f"({failed} or {total} * 0) / {total}"})
    rules.append(
        {
            "record": RUNS_PREEMPTED,
            "expr": 'sum by (cluster_queue) (increase(kueue_evicted_workloads_total{reason="Preempted"}[1h]))',
        }
    )
    for reason, expr in _FAILURE_REASON_SOURCES.items():
        rules.append({"record": FAILURE_REASONS, "expr": expr, "labels": {"failure_reason": reason}})
    return rules


def run_total_rules() -> list[Obj]:
    """A run's cost over its life (its cost rate summed over the samples of the last week) and a team's mean
    cost per run that finished in the last day."""
    samples_per_hour = 3600 / RECORD_INTERVAL_S
    finished_1d = f"({finished_jobs('succeeded', '1d')} or {finished_jobs('failed', '1d')})"
    return [
        {
            "record": RUN_COST,
            "expr": f"sum_over_time({RUN_COST_RATE}[{RUN_LOOKBACK}]) / {samples_per_hour:g}",
        },
        {
            "record": TEAM_COST_PER_RUN,
            "expr": f"sum by (namespace) ({RUN_COST} and on (namespace, job_name) {finished_1d}) "
            f"/ count by (namespace) ({finished_1d})",
        },
    ]


def service_cost_rules(view: PolicyView, engine: str) -> list[Obj]:
    """Each service's GPU cost per hour (its running replicas at their nodes' GPU price), per 1,000 requests
    and per million tokens over the last 5 minutes."""
    rules: list[Obj] = []
    metrics: ServingMetrics = SERVING_METRICS[engine]
    prompt, generated = TOKEN_COUNTERS[engine]
    for service in view.policy.services:
        ns = view.namespace(service.team)
        sel = f'namespace="{ns}",service="{service.name}"'
        pods = f'namespace="{ns}",pod=~"{service.name}-.*"'
        labels = {"namespace": ns, "service": service.name}
        rules.append(
            {
                "record": SERVICE_COST,
                "expr": f'sum(kube_pod_container_resource_requests{{resource="nvidia_com_gpu",{pods}}} '
                f"* on (node) group_left () {NODE_GPU_PRICE} * on (namespace, pod) group_left () {_RUNNING})",
                "labels": labels,
            }
        )
        cost = f"sum({SERVICE_COST}{{{sel}}})"
        requests = f"sum(rate({metrics.requests_total}{{{sel}}}[5m]))"
        tokens = f"(sum(rate({prompt}{{{sel}}}[5m])) + sum(rate({generated}{{{sel}}}[5m])))"
        rules.append({"record": SERVICE_COST_PER_1K, "expr": f"{cost} / ({requests} * 3600) * 1000", "labels": labels})
        rules.append(
            {"record": SERVICE_COST_PER_MTOK, "expr": f"{cost} / ({tokens} * 3600) * 1000000", "labels": labels}
        )
    return rules


def failure_rate_alert(view: PolicyView) -> list[Obj]:
    """The failure-rate spike alert: a team's (and class's) share of failed jobs over the last hour above
    both a floor and a multiple of its own rate over the last day, with enough finished jobs to mean it."""
    spec = view.policy.alerts.failure_rate
    if spec is None:
        return []
    recent, baseline = f"{FAILURE_RATE}:1h", f"{FAILURE_RATE}:1d"
    count = f"sum by (namespace, workload_class) ({_finished('1h')})"
    expr = (
        f"{recent} > {spec.min_rate:g} and {recent} > {spec.above_baseline:g} * {baseline} "
        f"and {count} >= {spec.min_finished}"
    )
    return [
        {
            "alert": "GpuplaneJobFailureRateSpike",
            "expr": expr,
            "for": minutes(spec.for_minutes),
            "labels": {"severity": spec.severity, "source": "gpuplane-policy"},
            "annotations": {
                "summary": "Jobs of {{ $labels.namespace }} ({{ $labels.workload_class }}) fail far more than usual",
                "description": (
                    "{{ $value | humanizePercentage }} of the jobs that finished in the last hour failed, above "
                    f"{spec.min_rate:.0%} and {spec.above_baseline:g} times the team's rate over the last day. "
                    f"See {FAILURE_REASONS} for exit code, OOM, node lost and timeout."
                ),
            },
        }
    ]


def accounting_groups(view: PolicyView, engine: str) -> list[Obj]:
    """The rule groups for the exported PrometheusRule: run cost rates every minute, run totals, outcomes
    and service unit costs, and the failure-rate alert when the policy keeps it on."""
    groups: list[Obj] = [
        {"name": "gpuplane.runs", "interval": f"{RECORD_INTERVAL_S}s", "rules": run_rules()},
        {"name": "gpuplane.outcomes", "interval": "1m", "rules": outcome_rules()},
        {"name": "gpuplane.run-totals", "interval": f"{SUM_INTERVAL_S}s", "rules": run_total_rules()},
    ]
    services = service_cost_rules(view, engine)
    if services:
        groups.append({"name": "gpuplane.service-costs", "interval": "1m", "rules": services})
    alerts = failure_rate_alert(view)
    if alerts:
        groups.append({"name": "gpuplane.outcome-alerts", "rules": alerts})
    return groups


def add_accounting_rules(view: PolicyView, bundle: ExportBundle, engine: str) -> None:
    """Append the accounting groups to the bundle's PrometheusRule (one rule object for the whole policy)."""
    (rule,) = bundle.of_kind("PrometheusRule")
    rule["spec"]["groups"].extend(accounting_groups(view, engine))
