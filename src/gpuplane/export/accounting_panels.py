"""Dashboard panels for cost per run and per request and for job outcomes, on the accounting recording
rules (``accounting_rules``): what a finished run costs per team, the costliest runs, each service's cost
per 1,000 requests and per million tokens, jobs finished by outcome, failure rates against their own
baseline, preempted runs and failure reasons."""

from __future__ import annotations

from gpuplane.export.accounting_rules import (
    FAILURE_RATE,
    FAILURE_REASONS,
    JOBS_FINISHED,
    RUN_COST,
    RUNS_PREEMPTED,
    SERVICE_COST_PER_1K,
    SERVICE_COST_PER_MTOK,
    TEAM_COST_PER_RUN,
)
from gpuplane.export.view import PolicyView

PanelSpec = tuple[str, str, list[tuple[str, str]], str]
"""A panel's title, unit, (PromQL, legend) targets and description."""


def accounting_panels(view: PolicyView) -> list[PanelSpec]:
    """The cost and outcome panels; the per-request ones only when the policy has services."""
    panels: list[PanelSpec] = [
        (
            "Cost per finished run by team (runs finished in the last day)",
            "currencyUSD",
            [(TEAM_COST_PER_RUN, "{{namespace}}")],
            "A run's GPUs at its pool's price over the time it held them; runs longer than a week are charged "
            "for their last week",
        ),
        (
            "Costliest runs of the last week",
            "currencyUSD",
            [(f"topk(10, {RUN_COST})", "{{namespace}}/{{job_name}}")],
            "",
        ),
        (
            "Jobs finished per hour by team and outcome",
            "short",
            [
                (f"sum by (namespace, outcome) ({JOBS_FINISHED}:1h)", "{{namespace}} {{outcome}}"),
                (f"sum by (cluster_queue) ({RUNS_PREEMPTED})", "{{cluster_queue}} preempted"),
            ],
            "Succeeded and failed from the Jobs' conditions, preempted from Kueue's evictions",
        ),
        (
            "Failure rate by team and class (last hour vs last day)",
            "percentunit",
            [
                (f"{FAILURE_RATE}:1h", "{{namespace}} {{workload_class}} 1h"),
                (f"{FAILURE_RATE}:1d", "{{namespace}} {{workload_class}} 1d"),
            ],
            "Share of finished jobs that failed; GpuplaneJobFailureRateSpike fires when the hour is far above the day",
        ),
        (
            "Failure reasons by team",
            "short",
            [(f"sum by (namespace, failure_reason) ({FAILURE_REASONS})", "{{namespace}} {{failure_reason}}")],
            "exit code (backoff limit exceeded), timeout (active deadline), OOM-killed and node-lost pods of Jobs",
        ),
    ]
    if view.policy.services:
        panels.append(
            (
                "Inference cost per 1,000 requests and per million tokens",
                "currencyUSD",
                [
                    (SERVICE_COST_PER_1K, "{{service}} per 1k requests"),
                    (SERVICE_COST_PER_MTOK, "{{service}} per 1M tokens"),
                ],
                "The replicas' GPU cost over the last 5 minutes spread over the requests and tokens (prompt and "
                "generated) they served",
            )
        )
    return panels
