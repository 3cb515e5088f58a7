"""The exported cost, outcome and failure-rate rules, evaluated by Prometheus' own rule tester (promtool)
on synthetic kube-state-metrics, Kueue and vLLM series: the cost of a run, a team's cost per finished run,
a service's cost per 1,000 requests and per million tokens, finished jobs and failure rates per team and
class, and the failure-rate spike alert firing on a spike but not on a team that always fails this often."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import promql_parser
import pytest
import yaml

from gpuplane.export import export_kubernetes
from gpuplane.export.accounting_rules import TOKEN_COUNTERS
from gpuplane.io.policy_file import load_policy, parse_policy
from tests.unit.export_fixtures import PLATFORM, platform

END = 1500
"""Minutes of synthetic series (a little over a day, so the one-day baseline is full)."""


def _rules(bundle) -> dict:
    (rule,) = bundle.of_kind("PrometheusRule")
    return rule["spec"]


def _by_name(spec: dict) -> dict[str, dict]:
    return {r.get("record") or r["alert"]: r for g in spec["groups"] for r in g["rules"]}


def _gauge(labels: str, on_from: int | None, end: int = END) -> dict:
    """A 0/1 gauge, 1 from minute ``on_from`` (never when None)."""
    if on_from is None:
        values = f"0x{end}"
    elif on_from == 0:
        values = f"1x{end}"
    else:
        values = f"0x{on_from - 1} 1x{end - on_from}"
    return {"series": labels, "values": values}


def _job(ns: str, name: str, klass: str, finish: int, failed: bool) -> list[dict]:
    pod = f'namespace="{ns}",pod="{name}-x"'
    job = f'namespace="{ns}",job_name="{name}",condition="true"'
    return [
        {"series": f'kube_pod_owner{{{pod},owner_kind="Job",owner_name="{name}"}}', "values": f"1x{END}"},
        {"series": f'kube_pod_labels{{{pod},label_gpuplane_io_workload_class="{klass}"}}', "values": f"1x{END}"},
        _gauge(f"kube_job_complete{{{job}}}", None if failed else finish),
        _gauge(f"kube_job_failed{{{job}}}", finish if failed else None),
    ]


def _running_pod(ns: str, pod: str, node: str, gpus: int, minutes: int, start: int = 10) -> list[dict]:
    """A pod holding ``gpus`` GPUs from minute ``start`` for ``minutes`` (to the end when longer)."""
    labels = f'namespace="{ns}",pod="{pod}"'
    return [
        {
            "series": f'kube_pod_container_resource_requests{{{labels},node="{node}",container="c",'
            'resource="nvidia_com_gpu"}',
            "values": f"{gpus}x{END}",
        },
        {
            "series": f'kube_pod_status_phase{{{labels},phase="Running"}}',
            "values": f"0x{start - 1} 1x{END - start}"
            if start + minutes > END
            else f"0x{start - 1} 1x{minutes - 1} 0x{END - start - minutes}",
        },
    ]


def _series() -> list[dict]:
    series = [
        {"series": 'kube_node_labels{node="n1",label_gpuplane_io_pool="training-h100"}', "values": f"1x{END}"},
        {"series": 'kube_node_labels{node="n2",label_gpuplane_io_pool="inference-a100"}', "values": f"1x{END}"},
    ]
    # llm-research: two runs, 4 GPUs for an hour (succeeded) and 2 GPUs for half an hour (failed), at $65/8 per GPU-hour
    series += _job("llm-research", "pretrain", "training", 70, failed=False) + _running_pod(
        "llm-research", "pretrain-x", "n1", 4, 60
    )
    series += _job("llm-research", "probe", "batch", 40, failed=True) + _running_pod(
        "llm-research", "probe-x", "n1", 2, 30
    )
    # recsys: 20 jobs over the day, 2 failed; then 10 in the last hour, 5 failed (a spike)
    # platform: the same recent hour, but half of its jobs always fail (no spike)
    for ns, old_failed in (("recsys", 2), ("platform", 10)):
        for k in range(20):
            series += _job(ns, f"old-{k}", "training", 61 + 60 * k, failed=k < old_failed)
        for k in range(10):
            series += _job(ns, f"new-{k}", "training", 1441 + k, failed=k < 5)
    # chat-assistant: one GPU at $32/8 per hour, 1 request/s, 10 prompt + 10 generated tokens/s
    series += _running_pod("search-serving", "chat-assistant-7f9c", "n2", 1, END + 1)
    served = 'namespace="search-serving",service="chat-assistant"'
    prompt, generated = TOKEN_COUNTERS["vllm"]
    series += [
        {"series": f"vllm:request_success_total{{{served}}}", "values": f"0+60x{END}"},
        {"series": f"{prompt}{{{served}}}", "values": f"0+600x{END}"},
        {"series": f"{generated}{{{served}}}", "values": f"0+600x{END}"},
    ]
    return series


def _expect(expr: str, at: int, samples: list[tuple[str, float]]) -> dict:
    return {
        "expr": expr,
        "eval_time": f"{at}m",
        "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
    }


def _promtool_test(rules_file: Path) -> dict:
    gpu_h100, gpu_a100 = 65 / 8, 32 / 8
    pretrain, probe = 4 * gpu_h100 * 1.0, 2 * gpu_h100 * 0.5
    recsys = '{namespace="recsys",workload_class="training"}'
    platform_ns = '{namespace="platform",workload_class="training"}'
    return {
        "rule_files": [str(rules_file)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _series(),
                "promql_expr_test": [
                    _expect(
                        'gpuplane:job_cost_dollars:7d{namespace="llm-research"}',
                        120,
                        [
                            ('gpuplane:job_cost_dollars:7d{namespace="llm-research",job_name="pretrain"}', pretrain),
                            ('gpuplane:job_cost_dollars:7d{namespace="llm-research",job_name="probe"}', probe),
                        ],
                    ),
                    _expect(
                        'gpuplane:team_cost_per_finished_job:1d{namespace="llm-research"}',
                        120,
                        [('gpuplane:team_cost_per_finished_job:1d{namespace="llm-research"}', (pretrain + probe) / 2)],
                    ),
                    _expect(
                        'gpuplane:jobs_finished:1h{namespace="llm-research"}',
                        71,
                        [
                            (
                                'gpuplane:jobs_finished:1h{namespace="llm-research",workload_class="training",'
                                'outcome="succeeded"}',
                                1,
                            ),
                            (
                                'gpuplane:jobs_finished:1h{namespace="llm-research",workload_class="batch",'
                                'outcome="failed"}',
                                1,
                            ),
                        ],
                    ),
                    _expect(
                        f"gpuplane:job_failure_rate:1h{recsys}", END, [(f"gpuplane:job_failure_rate:1h{recsys}", 0.5)]
                    ),
                    _expect(
                        f"gpuplane:job_failure_rate:1d{recsys}",
                        END,
                        [(f"gpuplane:job_failure_rate:1d{recsys}", 7 / 30)],
                    ),
                    _expect(
                        f"gpuplane:job_failure_rate:1d{platform_ns}",
                        END,
                        [(f"gpuplane:job_failure_rate:1d{platform_ns}", 0.5)],
                    ),
                    _expect(
                        'gpuplane:service_cost_per_1k_requests:5m{service="chat-assistant"}',
                        600,
                        [
                            (
                                'gpuplane:service_cost_per_1k_requests:5m{namespace="search-serving",service="chat-assistant"}',
                                gpu_a100 / 3600 * 1000,
                            )
                        ],
                    ),
                    _expect(
                        'gpuplane:service_cost_per_million_tokens:5m{service="chat-assistant"}',
                        600,
                        [
                            (
                                'gpuplane:service_cost_per_million_tokens:5m{namespace="search-serving",'
                                'service="chat-assistant"}',
                                gpu_a100 / (20 * 3600) * 1_000_000,
                            )
                        ],
                    ),
                ],
                "alert_rule_test": [
                    {
                        "eval_time": f"{END}m",
                        "alertname": "GpuplaneJobFailureRateSpike",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "source": "gpuplane-policy",
                                    "namespace": "recsys",
                                    "workload_class": "training",
                                },
                                "exp_annotations": {
                                    "summary": "Jobs of recsys (training) fail far more than usual",
                                    "description": "50% of the jobs that finished in the last hour failed, above 10% "
                                    "and 2 times the team's rate over the last day. See "
                                    "gpuplane:job_failures_by_reason for exit code, OOM, node lost and timeout.",
                                },
                            }
                        ],
                    },
                    {"eval_time": "1400m", "alertname": "GpuplaneJobFailureRateSpike", "exp_alerts": []},
                ],
            }
        ],
    }


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Prometheus) is not installed")
def test_prometheus_evaluates_the_cost_and_outcome_rules_to_the_accounting_figures(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(_rules(export_kubernetes(load_policy(PLATFORM)))))
    test = tmp_path / "test.yaml"
    test.write_text(yaml.safe_dump(_promtool_test(rules), sort_keys=False))
    result = subprocess.run(["promtool", "test", "rules", str(test)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_accounting_expression_parses_and_the_alert_carries_the_policy_thresholds():
    spec = _rules(
        export_kubernetes(parse_policy(platform(alerts={"failure_rate": {"min_rate": 0.25, "above_baseline": 3}})))
    )
    rules = _by_name(spec)
    for rule in rules.values():
        promql_parser.parse(rule["expr"])
    alert = rules["GpuplaneJobFailureRateSpike"]
    assert "> 0.25" in alert["expr"] and "> 3 * gpuplane:job_failure_rate:1d" in alert["expr"]
    assert ">= 10" in alert["expr"] and alert["for"] == "15m"
    for name in (
        "gpuplane:job_cost_dollars:7d",
        "gpuplane:service_cost_per_1k_requests:5m",
        "gpuplane:jobs_finished:1h",
    ):
        assert name in rules
    quiet = _by_name(_rules(export_kubernetes(parse_policy(platform(alerts={"failure_rate": None})))))
    assert "GpuplaneJobFailureRateSpike" not in quiet and "gpuplane:job_failure_rate:1h" in quiet
