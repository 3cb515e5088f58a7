"""slurm.conf scheduling settings: GRES types, multifactor priority, QOS-based preemption, backfill, topology.

gpuplane orders work by priority tier, then weighted dominant share, then submission time. With
``priority/multifactor`` a job's priority is a weighted sum of factors in [0, 1]; the tier is the QOS factor
(QOS ``Priority`` = the tier's rank among tiers), fair share the next and age the last. The weights make the
order strict: ``PriorityWeightQOS`` is the number of tiers times more than fair share and age together can
add, so one tier step always outweighs them, and fair share outweighs age tenfold.
"""

from __future__ import annotations

import math

from gpuplane.export.slurm.nodes import NodeSet
from gpuplane.export.view import PolicyView

WEIGHT_FAIRSHARE = 10_000
WEIGHT_AGE = 1_000
_SCHEDULERS = {"easy": "sched/backfill", "greedy": "sched/backfill", "strict": "sched/builtin"}


def qos_weight(view: PolicyView) -> int:
    """PriorityWeightQOS: one tier step (weight / tiers) above everything fair share and age can add."""
    return len(view.policy.priorities) * (WEIGHT_FAIRSHARE + WEIGHT_AGE + 1)


def duration(seconds: float) -> str:
    """A Slurm time string ``[days-]HH:MM:SS`` for whole seconds (rounded up)."""
    total = math.ceil(seconds)
    days, rest = divmod(total, 86_400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def tres_types(sets: list[NodeSet]) -> list[str]:
    """Every GPU TRES the limits use: gres/gpu and each typed gres/gpu:<type>, plus gres/shard."""
    kinds = sorted({kind for nodes in sets for kind, _ in nodes.gres})
    out = ["gres/gpu", *(f"gres/gpu:{kind}" for kind in kinds)]
    if any(nodes.shards for nodes in sets):
        out.append("gres/shard")
    return out


def scheduling_lines(view: PolicyView, sets: list[NodeSet]) -> list[str]:
    """The slurm.conf parameters (one ``Key=Value`` per line) that carry the policy's scheduling rules."""
    scheduling = view.policy.scheduling
    preemption = scheduling.preemption
    gres_types = "gpu,shard" if any(nodes.shards for nodes in sets) else "gpu"
    lines = [
        f"GresTypes={gres_types}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        f"SchedulerType={_SCHEDULERS[scheduling.backfill.mode]}",
        "PriorityType=priority/multifactor",
        "PriorityFlags=FAIR_TREE",
        f"PriorityWeightQOS={qos_weight(view)}",
        f"PriorityWeightFairshare={WEIGHT_FAIRSHARE if scheduling.fair_sharing else 0}",
        f"PriorityWeightAge={WEIGHT_AGE}",
        "PriorityWeightJobSize=0",
        "PriorityWeightPartition=0",
        "PriorityMaxAge=7-00:00:00",
        "PriorityDecayHalfLife=01:00:00",
        "AccountingStorageEnforce=associations,limits,qos,safe",
        f"AccountingStorageTRES={','.join(tres_types(sets))}",
    ]
    if preemption.enabled:
        lines += ["PreemptType=preempt/qos", "PreemptMode=REQUEUE"]
        if preemption.min_runtime_s:
            lines.append(f"PreemptExemptTime={duration(preemption.min_runtime_s)}")
    else:
        lines.append("PreemptType=preempt/none")
    if any(nodes.pool.topology is not None for nodes in sets):
        lines.append("TopologyPlugin=topology/tree")
    return lines
