"""Snapshot files: a cluster state (nodes, running and pending workloads) a user can write by hand.

Used by ``gpuplane schedule`` and ``gpuplane explain`` to ask the scheduler about a given situation.
Running workloads may omit their placement; they are then placed by the scheduler itself, in the order
listed, before the pending ones are decided (handy for examples and what-if questions).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpuplane.io.policy_file import read_text
from gpuplane.model import (
    ClusterSnapshot,
    DecisionKind,
    Node,
    Placement,
    PodPlacement,
    PodSet,
    RunningWorkload,
    Toleration,
    TopologyMode,
    Workload,
    WorkloadClass,
)
from gpuplane.policy import PolicyError, PolicyIssue, PolicySpec
from gpuplane.policy.load import locate, parse_document
from gpuplane.policy.nodes import pool_nodes
from gpuplane.policy.schema_base import MAX_COUNT, MAX_NODES
from gpuplane.policy.yamlsource import LineMap
from gpuplane.scheduler import PolicyIndex, schedule


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class PodsDoc(_Doc):
    count: int = Field(1, ge=1, le=MAX_COUNT)
    gpus_per_pod: int = Field(1, ge=0, le=16)
    mig_profile: str | None = None
    min_count: int | None = Field(None, ge=1, le=MAX_COUNT)
    gpu_milli: int | None = Field(None, ge=1, le=999)


class TolerationDoc(_Doc):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class PodPlacementDoc(_Doc):
    node: str
    gpus: list[int] = Field(min_length=1)
    mig_profile: str | None = None
    gpu_milli: int | None = Field(None, ge=1, le=999)


class PlacementDoc(_Doc):
    pool: str
    flavor: str | None = None
    pods: list[PodPlacementDoc] = Field(min_length=1)


class WorkloadDoc(_Doc):
    id: str = Field(min_length=1)
    queue: str
    klass: Literal["training", "batch", "inference"] = Field(alias="class")
    pods: PodsDoc = Field(default_factory=PodsDoc)
    submit_time: float = 0.0
    priority: str | None = None
    estimated_duration_s: float | None = Field(None, gt=0)
    checkpoint_interval_s: float | None = Field(None, gt=0)
    preemptible: bool | None = None
    tolerations: list[TolerationDoc] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(default_factory=dict)
    pools: list[str] | None = None
    topology: Literal["required", "preferred", "none"] | None = None


class RunningDoc(WorkloadDoc):
    start_time: float = 0.0
    last_checkpoint_time: float | None = None
    placement: PlacementDoc | None = None


class NodeDoc(_Doc):
    name: str
    pool: str
    domain: str | None = None
    ready: bool = True
    schedulable: bool = True


class SnapshotDoc(_Doc):
    now: float = 0.0
    nodes: dict[str, Annotated[int, Field(ge=0, le=MAX_NODES)]] = Field(default_factory=dict)
    node_list: list[NodeDoc] = Field(default_factory=list)
    running: list[RunningDoc] = Field(default_factory=list)
    pending: list[WorkloadDoc] = Field(default_factory=list)


def _workload(doc: WorkloadDoc) -> Workload:
    return Workload(
        id=doc.id,
        queue=doc.queue,
        klass=WorkloadClass(doc.klass),
        pods=PodSet(
            doc.pods.count, doc.pods.gpus_per_pod, doc.pods.mig_profile, doc.pods.min_count, doc.pods.gpu_milli
        ),
        submit_time=doc.submit_time,
        priority=doc.priority,
        estimated_duration_s=doc.estimated_duration_s,
        checkpoint_interval_s=doc.checkpoint_interval_s,
        preemptible=doc.preemptible,
        tolerations=tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in doc.tolerations),
        node_selector=dict(doc.node_selector),
        pools=None if doc.pools is None else tuple(doc.pools),
        topology=None if doc.topology is None else TopologyMode(doc.topology),
    )


def parse_snapshot(text: str, filename: str, policy: PolicySpec, index: PolicyIndex | None = None) -> ClusterSnapshot:
    """Read a snapshot file against ``policy``; PolicyError names the field, the line and the fix."""
    doc, data, lines = parse_document(text, filename, SnapshotDoc, "examples/snapshot.yaml")
    index = index or PolicyIndex(policy)
    issues: list[PolicyIssue] = []
    nodes: list[Node] = []
    for pool_name, count in doc.nodes.items():
        if pool_name not in index.pools:
            issues.append(
                PolicyIssue(
                    ("nodes", pool_name),
                    f"unknown pool '{pool_name}'",
                    "use one of: " + ", ".join(sorted(index.pools)),
                )
            )
            continue
        nodes.extend(pool_nodes(policy.pool(pool_name), count))
    for i, n in enumerate(doc.node_list):
        if n.pool not in index.pools:
            issues.append(
                PolicyIssue(
                    ("node_list", i, "pool"),
                    f"unknown pool '{n.pool}'",
                    "use one of: " + ", ".join(sorted(index.pools)),
                )
            )
            continue
        gpus = index.pools[n.pool].gpus_per_node
        nodes.append(Node(n.name, n.pool, gpus, n.domain or n.pool, n.ready, n.schedulable))
    seen: set[str] = set()
    for section in ("running", "pending"):
        for i, w in enumerate(getattr(doc, section)):
            if w.id in seen:
                issues.append(
                    PolicyIssue(
                        (section, i, "id"),
                        f"duplicate workload id '{w.id}'",
                        "give every workload its own id",
                    )
                )
            seen.add(w.id)
            if w.queue not in index.queues:
                issues.append(
                    PolicyIssue(
                        (section, i, "queue"),
                        f"unknown queue '{w.queue}'",
                        "use a team name: " + ", ".join(sorted(index.queues)),
                    )
                )
            placement = getattr(w, "placement", None)
            if placement is not None and placement.pool not in index.pools:
                issues.append(
                    PolicyIssue(
                        (section, i, "placement", "pool"),
                        f"unknown pool '{placement.pool}'",
                        "use one of: " + ", ".join(sorted(index.pools)),
                    )
                )
    if issues:
        raise PolicyError(filename, locate(issues, lines, data))
    running: list[RunningWorkload] = []
    for r in doc.running:
        if r.placement is None:
            continue
        flavor = r.placement.flavor or index.pools[r.placement.pool].flavor
        pods = tuple(PodPlacement(p.node, tuple(p.gpus), p.mig_profile, p.gpu_milli) for p in r.placement.pods)
        running.append(
            RunningWorkload(
                _workload(r), Placement(r.placement.pool, flavor, pods), r.start_time, r.last_checkpoint_time
            )
        )
    unplaced = [r for r in doc.running if r.placement is None]
    if unplaced:
        running.extend(_bootstrap(index, nodes, running, unplaced, filename, data, lines))
    return ClusterSnapshot(doc.now, nodes, running, [_workload(w) for w in doc.pending])


def _bootstrap(
    index: PolicyIndex,
    nodes: list[Node],
    running: list[RunningWorkload],
    docs: list[RunningDoc],
    filename: str,
    data: Any,
    lines: LineMap,
) -> list[RunningWorkload]:
    """Place running workloads given without a placement, one at a time, with the scheduler itself."""
    out: list[RunningWorkload] = []
    for doc in docs:
        w = _workload(doc)
        result = schedule(index, ClusterSnapshot(doc.start_time, nodes, [*running, *out], [w]))
        decision = result.for_workload(w.id)[-1]
        if decision.kind is not DecisionKind.ADMIT or decision.placement is None or decision.victims:
            position = next(i for i, r in enumerate(data["running"]) if r.get("id") == doc.id)
            raise PolicyError(
                filename,
                locate(
                    [
                        PolicyIssue(
                            ("running", position),
                            f"running workload '{doc.id}' does not fit: {decision.reason.message}",
                            "give it an explicit placement, add nodes, or list it as pending",
                        )
                    ],
                    lines,
                    data,
                ),
            )
        out.append(RunningWorkload(w, decision.placement, doc.start_time, doc.last_checkpoint_time))
    return out


def load_snapshot(path: str, policy: PolicySpec, index: PolicyIndex | None = None) -> ClusterSnapshot:
    """Read and validate the snapshot file at ``path``."""
    return parse_snapshot(read_text(path), path, policy, index)
