"""Volcano Queues from teams, quotas and cohorts, for the capacity plugin with hierarchical queues.

A team is a queue whose ``deserved`` is its nominal quota, ``capability`` the most it can hold (nominal plus
what it may borrow from its cohort, within its pools and ``max_gpus``: the same bound as the Kueue export),
and ``guarantee`` the part of its quota it never lends (nominal minus lending limit). A cohort is a parent
queue holding its members' quotas (``deserved`` = ``capability`` = their sum), so a team borrows only within
its cohort; teams without a cohort hang off Volcano's ``root`` queue. ``weight`` is the team's fair-share
weight, ``reclaimable`` follows ``scheduling.preemption.reclaim_within_cohort``.
"""

from __future__ import annotations

from gpuplane.export.amounts import Amounts, add
from gpuplane.export.model import ExportBundle, ExportError, Obj
from gpuplane.export.view import TEAM_LABEL, PolicyView, metadata
from gpuplane.export.volcano.resources import resource_list
from gpuplane.policy.schema import TeamSpec

API = "scheduling.volcano.sh/v1beta1"
ROOT = "root"
FILE = "volcano-queues.yaml"
_RESERVED = (ROOT, "default")


def team_amounts(view: PolicyView, team: TeamSpec) -> tuple[Amounts, Amounts, Amounts]:
    """(deserved, capability, guarantee) of a team in GPUs per flavor."""
    deserved = {f: q.nominal for f, q in team.quotas.items()}
    capability = {f: view.team_max_gpus(team, f) for f in view.team_flavors(team)}
    guarantee = {f: q.nominal - view.lendable(team, f) for f, q in team.quotas.items()}
    return deserved, capability, guarantee


def integer_weights(view: PolicyView, bundle: ExportBundle) -> dict[str, int]:
    """Queue weights (int32 in Volcano) with the policy's ratios: as they are when whole, else in hundredths."""
    weights = {t.name: t.weight for t in view.policy.teams}
    scale = 1 if all(float(w).is_integer() for w in weights.values()) else 100
    out = {name: max(1, round(w * scale)) for name, w in weights.items()}
    for name, weight in weights.items():
        if out[name] != weight * scale:
            bundle.warn(
                f"teams[{name}].weight",
                "a fair-share weight below a hundredth",
                f"Volcano queue weights are whole numbers; {weight:g} is exported as {out[name]}/{scale}",
                "approximated",
            )
    return out


def emit_queues(view: PolicyView, bundle: ExportBundle) -> None:
    """A parent Queue per cohort and a Queue per team."""
    _check_names(view)
    weights = integer_weights(view, bundle)
    reclaimable = view.policy.scheduling.preemption.reclaim_within_cohort != "never"
    cohorts: dict[str, list[TeamSpec]] = {}
    for team in view.policy.teams:
        if team.cohort is not None:
            cohorts.setdefault(team.cohort, []).append(team)
    for cohort, members in cohorts.items():
        amounts = [team_amounts(view, t) for t in members]
        nominal = add(*({f: min(n, a[1].get(f, 0)) for f, n in a[0].items()} for a in amounts))
        spec = _clamped(_spec(view, nominal, nominal, add(*(a[2] for a in amounts))))
        spec.update({"parent": ROOT, "weight": sum(weights[t.name] for t in members), "reclaimable": reclaimable})
        bundle.add(FILE, {"apiVersion": API, "kind": "Queue", "metadata": metadata(cohort), "spec": spec})
    for team in view.policy.teams:
        deserved, capability, guarantee = team_amounts(view, team)
        spec = _spec(view, deserved, capability, guarantee)
        if team.max_gpus is not None and "nvidia.com/gpu" in spec["capability"]:
            total = int(spec["capability"]["nvidia.com/gpu"])
            spec["capability"]["nvidia.com/gpu"] = str(min(total, view.team_total_gpus(team)))
        spec = _clamped(spec)
        spec.update({"parent": team.cohort or ROOT, "weight": weights[team.name], "reclaimable": reclaimable})
        body = {"apiVersion": API, "kind": "Queue", "metadata": metadata(team.name, **{TEAM_LABEL: team.name})}
        bundle.add(FILE, {**body, "spec": spec})


def _spec(view: PolicyView, deserved: Amounts, capability: Amounts, guarantee: Amounts) -> Obj:
    spec: Obj = {"deserved": resource_list(view, deserved), "capability": resource_list(view, capability)}
    reserved = resource_list(view, guarantee)
    if reserved:
        spec["guarantee"] = {"resource": reserved}
    return spec


def _clamped(spec: Obj) -> Obj:
    """Volcano wants guarantee <= deserved <= capability per resource; a quota above what the team's pools
    or max_gpus let it hold is cut to that."""
    capability = spec["capability"]
    deserved = {k: _least(v, capability.get(k, v)) for k, v in spec["deserved"].items()}
    spec["deserved"] = deserved
    if "guarantee" in spec:
        reserved = spec["guarantee"]["resource"]
        spec["guarantee"]["resource"] = {k: _least(v, deserved.get(k, "0")) for k, v in reserved.items()}
    return spec


def _least(a: str, b: str) -> str:
    return a if _number(a) <= _number(b) else b


def _number(quantity: str) -> int:
    return int(quantity.removesuffix("Gi"))


def _check_names(view: PolicyView) -> None:
    teams = {t.name for t in view.policy.teams}
    problems = []
    for team in view.policy.teams:
        if team.name == ROOT:
            problems.append(f"teams[{team.name}]: 'root' is Volcano's root queue. Fix: rename the team")
        if team.cohort is not None and (team.cohort in teams or team.cohort in _RESERVED):
            problems.append(
                f"teams[{team.name}].cohort: cohort '{team.cohort}' would be a Volcano queue of the same name as "
                f"{'a team' if team.cohort in teams else 'a built-in queue'}. Fix: rename the cohort"
            )
    if problems:
        raise ExportError(sorted(set(problems)))
