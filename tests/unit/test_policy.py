"""The policy file: the example is valid, and every kind of mistake gets a located, actionable error."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from gpuplane.cli import main
from gpuplane.io.policy_file import load_policy
from gpuplane.policy import PolicyError, parse_policy
from tests.unit.fixtures import BASE_POLICY

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "platform.yaml"


def errors_of(data: dict) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(yaml.safe_dump(data, sort_keys=False), "p.yaml")
    return [i.render("p.yaml") for i in info.value.issues]


def test_example_policy_is_valid_and_realistic():
    policy = load_policy(str(EXAMPLE))
    assert len(policy.pools) == 3 and len(policy.teams) == 4 and len(policy.priorities) == 3
    assert {p.capacity_type for p in policy.pools} == {"reserved", "spot", "on-demand"}
    platform = next(t for t in policy.teams if t.name == "platform")
    assert all(q.lending_limit == 0 for q in platform.quotas.values())


def test_unknown_pool_in_team_names_field_and_choices():
    data = copy.deepcopy(BASE_POLICY)
    data["teams"][0]["pools"] = ["train", "spot", "trian"]
    (error,) = errors_of(data)
    assert "teams[0](a).pools[2]" in error and "unknown pool 'trian'" in error
    assert "Fix: use one of: infer, spot, train" in error


def test_borrowing_limit_without_cohort():
    data = copy.deepcopy(BASE_POLICY)
    data["teams"][2]["quotas"]["h100-infer"]["borrowing_limit"] = 8
    (error,) = errors_of(data)
    assert "teams[2](serve).quotas.h100-infer.borrowing_limit" in error
    assert "without a cohort" in error and "set teams[serve].cohort" in error


def test_mig_profile_on_gpu_without_mig():
    data = copy.deepcopy(BASE_POLICY)
    data["pools"][2]["mig_profiles"] = ["1g.10gb"]
    (error,) = errors_of(data)
    assert "pools[2](spot).mig_profiles[0]" in error and "has no MIG profiles" in error


def test_quotas_exceeding_the_pools_maximum():
    data = copy.deepcopy(BASE_POLICY)
    data["teams"][1]["quotas"]["h100"]["nominal"] = 100
    (error,) = errors_of(data)
    assert "add up to 132 GPUs" in error and "at most 128" in error
    assert "raise max_nodes" in error


def test_lending_limit_above_nominal_and_unknown_tier():
    data = copy.deepcopy(BASE_POLICY)
    data["teams"][0]["quotas"]["h100"]["lending_limit"] = 40
    data["priorities"][0]["may_preempt"] = ["normal", "lowest"]
    errors = errors_of(data)
    assert any("lending_limit 40 is above the nominal quota 32" in e for e in errors)
    assert any("priorities[0](high).may_preempt[1]" in e and "unknown priority tier 'lowest'" in e for e in errors)


def test_preempting_a_non_preemptible_or_higher_tier_is_rejected():
    data = copy.deepcopy(BASE_POLICY)
    data["priorities"][1]["may_preempt"] = ["high"]
    (error,) = errors_of(data)
    assert "may not preempt 'high'" in error


def test_typo_in_field_name_suggests_the_right_one():
    data = copy.deepcopy(BASE_POLICY)
    data["pools"][0]["gpus_per_nod"] = 8
    errors = errors_of(data)
    assert any("unknown field 'gpus_per_nod'" in e and "did you mean 'gpus_per_node'" in e for e in errors)


def test_errors_carry_the_yaml_line():
    text = EXAMPLE.read_text().replace("max_nodes: 24", "max_nodes: lots")
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "platform.yaml")
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "max_nodes: lots" in row)
    (issue,) = info.value.issues
    assert issue.line == line
    assert issue.render("platform.yaml").startswith(f"platform.yaml:{line}: pools[1](spot-a100).max_nodes")


def test_yaml_syntax_error_is_located():
    with pytest.raises(PolicyError) as info:
        parse_policy("pools:\n  - name: [unclosed\n", "bad.yaml")
    assert info.value.issues[0].line is not None
    assert "invalid YAML" in str(info.value)


def test_all_problems_reported_at_once():
    data = copy.deepcopy(BASE_POLICY)
    data["teams"][0]["pools"] = ["nope"]
    data["pools"][0]["gpu_model"] = "b200"
    data["default_priority"] = "urgent"
    assert len(errors_of(data)) >= 3


def test_spot_rate_on_on_demand_pool():
    data = copy.deepcopy(BASE_POLICY)
    data["pools"][0]["spot_interruption_rate_per_hour"] = 0.1
    (error,) = errors_of(data)
    assert "set capacity_type: spot" in error


def test_cli_check_exit_codes(tmp_path, capsys):
    assert main(["check", str(EXAMPLE)]) == 0
    assert "valid" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("pools: [inference-a100]", "pools: [inference-a10]"))
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "unknown pool 'inference-a10'" in err and "Traceback" not in err
    assert main(["check", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read the file" in capsys.readouterr().err


def test_overrides_change_fields_and_are_validated_like_the_file():
    base = load_policy(str(EXAMPLE))
    changed = load_policy(
        str(EXAMPLE),
        [
            "scheduling.starvation_guard_hours=30",
            "teams.0.max_gpus=12",
            "scheduling.service_levels.thresholds_gpu_hours=[1, 10]",
        ],
    )
    assert base.scheduling.starvation_guard_hours != 30 and changed.scheduling.starvation_guard_hours == 30
    assert changed.teams[0].max_gpus == 12 and changed.teams[1:] == base.teams[1:]
    assert changed.scheduling.service_levels is not None
    assert list(changed.scheduling.service_levels.thresholds_gpu_hours) == [1.0, 10.0]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("scheduling.starvation_guard_hours=-1", "scheduling.starvation_guard_hours: Input should be greater than 0"),
        ("scheduling.starvation_gard_hours=1", "did you mean 'starvation_guard_hours'"),
        ("teams.40.max_gpus=1", "teams: no item '40' in this list of 4"),
        ("default_priority.x=1", "default_priority: is a value, not a section"),
        ("scheduling.fair_sharing", "is not FIELD=VALUE"),
    ],
)
def test_bad_overrides_name_the_field_and_the_fix(override, expected):
    with pytest.raises(PolicyError) as info:
        load_policy(str(EXAMPLE), [override])
    text = str(info.value)
    assert expected in text and "Fix:" in text
    assert all(i.line is None for i in info.value.issues), "lines of the rewritten document would mislead"


@pytest.mark.parametrize(
    ("override", "fix"),
    [
        ("scheduling.preemption.min_runtime_s=0", "use a value > 0, or null (or leave the field out) to turn it off"),
        ("scheduling.starvation_guard_hours=-3", "use a value > 0, or null"),
        ("pools.0.gpus_per_node=0", "use a value >= 1"),
        ("teams.1.quotas.h100-80gb.nominal=-1", "use a value >= 0"),
    ],
)
def test_out_of_range_values_name_the_bound_and_the_off_switch_where_there_is_one(override, fix):
    with pytest.raises(PolicyError) as info:
        load_policy(str(EXAMPLE), [override])
    (issue,) = info.value.issues
    assert issue.fix.startswith(fix)
    assert ("null" in issue.fix) == ("null" in fix), "only fields that default to null can be turned off"


def test_cli_check_takes_overrides(capsys):
    assert main(["check", str(EXAMPLE), "--set", "scheduling.fair_sharing=false"]) == 0
    assert "--set scheduling.fair_sharing=false: valid" in capsys.readouterr().out
    assert main(["check", str(EXAMPLE), "--set", "teams.0.quotas.h100-80gb.nominal=100000"]) == 2
    err = capsys.readouterr().err
    assert "h100-80gb.nominal" in err and "add up to" in err and "Traceback" not in err
    assert f"{EXAMPLE} --set teams.0.quotas.h100-80gb.nominal=100000" in err, "named as the user wrote it"
