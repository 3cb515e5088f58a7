"""A replay script through the simulator: the script's jobs as a trace, its node losses as events.

The simulator runs the script's policy unchanged (the ``gpuplane`` variant) on the initial cluster (each pool's
``min_nodes``), with a cycle at every instant something happens (``cycle_s`` 0, as the live plane ticks when
woken) and no checkpoints (a stopped job runs again from the start, as the script says). When the policy
autoscales a pool, its node autoscaler ticks every ``node_decisions.NODE_TICK_S`` over the pools at their
``max_nodes`` (those beyond ``min_nodes`` start unprovisioned); its orders, joins and removals are recorded.
"""

from __future__ import annotations

from gpuplane.model.decision import DecisionKind
from gpuplane.model.events import EventKind, SchedulingEvent
from gpuplane.model.outcome import SUCCEEDED, FailureReason, Outcome, RunEnd
from gpuplane.policy.nodes import pool_nodes
from gpuplane.replay.decisions import Step, Trail, placement_text
from gpuplane.replay.node_decisions import NODE_TICK_S, NodeStep
from gpuplane.replay.script import ReplayScript
from gpuplane.scheduler.cycle import CycleResult
from gpuplane.sim.engine import NODE_LOST, Simulation
from gpuplane.sim.events import NodeDown
from gpuplane.sim.node_scaling import NodeChange
from gpuplane.sim.trace import Trace, TraceJob, TraceReport
from gpuplane.sim.variants import VariantName, make_variant


def trace_of(script: ReplayScript) -> Trace:
    """The script's submissions as trace jobs (its own times, not shifted to the first submission)."""
    jobs = [
        TraceJob(
            id=job.id,
            team=job.team,
            submit_s=at,
            duration_s=job.runs_for,
            gpus=job.gpus,
            klass=job.klass,
            priority=job.priority,
            end=SUCCEEDED
            if job.ends == "succeeded"
            else RunEnd(Outcome.FAILED, FailureReason.EXIT_CODE.value, job.exit_code),
        )
        for at, job in script.submissions
    ]
    report = TraceReport("replay-script", str(script.path), rows=len(jobs))
    return Trace(sorted(jobs, key=lambda j: j.submit_s), report)


def simulate_script(script: ReplayScript) -> Trail:
    """Replay ``script`` through the simulator; its decisions, outcomes and node changes as a ``Trail``."""
    trail = Trail()

    def on_node(now: float, change: NodeChange, pool: str, node: str) -> None:
        trail.nodes.append(NodeStep(now, change, pool, node))

    def on_cycle(now: float, result: CycleResult) -> None:
        for decision in result.decided:
            if decision.kind is DecisionKind.PREEMPT:
                trail.add(Step(now, "preempt", decision.workload_id, decision.reason.code.value))
            elif decision.kind is DecisionKind.ADMIT and decision.placement is not None:
                pods = [(p.node, p.gpus) for p in decision.placement.pods]
                trail.add(Step(now, "admit", decision.workload_id, decision.reason.code.value, placement_text(pods)))

    def on_event(event: SchedulingEvent) -> None:
        if event.job is None:
            return
        if event.kind is EventKind.WAIT:
            trail.wait(event.job, event.reason)
        elif event.kind is EventKind.PREEMPT and event.reason == NODE_LOST:
            trail.add(Step(event.time, "stop", event.job, NODE_LOST))
        elif event.kind is EventKind.FINISH:
            outcome = str(event.figures.get("outcome"))
            trail.add(Step(event.time, "finish", event.job, outcome))

    policy = script.policy
    autoscaled = bool(script.autoscaled_pools)
    nodes = [
        node for pool in policy.pools for node in pool_nodes(pool, pool.max_nodes if autoscaled else pool.min_nodes)
    ]
    simulation = Simulation(
        make_variant(VariantName.GPUPLANE, policy),
        nodes,
        trace_of(script),
        cycle_s=0.0,
        checkpoint_interval_s=None,
        on_event=on_event,
        on_cycle=on_cycle,
        node_autoscaling=autoscaled,
        node_tick_s=NODE_TICK_S,
        on_node=on_node,
    )
    for at, node in script.node_losses:
        simulation.queue.push(at, NodeDown(node, lost=True))
    simulation.run()
    return trail
