"""A team's (or cohort's) GPU amounts per flavor as the resource lists Volcano queues carry.

Volcano's queues hold one quantity per resource name, not per flavor: the GPUs of every flavor add up in
``nvidia.com/gpu``, each MIG profile the flavors offer gets as many slices as fit the same GPU budget at
gpuplane's quota charge, and CPU and memory follow the GPUs at each flavor's CPUs and memory per GPU (as the
Kueue export's quotas do).
"""

from __future__ import annotations

from gpuplane.export.amounts import Amounts
from gpuplane.export.view import GPU, PolicyView, mig_resource


def resource_list(view: PolicyView, amounts: Amounts) -> dict[str, str]:
    """The Kubernetes resource list for GPU amounts per flavor (zero amounts left out)."""
    gpus = cpu = memory = 0
    slices: dict[str, int] = {}
    for flavor, amount in amounts.items():
        if amount <= 0:
            continue
        shape = view.flavors[flavor]
        gpus += amount
        cpu += amount * shape.cpu_per_gpu
        memory += amount * shape.memory_gib_per_gpu
        for profile in shape.mig_slices_per_gpu:
            slices[profile] = slices.get(profile, 0) + view.slices_within(amount, profile)
    if not gpus:
        return {}
    out = {"cpu": str(cpu), "memory": f"{memory}Gi", GPU: str(gpus)}
    out.update({mig_resource(p): str(n) for p, n in sorted(slices.items())})
    return out
