"""The GPUs a service with a fallback variant could still be given, as the replica autoscaler reads them.

A service that declares a fallback (``services[].fallback``) grows its own replicas only into GPUs it can
have now and serves the rest of its load with fallback replicas (``autoscale.fallback``). This module
reads, from the control plane's view of the cluster, what ``ServiceSignals.gpus_free`` and
``primary_room`` report:

- the pools the service's replicas may use (the scheduler's own resolution of a replica job: the team's
  pools that take inference work, the flavors it has quota on);
- in each, the GPUs no job holds on nodes that are alive and not being drained, plus, when the plane can
  add nodes (``NodeProvider.can_scale``), the GPUs of nodes still booting and of nodes the pool may still
  add up to ``max_nodes``: GPUs the node autoscaler will bring are not short;
- capped by the team's quota where it is bounded (nominal plus the borrowing limit, or nominal alone
  outside a cohort): GPUs the scheduler would not give the team are short too;
- less the GPUs the service's replicas ordered and not yet placed ask for (the autoscaler counts those
  among its replicas): negative when they ask for more than is free.

GPUs held by other work are not counted, even preemptible work: a service with a fallback does not
preempt to grow, its fallback serves the overflow instead. MIG-sliced services are not covered (None).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplane.live.control import ControlPlane
from gpuplane.live.convert import gpus_held, pod_gpus, to_workload
from gpuplane.live.records import JobRecord, JobState
from gpuplane.model.gpu import MILLI_PER_GPU
from gpuplane.scheduler.resolve import InvalidWorkload, Resolved, resolve


@dataclass(frozen=True, slots=True)
class ServiceGpus:
    """What the replica autoscaler is told about the GPUs a service could still be given."""

    gpus_free: int
    """Free GPUs within quota, less those the service's unplaced replicas ask for (may be negative)."""
    primary_room: int
    """More own replicas the free GPUs hold node by node, less the own replicas ordered and not placed."""


def service_gpus(
    control: ControlPlane, replica: JobRecord, own: list[JobRecord], fallback: list[JobRecord], fallback_gpus: int
) -> ServiceGpus | None:
    """The GPUs ``replica`` (a prototype of the service's own replica job) could still be given (module
    docstring); ``own`` and ``fallback`` are the service's live replica jobs. None when the replica is not
    made of whole GPUs or the policy gives it no pool."""
    per_replica = replica.gpus_per_pod
    if replica.mig_profile is not None or replica.gpu_milli is not None or per_replica <= 0:
        return None
    try:
        resolved = resolve(to_workload(replica), control.index)
    except InvalidWorkload:
        return None
    pools = {pool.name: pool for option in resolved.options for pool in option.pools}
    if not pools:
        return None
    held: dict[str, float] = {}
    team_used: dict[str, float] = {}
    for job in control.jobs_of(lambda j: j.state.holds_gpus and j.placement is not None):
        assert job.placement is not None
        for pod in job.placement.pods:
            held[pod.node] = held.get(pod.node, 0.0) + pod_gpus(pod)
        if job.team == replica.team:
            flavor = job.placement.flavor
            team_used[flavor] = team_used.get(flavor, 0.0) + gpus_held(job)
    free = 0
    room = 0
    ready_nodes: dict[str, int] = {}
    for node in control.last_nodes:
        if not node.alive or node.pool not in pools or node.name in control.state.cordoned:
            continue
        ready_nodes[node.pool] = ready_nodes.get(node.pool, 0) + 1
        idle = max(0, int(node.gpus - held.get(node.name, 0.0)))
        free += idle
        room += idle // per_replica
    if control.node_provider.can_scale():
        booting = control.booting_nodes()
        for name, pool in pools.items():
            addable = max(0, pool.spec.max_nodes - ready_nodes.get(name, 0) - booting.get(name, 0))
            nodes = addable + booting.get(name, 0)
            free += nodes * pool.gpus_per_node
            room += nodes * (pool.gpus_per_node // per_replica)
    quota = _quota_headroom(resolved, team_used)
    if quota is not None:
        free = min(free, quota)
        room = min(room, quota // per_replica)
    waiting_own = sum(1 for j in own if j.state is JobState.PENDING)
    waiting_fallback = sum(1 for j in fallback if j.state is JobState.PENDING)
    return ServiceGpus(
        free - waiting_own * per_replica - waiting_fallback * fallback_gpus,
        room - waiting_own,
    )


def _quota_headroom(resolved: Resolved, used: dict[str, float]) -> int | None:
    """Whole GPUs the team may still be given on the replica's flavors (None: bounded by no quota: a team
    in a cohort without a borrowing limit borrows whatever is free)."""
    in_cohort = resolved.queue.cohort is not None
    total = 0
    for option in resolved.options:
        quota = resolved.queue.quota(option.flavor)
        if quota.borrow_limit is None and in_cohort:
            return None
        borrowable = (quota.borrow_limit or 0) if in_cohort else 0
        ceiling = quota.nominal + borrowable
        total += max(0, int(ceiling / MILLI_PER_GPU - used.get(option.flavor, 0.0)))
    return total
