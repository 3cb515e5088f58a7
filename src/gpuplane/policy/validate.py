"""Cross-field rules of a policy: references that must resolve and limits that must add up."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from gpuplane.model.gpu import parse_mig_profile
from gpuplane.policy.errors import Path, PolicyIssue, format_path
from gpuplane.policy.schema import PolicySpec
from gpuplane.policy.schema_auth import TOKEN_FIX, TokenRef, token_problem
from gpuplane.policy.schema_serving import ModelProfileSpec, ReplicaAutoscalingSpec, ServiceSpec
from gpuplane.policy.validate_tenancy import check_tenancy


def _one_of(names: Iterable[str]) -> str:
    listed = sorted(set(names))
    return "use one of: " + ", ".join(listed) if listed else "declare it first"


def check_policy(policy: PolicySpec) -> list[PolicyIssue]:
    """Every cross-field problem of an otherwise well-typed policy, in file order."""
    issues: list[PolicyIssue] = []
    for check in (
        _unique_names,
        _gpu_models,
        _pools,
        _flavor_models,
        _teams,
        _capacity,
        _priorities,
        _service_levels,
        _starvation_guard,
        _reclaim_protection,
        _services,
        _auth,
        check_tenancy,
    ):
        issues.extend(check(policy))
    return issues


def _unique_names(policy: PolicySpec) -> Iterator[PolicyIssue]:
    for section in ("gpu_models", "pools", "teams", "priorities", "services"):
        seen: set[str] = set()
        for index, item in enumerate(getattr(policy, section)):
            if item.name in seen:
                yield PolicyIssue(
                    (section, index, "name"), f"duplicate name '{item.name}'", "give every entry its own name"
                )
            seen.add(item.name)


def _gpu_models(policy: PolicySpec) -> Iterator[PolicyIssue]:
    for index, model in enumerate(policy.gpu_models):
        if model.mig is None:
            continue
        for pindex, profile in enumerate(model.mig.profiles):
            try:
                parse_mig_profile(profile, model.memory_gib, model.mig.compute_slices, model.mig.memory_slices)
            except ValueError as exc:
                yield PolicyIssue(
                    ("gpu_models", index, "mig", "profiles", pindex),
                    str(exc),
                    "use the profile names NVIDIA lists for this GPU (nvidia-smi mig -lgip)",
                )


def _pools(policy: PolicySpec) -> Iterator[PolicyIssue]:
    models = {m.name: m for m in policy.gpu_models}
    for index, pool in enumerate(policy.pools):
        path = ("pools", index)
        model = models.get(pool.gpu_model)
        if model is None:
            yield PolicyIssue((*path, "gpu_model"), f"unknown GPU model '{pool.gpu_model}'", _one_of(models))
        elif pool.mig_profiles:
            offered = model.mig.profiles if model.mig else []
            for pindex, profile in enumerate(pool.mig_profiles):
                if not offered:
                    yield PolicyIssue(
                        (*path, "mig_profiles", pindex),
                        f"MIG profile '{profile}' on GPU model '{model.name}', which has no MIG profiles",
                        f"remove mig_profiles from this pool, or declare gpu_models[{model.name}].mig",
                    )
                    break
                if profile not in offered:
                    yield PolicyIssue(
                        (*path, "mig_profiles", pindex),
                        f"GPU model '{model.name}' offers no MIG profile '{profile}'",
                        _one_of(offered),
                    )
        if pool.min_nodes > pool.max_nodes:
            yield PolicyIssue(
                (*path, "min_nodes"),
                f"min_nodes {pool.min_nodes} is above max_nodes {pool.max_nodes}",
                "lower min_nodes or raise max_nodes",
            )
        if pool.warm_nodes > pool.max_nodes:
            yield PolicyIssue(
                (*path, "warm_nodes"),
                f"warm_nodes {pool.warm_nodes} is above max_nodes {pool.max_nodes}",
                "lower warm_nodes or raise max_nodes",
            )
        if pool.spot_interruption_rate_per_hour > 0 and pool.capacity_type != "spot":
            yield PolicyIssue(
                (*path, "spot_interruption_rate_per_hour"),
                f"an interruption rate on a '{pool.capacity_type}' pool, which is never interrupted",
                "set capacity_type: spot, or remove spot_interruption_rate_per_hour",
            )


def _teams(policy: PolicySpec) -> Iterator[PolicyIssue]:
    pools = {p.name: p for p in policy.pools}
    flavors = {p.flavor_name for p in policy.pools}
    for index, team in enumerate(policy.teams):
        path = ("teams", index)
        team_flavors: set[str] = set()
        for pindex, pool_name in enumerate(team.pools):
            pool = pools.get(pool_name)
            if pool is None:
                yield PolicyIssue((*path, "pools", pindex), f"unknown pool '{pool_name}'", _one_of(pools))
            else:
                team_flavors.add(pool.flavor_name)
        for flavor, quota in team.quotas.items():
            qpath = (*path, "quotas", flavor)
            if flavor not in flavors:
                yield PolicyIssue(qpath, f"quota for unknown GPU flavor '{flavor}'", _one_of(flavors))
                continue
            if flavor not in team_flavors:
                yield PolicyIssue(
                    qpath,
                    f"quota for flavor '{flavor}' but none of the team's pools provides it",
                    f"add a pool of flavor '{flavor}' to teams[{team.name}].pools, or remove this quota",
                )
            if team.cohort is None and quota.borrowing_limit is not None:
                yield PolicyIssue(
                    (*qpath, "borrowing_limit"),
                    "borrowing_limit without a cohort: there is no one to borrow from",
                    f"set teams[{team.name}].cohort, or remove borrowing_limit",
                )
            if team.cohort is None and quota.lending_limit is not None:
                yield PolicyIssue(
                    (*qpath, "lending_limit"),
                    "lending_limit without a cohort: there is no one to lend to",
                    f"set teams[{team.name}].cohort, or remove lending_limit",
                )
            if quota.lending_limit is not None and quota.lending_limit > quota.nominal:
                yield PolicyIssue(
                    (*qpath, "lending_limit"),
                    f"lending_limit {quota.lending_limit} is above the nominal quota {quota.nominal}",
                    "a team can lend at most its nominal quota: lower lending_limit",
                )
        if team.cohort is None:
            for flavor in sorted(team_flavors - set(team.quotas)):
                yield PolicyIssue(
                    (*path, "quotas"),
                    f"no quota for flavor '{flavor}' and no cohort to borrow from, so the team can never "
                    "use those pools",
                    f"add quotas.{flavor}.nominal, or set a cohort",
                )


def _capacity(policy: PolicySpec) -> Iterator[PolicyIssue]:
    capacity: dict[str, int] = defaultdict(int)
    for pool in policy.pools:
        capacity[pool.flavor_name] += pool.max_nodes * pool.gpus_per_node
    nominal: dict[str, int] = defaultdict(int)
    last: dict[str, int] = {}
    for index, team in enumerate(policy.teams):
        for flavor, quota in team.quotas.items():
            nominal[flavor] += quota.nominal
            last[flavor] = index
    for flavor, total in sorted(nominal.items()):
        if flavor in capacity and total > capacity[flavor]:
            yield PolicyIssue(
                ("teams", last[flavor], "quotas", flavor, "nominal"),
                f"nominal quotas for flavor '{flavor}' add up to {total} GPUs but its pools hold at most "
                f"{capacity[flavor]} (max_nodes x gpus_per_node)",
                "lower the teams' nominal quotas or raise max_nodes of the pools of that flavor",
            )


def _priorities(policy: PolicySpec) -> Iterator[PolicyIssue]:
    tiers = {t.name: t for t in policy.priorities}
    for index, tier in enumerate(policy.priorities):
        for vindex, victim_name in enumerate(tier.may_preempt):
            path = ("priorities", index, "may_preempt", vindex)
            victim = tiers.get(victim_name)
            if victim is None:
                yield PolicyIssue(path, f"unknown priority tier '{victim_name}'", _one_of(tiers))
            elif victim.value >= tier.value:
                yield PolicyIssue(
                    path,
                    f"tier '{tier.name}' ({tier.value}) may not preempt '{victim.name}' ({victim.value}), "
                    "which is not lower",
                    "list only tiers with a lower value",
                )
            elif not victim.preemptible:
                yield PolicyIssue(
                    path,
                    f"tier '{victim.name}' is not preemptible",
                    f"remove it here, or set priorities[{victim.name}].preemptible: true",
                )
    if policy.default_priority not in tiers:
        yield PolicyIssue(("default_priority",), f"unknown priority tier '{policy.default_priority}'", _one_of(tiers))
    for klass in ("training", "batch", "inference"):
        spec = policy.workload_classes.get(klass)
        if spec.default_priority is not None and spec.default_priority not in tiers:
            yield PolicyIssue(
                ("workload_classes", klass, "default_priority"),
                f"unknown priority tier '{spec.default_priority}'",
                _one_of(tiers),
            )


def _flavor_models(policy: PolicySpec) -> Iterator[PolicyIssue]:
    model_of: dict[str, str] = {}
    for index, pool in enumerate(policy.pools):
        known = model_of.setdefault(pool.flavor_name, pool.gpu_model)
        if known != pool.gpu_model:
            yield PolicyIssue(
                ("pools", index, "flavor"),
                f"flavor '{pool.flavor_name}' already names GPU model '{known}', not '{pool.gpu_model}'",
                "give pools of different GPU models different flavors",
            )


def _starvation_guard(policy: PolicySpec) -> Iterator[PolicyIssue]:
    scheduling = policy.scheduling
    guarded = scheduling.starvation_guard_hours is not None or scheduling.starvation_guard_load_factor is not None
    if scheduling.starvation_guard_preempts_borrowed and not guarded:
        yield PolicyIssue(
            ("scheduling", "starvation_guard_preempts_borrowed"),
            "nothing is ever promoted without a starvation guard, so this switch would do nothing",
            "set scheduling.starvation_guard_load_factor (e.g. 3) or starvation_guard_hours, or remove the switch",
        )


def _reclaim_protection(policy: PolicySpec) -> Iterator[PolicyIssue]:
    preemption = policy.scheduling.preemption
    protected = (
        preemption.min_runtime_s if preemption.reclaim_min_runtime_s is None else preemption.reclaim_min_runtime_s
    )
    if preemption.reclaim_min_runtime_per_wait is not None and not protected:
        yield PolicyIssue(
            ("scheduling", "preemption", "reclaim_min_runtime_per_wait"),
            "no run is spared reclaim (no reclaim_min_runtime_s or min_runtime_s): there is no protection to shorten",
            "set scheduling.preemption.reclaim_min_runtime_s (or min_runtime_s), or remove this factor",
        )


def _service_levels(policy: PolicySpec) -> Iterator[PolicyIssue]:
    levels = policy.scheduling.service_levels
    if levels is None:
        return
    thresholds = levels.thresholds_gpu_hours
    for index, value in enumerate(thresholds):
        if value <= 0 or (index > 0 and value <= thresholds[index - 1]):
            yield PolicyIssue(
                ("scheduling", "service_levels", "thresholds_gpu_hours", index),
                f"threshold {value:g} is not above the one before it ({thresholds[index - 1]:g})"
                if index > 0 and value > 0
                else f"threshold {value:g} is not positive",
                "list positive GPU-hour thresholds in increasing order, e.g. [1, 10, 100]",
            )
    path = ("scheduling", "service_levels")
    level = levels.preempt_nominal_from_level
    if level is not None and not levels.preempt_borrowed:
        yield PolicyIssue(
            (*path, "preempt_nominal_from_level"),
            "only work that may take borrowed GPUs (preempt_borrowed) may take runs within nominal quota",
            "set scheduling.service_levels.preempt_borrowed: true, or remove preempt_nominal_from_level",
        )
    if level is not None and level > len(thresholds):
        yield PolicyIssue(
            (*path, "preempt_nominal_from_level"),
            f"level {level} does not exist: {len(thresholds)} thresholds make levels 0 to {len(thresholds)}",
            f"use a level from 1 to {len(thresholds)}, or add thresholds_gpu_hours",
        )
    if levels.nominal_kept_share > 0 and level is None:
        yield PolicyIssue(
            (*path, "nominal_kept_share"),
            "only preempt_nominal_from_level takes runs within nominal quota, so there is no share to keep",
            "set scheduling.service_levels.preempt_nominal_from_level, or remove nominal_kept_share",
        )
    if levels.nominal_yield_wait_per_runtime is not None and level is None:
        yield PolicyIssue(
            (*path, "nominal_yield_wait_per_runtime"),
            "only runs that may lose their nominal quota (preempt_nominal_from_level) yield it",
            "set scheduling.service_levels.preempt_nominal_from_level, or remove nominal_yield_wait_per_runtime",
        )


def _services(policy: PolicySpec) -> Iterator[PolicyIssue]:
    teams = {t.name: t for t in policy.teams}
    pools = {p.name: p for p in policy.pools}
    tiers = {t.name for t in policy.priorities}
    for index, service in enumerate(policy.services):
        path = ("services", index)
        team = teams.get(service.team)
        if team is None:
            yield PolicyIssue((*path, "team"), f"unknown team '{service.team}'", _one_of(teams))
            continue
        serving = [pools[name] for name in team.pools if name in pools and "inference" in pools[name].workload_classes]
        if not serving:
            yield PolicyIssue(
                (*path, "team"),
                f"team '{team.name}' has no pool that takes inference work",
                f"add a pool with workload_classes [inference] to teams[{team.name}].pools",
            )
        elif service.mig_profile is not None:
            offered = {profile for pool in serving for profile in pool.mig_profiles}
            if service.mig_profile not in offered:
                yield PolicyIssue(
                    (*path, "mig_profile"),
                    f"none of team '{team.name}''s inference pools offers MIG profile '{service.mig_profile}'",
                    _one_of(offered) if offered else "add mig_profiles to an inference pool, or remove mig_profile",
                )
            if service.gpus_per_replica != 1:
                yield PolicyIssue(
                    (*path, "gpus_per_replica"),
                    "gpus_per_replica with a mig_profile: a replica gets one MIG slice",
                    "remove gpus_per_replica, or remove mig_profile",
                )
        elif service.gpus_per_replica > max(pool.gpus_per_node for pool in serving):
            yield PolicyIssue(
                (*path, "gpus_per_replica"),
                f"{service.gpus_per_replica} GPUs per replica, but the team's inference nodes have at most "
                f"{max(pool.gpus_per_node for pool in serving)}",
                "lower gpus_per_replica, or add an inference pool with bigger nodes",
            )
        if service.priority is not None and service.priority not in tiers:
            yield PolicyIssue((*path, "priority"), f"unknown priority tier '{service.priority}'", _one_of(tiers))
        yield from _tensor_parallel(service.gpus_per_replica, service.model, path)
        yield from _fallback(service, path)
        yield from _replica_autoscaling(service.autoscaling, (*path, "autoscaling"))


def _tensor_parallel(gpus: int, model: ModelProfileSpec, path: tuple[str | int, ...]) -> Iterator[PolicyIssue]:
    degree = model.tensor_parallel
    if degree is not None and degree != gpus:
        yield PolicyIssue(
            (*path, "gpus_per_replica"),
            f"{gpus} GPUs per replica, but the model runs tensor parallel over {degree}"
            + (f" (profile '{model.profile}')" if model.profile else ""),
            f"set gpus_per_replica: {degree}, or remove it (it defaults to the tensor-parallel degree)",
        )


def _fallback(service: ServiceSpec, path: tuple[str | int, ...]) -> Iterator[PolicyIssue]:
    fallback = service.fallback
    if fallback is None:
        return
    where = (*path, "fallback")
    if fallback.name == service.name:
        yield PolicyIssue(
            (*where, "name"), f"the fallback has the service's own name '{service.name}'", "name it apart"
        )
    if service.mig_profile is not None:
        yield PolicyIssue(
            where, "a fallback variant with a mig_profile service", "remove fallback, or use whole GPUs per replica"
        )
    if fallback.gpus_per_replica >= service.gpus_per_replica:
        yield PolicyIssue(
            (*where, "gpus_per_replica"),
            f"the fallback takes {fallback.gpus_per_replica} GPUs per replica, not fewer than the service's "
            f"{service.gpus_per_replica}: it cannot serve when GPUs run short",
            f"give the fallback fewer than {service.gpus_per_replica} GPUs per replica (a quantized or smaller model)",
        )
    yield from _tensor_parallel(fallback.gpus_per_replica, fallback.model, where)


def _replica_autoscaling(spec: ReplicaAutoscalingSpec, path: tuple[str | int, ...]) -> Iterator[PolicyIssue]:
    if spec.min_replicas > spec.max_replicas:
        yield PolicyIssue(
            (*path, "min_replicas"),
            f"min_replicas {spec.min_replicas} is above max_replicas {spec.max_replicas}",
            "lower min_replicas or raise max_replicas",
        )
    signals = (
        spec.target_rps_per_replica,
        spec.target_queue_depth_per_replica,
        spec.target_gpu_utilization,
        spec.min_gpu_memory_headroom,
    )
    if not spec.scale_on_latency and not spec.capacity_from_slo and all(signal is None for signal in signals):
        yield PolicyIssue(
            path,
            "no scaling signal: scale_on_latency and capacity_from_slo are false and no target is set",
            "set capacity_from_slo: true, target_rps_per_replica (or another target), or scale_on_latency: true",
        )
    if spec.panic_window_s >= spec.stable_window_s:
        yield PolicyIssue(
            (*path, "panic_window_s"),
            f"panic window {spec.panic_window_s:g} s is not shorter than the stable window {spec.stable_window_s:g} s",
            "use a panic window of about a tenth of stable_window_s (Knative's default is 6 s of 60 s)",
        )


def _auth(policy: PolicySpec) -> Iterator[PolicyIssue]:
    teams = {t.name for t in policy.teams}
    for team in policy.auth.team_tokens:
        if team not in teams:
            yield PolicyIssue(("auth", "team_tokens", team), f"unknown team '{team}'", _one_of(teams))
    refs: list[tuple[Path, TokenRef]] = [(("auth", "team_tokens", t), r) for t, r in policy.auth.team_tokens.items()]
    if policy.auth.admin_token is not None:
        refs.insert(0, (("auth", "admin_token"), policy.auth.admin_token))
    if policy.auth.metrics_token is not None:
        refs.append((("auth", "metrics_token"), policy.auth.metrics_token))
    first_by_secret: dict[tuple[str, str], Path] = {}
    for path, ref in refs:
        if ref.value is not None:
            problem = token_problem(ref.value.get_secret_value())
            if problem is not None:
                yield PolicyIssue((*path, "value"), problem, TOKEN_FIX)
            key = ("value", ref.value.get_secret_value())
        else:
            assert ref.env is not None
            key = ("env", ref.env)
        first = first_by_secret.setdefault(key, path)
        if first != path:
            what = "the same token" if key[0] == "value" else f"the same variable {ref.env}"
            yield PolicyIssue(
                (*path, key[0]),
                f"{what} as {format_path(first)}: whoever holds it would act as both",
                "give every team and the admin a token of its own",
            )
