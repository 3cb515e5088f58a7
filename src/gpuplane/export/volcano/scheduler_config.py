"""The volcano-scheduler configuration (actions and plugin tiers) that carries the policy's scheduling rules.

Actions: ``enqueue`` (admit jobs whose gang fits the queue's capability), ``allocate``, ``preempt`` (a
higher-priority job takes resources from lower-priority jobs of its own queue) and ``reclaim`` (a queue
below its deserved share takes back what others borrowed) when the policy preempts, and ``backfill``.
Plugins: ``priority`` (job order by PriorityClass), ``gang`` (all-or-nothing), ``conformance`` (never evict
system pods), ``drf`` (dominant-resource fairness between jobs) when fair sharing is on, ``predicates``
(taints, selectors, resources), ``capacity`` with hierarchical queues (deserved, capability, guarantee per
queue: the policy's quotas and cohorts), ``nodeorder`` and ``binpack`` weighted on ``nvidia.com/gpu`` (the
policy's best-fit packing).
"""

from __future__ import annotations

import yaml

from gpuplane.export.model import Obj
from gpuplane.export.view import GPU, PolicyView, metadata, mig_resource

NAMESPACE = "volcano-system"
CONFIGMAP = "volcano-scheduler-configmap"
CONF_KEY = "volcano-scheduler.conf"


def scheduler_conf(view: PolicyView) -> Obj:
    """The scheduler configuration document (what goes under ``volcano-scheduler.conf``)."""
    preemption = view.policy.scheduling.preemption
    actions = ["enqueue", "allocate"]
    if preemption.enabled:
        actions.append("preempt")
        if preemption.reclaim_within_cohort != "never":
            actions.append("reclaim")
    actions.append("backfill")
    packed = [GPU, *(mig_resource(p) for p in view.mig_milli())]
    binpack_args = {
        "binpack.weight": "10",
        "binpack.cpu": "1",
        "binpack.memory": "1",
        "binpack.resources": ", ".join(packed),
        **{f"binpack.resources.{name}": "10" for name in packed},
    }
    second: list[Obj] = []
    if view.policy.scheduling.fair_sharing:
        second.append({"name": "drf", "enablePreemptable": False})
    second += [
        {"name": "predicates"},
        {"name": "capacity", "enableHierarchy": True},
        {"name": "nodeorder"},
        {"name": "binpack", "arguments": binpack_args},
    ]
    return {
        "actions": ", ".join(actions),
        "tiers": [
            {
                "plugins": [
                    {"name": "priority"},
                    {"name": "gang", "enablePreemptable": False},
                    {"name": "conformance"},
                ]
            },
            {"plugins": second},
        ],
    }


def scheduler_configmap(view: PolicyView) -> Obj:
    """The ConfigMap volcano-scheduler reads its configuration from."""
    text = yaml.safe_dump(scheduler_conf(view), sort_keys=False, default_flow_style=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(CONFIGMAP, NAMESPACE),
        "data": {CONF_KEY: text},
    }
