"""Answer "why is my job pending?" (or admitted, or preempted) from a cycle's decisions."""

from __future__ import annotations

from typing import Any

from gpuplane.model.decision import DecisionKind
from gpuplane.scheduler.cycle import CycleResult
from gpuplane.scheduler.estimate import estimate_start, format_wait

_HIDDEN = {"all_failures", "rejected_pools", "pools"}


def explain_dict(result: CycleResult, workload_id: str, backfill_mode: str = "easy") -> dict[str, Any]:
    """The decisions about ``workload_id`` in JSON-ready form, or ``{"status": "unknown"}``; a pending
    workload's ``estimated_start`` (``gpuplane.scheduler.estimate``) comes with them."""
    decisions = result.for_workload(workload_id)
    if not decisions:
        return {
            "workload": workload_id,
            "status": "unknown",
            "message": "not pending or running in this snapshot",
        }
    last = decisions[-1]
    status = {DecisionKind.ADMIT: "admitted", DecisionKind.PREEMPT: "preempted", DecisionKind.WAIT: "pending"}
    out: dict[str, Any] = {
        "workload": workload_id,
        "status": status[last.kind],
        "decisions": [d.to_dict() for d in decisions],
    }
    estimate = estimate_start(result, workload_id, backfill_mode)
    if last.kind is DecisionKind.WAIT and estimate is not None:
        out["estimated_start"] = estimate.to_dict(result.now)
    return out


def explain(result: CycleResult, workload_id: str, backfill_mode: str = "easy") -> str:
    """A few lines a user can read: status, the reason, the figures behind it, what else was tried, and the
    estimated start of pending work (in the snapshot's seconds)."""
    info = explain_dict(result, workload_id, backfill_mode)
    if info["status"] == "unknown":
        return f"{workload_id}: unknown ({info['message']})"
    lines = []
    for d in info["decisions"]:
        lines.append(f"{workload_id}: {d['kind']} [{d['reason']}]")
        lines.append(f"  {d['message']}")
        details = {k: v for k, v in d["details"].items() if k not in _HIDDEN}
        if details:
            lines.append("  " + ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(details.items())))
        for failure in d["details"].get("all_failures", []):
            where = f"pool {failure['pool']}" if failure["pool"] else f"flavor {failure['flavor']} quota"
            lines.append(f"  tried {where}: {failure['reason']}")
        for pool, why in d["details"].get("rejected_pools", {}).items():
            lines.append(f"  pool {pool}: {why}")
        if "placement" in d:
            nodes = sorted({p["node"] for p in d["placement"]["pods"]})
            lines.append(f"  on {len(nodes)} node(s): {', '.join(nodes[:8])}{' ...' if len(nodes) > 8 else ''}")
        if d.get("victims"):
            lines.append(f"  after preempting: {', '.join(d['victims'])}")
    estimate = info.get("estimated_start")
    if estimate is not None:
        when = (
            "unknown"
            if estimate["start"] is None
            else f"t={estimate['start']:.0f}s (in {format_wait(estimate['in_s'])})"
        )
        lines.append(f"  estimated start: {when}: {estimate['note']}")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
