"""Bad policy files and traces: each is exit 2 with the file, the line, the field and the fix, never a traceback."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpuplane.cli import main
from gpuplane.io.policy_file import load_policy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLATFORM = (EXAMPLES / "platform.yaml").read_text(encoding="utf-8")
SERVING = (EXAMPLES / "serving.yaml").read_text(encoding="utf-8")
PHILLY_POLICY = str(EXAMPLES / "philly.yaml")


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI, assert exit 2, and return what it printed on stderr."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses an option this way
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    return err


def check(tmp_path: Path, content: str | bytes, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "policy.yaml"
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    err = refused(["check", str(path)], capsys)
    assert err.startswith(f"error: {path}") and "Fix:" in err
    return err


def test_a_policy_that_is_not_utf8_names_line_and_column(tmp_path, capsys):
    err = check(tmp_path, PLATFORM.replace("acme-ai-platform", "acme-caf\xe9").encode("latin-1"), capsys)
    line = PLATFORM.splitlines().index("name: acme-ai-platform") + 1
    assert f"policy.yaml:{line}: (top level): byte 0xe9 at column 15 is not UTF-8" in err
    assert "save the file as UTF-8" in err


def test_nul_and_control_characters_are_located(tmp_path, capsys):
    err = check(tmp_path, PLATFORM.replace("version: 1", "version: 1\x00", 1), capsys)
    assert "character U+0000 is not allowed" in err and "policy.yaml:" in err


@pytest.mark.parametrize(
    "text", ["a: " + "[" * 5000 + "]" * 5000, "a:\n" + "".join(" " * i + "- \n" for i in range(200))]
)
def test_deep_nesting_is_refused_before_the_stack_runs_out(tmp_path, capsys, text):
    err = check(tmp_path, text, capsys)
    assert "nested more than 64 levels deep" in err


def test_an_alias_inside_itself_is_refused(tmp_path, capsys):
    err = check(tmp_path, PLATFORM + "\nloop: &loop\n  again: *loop\n", capsys)
    assert "loop.again: an alias refers to a section that contains it" in err


def test_billion_laughs_is_refused_quickly(tmp_path, capsys):
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    text = "\n".join(lines) + "\n"
    assert len(text) < 500
    started = time.perf_counter()
    err = check(tmp_path, text, capsys)
    assert "aliases expand to more than 100,000 values" in err
    assert time.perf_counter() - started < 30  # unbounded, this file expands to 9**9 values


def test_merge_keys_are_honoured_and_explicit_keys_win(tmp_path):
    text = PLATFORM.replace("scale_down: {after_s: 3600,", "scale_down: &sd {after_s: 3600,")
    text = text.replace("scale_down: {after_s: 300, utilization_below: 0.5}", "scale_down: {<<: *sd, after_s: 300}")
    assert "<<: *sd" in text
    path = tmp_path / "merged.yaml"
    path.write_text(text)
    spot = load_policy(str(path)).pools[1].scale_down
    assert spot.after_s == 300 and spot.utilization_below == 0


@pytest.mark.parametrize("tag", ["!foo 1", "!!python/object:os.system x", "!!set {a}", "!!binary aGk="])
def test_custom_and_language_tags_are_refused(tmp_path, capsys, tag):
    err = check(tmp_path, f"name: {tag}\n" + PLATFORM.replace("name: acme-ai-platform\n", ""), capsys)
    assert "is not supported" in err and "remove the tag" in err


def test_a_list_as_a_key_is_refused(tmp_path, capsys):
    err = check(tmp_path, PLATFORM + "\n? [1, 2]\n: 3\n", capsys)
    assert "a key is a list or a mapping" in err


def test_duplicate_keys_are_refused_with_both_lines(tmp_path, capsys):
    err = check(tmp_path, PLATFORM + "\nname: other\n", capsys)
    first = PLATFORM.splitlines().index("name: acme-ai-platform") + 1
    assert f"key 'name' appears twice in this mapping (first at line {first})" in err


def test_duplicate_keys_inside_a_section_are_refused(tmp_path, capsys):
    err = check(tmp_path, PLATFORM.replace("    max_nodes: 32\n", "    max_nodes: 32\n    max_nodes: 64\n", 1), capsys)
    assert "pools[0].max_nodes: key 'max_nodes' appears twice" in err


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1.0e+400"])
def test_non_finite_numbers_are_refused(tmp_path, capsys, value):
    err = check(tmp_path, PLATFORM.replace("price_per_node_hour: 65.0", f"price_per_node_hour: {value}"), capsys)
    assert "price_per_node_hour: Input should be a finite number" in err and "not .inf or .nan" in err


def test_counts_have_an_upper_bound(tmp_path, capsys):
    err = check(tmp_path, SERVING.replace("max_replicas: 16", "max_replicas: 9223372036854775808"), capsys)
    assert "autoscaling.max_replicas" in err and "use a value <= 10,000,000" in err
    err = check(tmp_path, PLATFORM.replace("max_nodes: 32", "max_nodes: 1000000"), capsys)
    assert "pools[0](training-h100).max_nodes" in err and "<= 100,000" in err


def test_an_override_cannot_bring_in_infinity(capsys):
    err = refused(["check", str(EXAMPLES / "platform.yaml"), "--set", "pools.0.price_per_node_hour=.inf"], capsys)
    assert "finite number" in err


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path, capsys):
    err = check(tmp_path, PLATFORM + "#" * (5 * 1024 * 1024), capsys)
    assert "larger than 4,194,304 bytes" in err


def test_a_snapshot_cannot_ask_for_a_billion_nodes(tmp_path, capsys):
    snapshot = tmp_path / "snap.yaml"
    snapshot.write_text("now: 0\nnodes: {training-h100: 1000000000}\n")
    err = refused(["schedule", "--policy", str(EXAMPLES / "platform.yaml"), str(snapshot)], capsys)
    assert "nodes.training-h100" in err and "<= 100,000" in err


# ---- traces -----------------------------------------------------------------------------------------------

GPUPLANE_HEADER = "id,team,submit_s,duration_s,gpus,gpu_milli\n"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def simulate(tmp_path: Path, kind: str, content: str | bytes, capsys, *extra: str, name: str = "t.csv") -> str:
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    argv = ["simulate", "--policy", PHILLY_POLICY, "--trace", f"{kind}:{path}", "--auto-teams", "--gpus", "16"]
    err = refused([*argv, *extra], capsys)
    assert "Fix:" in err
    return err


@pytest.mark.parametrize("gpus", ["nan", "inf", "-inf"])
def test_non_finite_gpus_name_line_and_column(tmp_path, capsys, gpus):
    philly = f"{PHILLY_HEADER}2017-10-02 00:01:55,108.0,1,108.0,a\n2017-10-02 00:02:55,10,{gpus},1,a\n"
    err = simulate(tmp_path, "philly-pollux", philly, capsys)
    assert "t.csv:3: column 'num_gpus'" in err and "not a finite number" in err
    err = simulate(tmp_path, "gpuplane", f"{GPUPLANE_HEADER}a,t,0,10,1,1000\nb,t,1,10,{gpus},1000\n", capsys)
    assert "t.csv:3: column 'gpus'" in err


def test_infinite_gpu_milli_is_refused(tmp_path, capsys):
    err = simulate(tmp_path, "gpuplane", f"{GPUPLANE_HEADER}a,t,0,10,1,inf\n", capsys)
    assert "t.csv:2: column 'gpu_milli'" in err
    alibaba = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p0,1000,100,1,inf,,LS,Succeeded,0,100,5\n"
    )
    err = simulate(tmp_path, "alibaba-openb", alibaba, capsys)
    assert "t.csv:2: column 'gpu_milli'" in err


def test_a_trace_that_is_not_utf8_names_the_line(tmp_path, capsys):
    text = f"{GPUPLANE_HEADER}a,t,0,10,1,1000\nb,t\xe9am,1,10,1,1000\n"
    err = simulate(tmp_path, "gpuplane", text.encode("latin-1"), capsys)
    assert "t.csv:3: byte 4 of the line (0xe9) is not UTF-8" in err
    err = simulate(tmp_path, "gpuplane", b"\x00\xff\xfe" * 100, capsys, name="t.jsonl")
    assert "t.jsonl:1:" in err and "not UTF-8" in err


def test_a_cell_beyond_the_csv_field_limit_is_refused(tmp_path, capsys):
    err = simulate(tmp_path, "gpuplane", f'{GPUPLANE_HEADER}a,t,0,10,1,1000\n"{"x" * 200_000}",t,0,1,1,1\n', capsys)
    assert "t.csv:3: not a gpuplane trace: field larger than field limit" in err


def test_deep_json_lines_are_refused(tmp_path, capsys):
    deep = '{"id": "a", "team": "t", "submit_s": 0, "duration_s": 5, "gpus": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
    err = simulate(tmp_path, "gpuplane", deep, capsys, name="t.jsonl")
    assert "t.jsonl:1: nested more than 32 levels deep" in err


def test_infinite_duration_with_auto_teams_is_refused(tmp_path, capsys):
    err = simulate(tmp_path, "gpuplane", f"{GPUPLANE_HEADER}a,t,0,inf,1,1000\nb,u,0,10,1,1000\n", capsys)
    assert "t.csv:2: column 'duration_s': 'inf' is not a finite number" in err


@pytest.mark.parametrize("duration", ["1e300", "1e10"])
def test_absurd_durations_are_refused_at_once(tmp_path, capsys, duration):
    started = time.perf_counter()
    err = simulate(tmp_path, "gpuplane", f"{GPUPLANE_HEADER}a,t,0,{duration},1,1000\n", capsys)
    assert "t.csv:2: column 'duration_s'" in err and "is over 366 days" in err and "milliseconds?" in err
    assert time.perf_counter() - started < 30  # 1e10 s took 14 s and 1.7 GB before


def test_timestamps_in_year_1_and_9999_are_refused(tmp_path, capsys):
    philly = (
        "timestamp,duration,num_gpus,gpu_time,cluster\n0001-01-01 00:00:00,100,1,1,a\n"
        "2017-10-02 00:01:55,100,1,1,a\n9999-12-31 00:00:00,100,1,1,a\n"
    )
    err = simulate(tmp_path, "philly-pollux", philly, capsys)
    assert "submissions span 9,999 years, from job 'philly-1' to job 'philly-3'" in err


def test_an_unknown_policy_in_compare_is_refused_before_the_trace_is_read(capsys):
    argv = [
        "simulate",
        "--policy",
        PHILLY_POLICY,
        "--trace",
        "gpuplane:/nonexistent.csv",
        "--compare",
        "fifo,tiresiass",
    ]
    err = refused(argv, capsys)
    assert "unknown policy 'tiresiass': did you mean 'tiresias'?" in err


@pytest.mark.parametrize("option", [["--load", "nan"], ["--gpus", "0"], ["--cycle-s", "inf"], ["--workers", "0"]])
def test_simulation_options_must_be_finite_and_in_range(capsys, option):
    argv = ["simulate", "--policy", PHILLY_POLICY, "--trace", "gpuplane:/nonexistent.csv", *option]
    err = refused(argv, capsys)
    assert f"argument {option[0]}" in err
