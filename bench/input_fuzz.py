"""Mutated policy files and traces thrown at ``gpuplane check`` and ``gpuplane simulate``, as a careless or
hostile user would write them, with hypothesis choosing the mutations.

Every try runs the real command line in this process (``gpuplane.cli.main``) under a time limit and
classifies the outcome: accepted (exit 0), refused (exit 2 with ``error: ... Fix: ...``), or a failure:
a traceback (an exception escaping the CLI), a hang (over the time limit), another exit code, or an
unsound acceptance (exit 0 for a mutation that must be refused: a duplicate key, a non-finite number,
a count beyond any cluster). ``policy_fuzz`` and ``trace_fuzz`` return their figures as a dict; run as a script
(``.venv/bin/python bench/input_fuzz.py --json out.json``) they run at full size (300 policies, 100 traces),
and tests/unit/test_input_fuzz.py runs a quick subset. Exit status 1 when any failure was counted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import random
import re
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from gpuplane.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "src" / "gpuplane" / "examples"
POLICIES = ("platform.yaml", "serving.yaml", "live.yaml", "philly.yaml", "alibaba-openb.yaml")
NASTY_VALUES: tuple[Any, ...] = (
    None,
    True,
    "",
    "x" * 300,
    -1,
    0,
    2**31,
    2**63,
    -(2**63),
    10**30,
    1e308,
    math.inf,
    -math.inf,
    math.nan,
    1.5,
    [],
    {},
    [1, [2, [3]]],
    {"a": {"b": 1}},
    "\x85",
    "é",
    "../../etc/passwd",
)
INSERTED = ("\x00", "\x85", "\t", ":", "- ", "[", "{", "&a ", "*a", "!foo ", "<<: ", "%", "@", "`", '"', "'", "\ufeff")
NUMBER_TEXTS = (".inf", "-.inf", ".nan", "9223372036854775808", "1.0e+400", "-0.0", "0x7fffffff", "1_000_000_000_000")


_LOCATED = re.compile(r":\d+:")


@dataclass
class Tally:
    """Outcomes of a fuzz section: counts by kind and the first examples of each failure."""

    tries: int = 0
    accepted: int = 0
    refused: int = 0
    tracebacks: int = 0
    hangs: int = 0
    other_exits: int = 0
    unsound_accepted: int = 0
    refusals_without_line: int = 0
    by_mutation: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    slowest_s: float = 0.0

    def to_dict(self, prefix: str) -> dict[str, Any]:
        """JSON-ready figures, the tries under ``<prefix>_tries``."""
        return {
            f"{prefix}_tries": self.tries,
            "accepted": self.accepted,
            "refused": self.refused,
            "tracebacks": self.tracebacks,
            "hangs": self.hangs,
            "other_exits": self.other_exits,
            "unsound_accepted": self.unsound_accepted,
            "refusals_without_line": self.refusals_without_line,
            "slowest_try_s": round(self.slowest_s, 3),
            "mutations": dict(sorted(self.by_mutation.items())),
            "failure_examples": self.failures[:10],
        }


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_cli(argv: list[str], limit_s: float) -> tuple[str, int | None, str]:
    """Run the command line in-process: ("exit", code, stderr), ("traceback", None, text) or ("hang", ...)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with _time_limit(limit_s), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    except _Timeout:
        return "hang", None, f"over {limit_s:g} s"
    except Exception as exc:  # the failure this suite counts: anything escaping the CLI
        frames = traceback.extract_tb(exc.__traceback__)
        where = next((f"{f.filename.split('/src/')[-1]}:{f.lineno}" for f in reversed(frames)), "?")
        return "traceback", None, f"{type(exc).__name__} at {where}: {str(exc)[:120]}"
    return "exit", code, err.getvalue()


def _record(
    tally: Tally, mutation: str, outcome: tuple[str, int | None, str], must_refuse: bool, elapsed: float
) -> None:
    kind, code, text = outcome
    tally.tries += 1
    tally.by_mutation[mutation.split(" ")[0]] += 1
    tally.slowest_s = max(tally.slowest_s, elapsed)
    if kind == "traceback":
        tally.tracebacks += 1
        tally.failures.append(f"{mutation}: {text}")
    elif kind == "hang":
        tally.hangs += 1
        tally.failures.append(f"{mutation}: hang {text}")
    elif code == 0:
        tally.accepted += 1
        if must_refuse:
            tally.unsound_accepted += 1
            tally.failures.append(f"{mutation}: accepted although it must be refused")
    elif code == 2 and ((text.startswith("error") and "Fix" in text) or text.startswith("usage:")):
        tally.refused += 1
        if not _LOCATED.search(text.splitlines()[0]) and not text.startswith("usage:"):
            tally.refusals_without_line += 1
    else:
        tally.other_exits += 1
        tally.failures.append(f"{mutation}: exit {code}: {text[:160]}")


# ---- policies ---------------------------------------------------------------------------------------------


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any, delete: bool = False) -> None:
    node = doc
    for part in path[:-1]:
        node = node[part]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value


def _numeric_paths(doc: Any) -> list[tuple[Any, ...]]:
    node_paths = []
    for path in _paths(doc):
        node = doc
        for part in path:
            node = node[part]
        if isinstance(node, (int, float)) and not isinstance(node, bool):
            node_paths.append(path)
    return node_paths


def _yaml_attack(rng: random.Random, text: str) -> tuple[str, bool]:
    """A document built to exhaust or confuse a YAML loader; returns (text, must it be refused)."""
    kind = rng.randrange(9)
    if kind == 0:  # billion laughs
        width, depth = rng.randint(2, 12), rng.randint(3, 12)
        lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
        lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, depth)]
        return "\n".join(lines) + "\n" + text, width**depth > 100_000
    if kind == 1:  # deep nesting, flow or block
        depth = rng.choice((65, 200, 1000, 5000, 20000))
        if rng.random() < 0.5:
            return f"deep: {'[' * depth}{']' * depth}\n" + text, True
        return "deep:\n" + "".join(" " * i + "- \n" for i in range(min(depth, 2000))) + text, True
    if kind == 2:  # self-referencing alias
        return text + "\nloop: &loop\n  again: *loop\n", True
    if kind == 3:  # merge key of a section into another
        return text + "\nx-defaults: &d {a: 1}\nextra:\n  <<: *d\n  b: 2\n", True
    if kind == 4:  # custom and language tags
        tag = rng.choice(("!foo", "!!python/object:os.system", "!!binary", "!!set", "!!omap", "!!python/name:os"))
        return f"tagged: {tag} 1\n" + text, True
    if kind == 5:  # unhashable keys
        return text + "\n? [1, 2]\n: 3\n", True
    if kind == 6:  # a duplicate key at the top or inside a section
        lines = text.splitlines()
        tops = [i for i, line in enumerate(lines) if line and line[0].isalpha() and ":" in line]
        line = lines[rng.choice(tops)]
        return text + "\n" + line + "\n", True
    if kind == 7:  # undefined alias, anchor redefinition
        return text + rng.choice(("\nz: *nowhere\n", "\nz: &a 1\ny: &a 2\nw: *a\n")), True
    return text + "\nhuge: " + "9" * rng.choice((400, 5000, 100_000)) + "\n", True


def _mutate_policy(rng: random.Random, text: str) -> tuple[str, bytes | None, str, bool]:
    """One mutation of a valid policy: (text, raw bytes or None, mutation name, must it be refused)."""
    doc = yaml.safe_load(text)
    choice = rng.randrange(9)
    if choice == 0:
        path = rng.choice(_paths(doc))
        value = rng.choice(NASTY_VALUES)
        _set(doc, path, value)
        unsound = isinstance(value, float) and not math.isfinite(value)
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), None, "value", unsound
    if choice == 1:
        path = rng.choice(_paths(doc))
        _set(doc, path, None, delete=True)
        return yaml.safe_dump(doc, sort_keys=False), None, "delete", False
    if choice == 2:
        numeric = _numeric_paths(doc)
        if numeric:
            path = rng.choice(numeric)
            value = rng.choice(NUMBER_TEXTS)
            _set(doc, path, "__N__")
            dumped = yaml.safe_dump(doc, sort_keys=False).replace("__N__", value, 1)
            return dumped, None, f"number {value}", value in (".inf", "-.inf", ".nan", "1.0e+400")
    if choice == 3:
        at = rng.randrange(len(text) + 1)
        return text[:at] + rng.choice(INSERTED) + text[at:], None, "insert", False
    if choice == 4:
        at = rng.randrange(len(text))
        return text[:at] + text[at + rng.randint(1, 80) :], None, "cut", False
    if choice == 5:
        lines = text.splitlines(keepends=True)
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return "".join(lines), None, "swap-lines", False
    if choice == 6:
        raw = text.encode("utf-8")
        at = rng.randrange(len(raw))
        junk = rng.choice((b"\xff", b"\xe9", b"\xc3", b"\x00\x00", bytes(rng.randrange(256) for _ in range(64))))
        return text, raw[:at] + junk + raw[at:], "bytes", False
    if choice == 7:
        encoding = rng.choice(("latin-1", "utf-16", "utf-32", "cp1252"))
        return text, (text + "\nname: café-ü\n").encode(encoding, errors="replace"), f"encode-{encoding}", True
    attacked, must = _yaml_attack(rng, text)
    return attacked, None, "yaml-attack", must


def policy_fuzz(tries: int = 300, seed: int = 0, limit_s: float = 20.0) -> dict[str, Any]:
    """Check ``tries`` mutated policies; figures of the outcomes (tracebacks, hangs and unsound must be 0)."""
    tally = Tally()
    texts = [(name, (EXAMPLES / name).read_text(encoding="utf-8")) for name in POLICIES]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "policy.yaml"

        @hypothesis_seed(seed)
        @settings(
            max_examples=tries,
            phases=[Phase.generate],
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.sampled_from(texts), st.randoms(use_true_random=False))
        def one(base: tuple[str, str], rng: random.Random) -> None:
            text, raw, mutation, must_refuse = _mutate_policy(rng, base[1])
            target.write_bytes(raw if raw is not None else text.encode("utf-8"))
            began = time.perf_counter()
            outcome = run_cli(["check", str(target)], limit_s)
            _record(tally, mutation, outcome, must_refuse, time.perf_counter() - began)

        one()
    return {**tally.to_dict("policy_fuzz"), "wall_s": round(time.perf_counter() - started, 1)}


# ---- traces -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceBase:
    """A small valid trace of one kind: its header, rows, and how to run it."""

    kind: str
    header: list[str]
    rows: list[list[str]]
    suffix: str = ".csv"


def _bases() -> list[TraceBase]:
    sample = (EXAMPLES / "traces" / "philly-sample.csv").read_text(encoding="utf-8").splitlines()
    philly = TraceBase("philly-pollux", sample[0].split(","), [line.split(",") for line in sample[1:25]])
    gp_rows = [[f"j{i}", f"t{i % 3}", str(i * 60), str(300 + 37 * i), str(1 + i % 4)] for i in range(20)]
    header = ["id", "team", "submit_s", "duration_s", "gpus", "gpu_milli", "checkpoint_interval_s"]
    gp_rows = [[*r, "1000" if int(r[4]) > 1 else "500", "600"] for r in gp_rows]
    gpuplane = TraceBase("gpuplane", header, gp_rows)
    jsonl = TraceBase("gpuplane", header, gp_rows, ".jsonl")
    ali_header = [
        "name",
        "cpu_milli",
        "memory_mib",
        "num_gpu",
        "gpu_milli",
        "gpu_spec",
        "qos",
        "pod_phase",
        "creation_time",
        "deletion_time",
        "scheduled_time",
    ]
    ali_rows = [
        [
            f"openb-pod-{i:04d}",
            "6000",
            "12288",
            str(1 + i % 2),
            "460",
            "",
            "LS",
            "Succeeded",
            str(i * 100),
            str(i * 100 + 900 + i * 13),
            str(i * 100 + 5),
        ]
        for i in range(20)
    ]
    alibaba = TraceBase("alibaba-openb", ali_header, ali_rows)
    return [philly, gpuplane, jsonl, alibaba]


CELL_VALUES = (
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e300",
    "-1",
    "0",
    "9223372036854775808",
    "",
    "abc",
    "1e400",
    "0001-01-01 00:00:00",
    "9999-12-31 23:59:59",
    "1.7e12",
    "0.5",
    "1e9",
)


def _render(base: TraceBase, header: list[str], rows: list[list[str]]) -> str:
    if base.suffix == ".jsonl":
        lines = []
        for row in rows:
            item: dict[str, Any] = {}
            for key, cell in zip(header, row, strict=False):
                try:
                    item[key] = json.loads(cell) if cell not in ("nan", "NaN", "inf", "-inf") else float(cell)
                except ValueError:
                    item[key] = cell
            lines.append(json.dumps(item))
        return "\n".join(lines) + "\n"
    return "\n".join(",".join(r) for r in [header, *rows]) + "\n"


def _mutate_trace(rng: random.Random, base: TraceBase) -> tuple[str, bytes, str]:
    """One mutation of a valid trace: (file suffix, bytes, mutation name)."""
    header, rows = list(base.header), [list(r) for r in base.rows]
    choice = rng.randrange(8)
    name = "cell"
    if choice <= 2:
        for _ in range(rng.randint(1, 3)):
            row = rng.randrange(len(rows))
            col = rng.randrange(len(header))
            rows[row][col] = rng.choice(CELL_VALUES)
    elif choice == 3:
        name = "header"
        del header[rng.randrange(len(header))]
    elif choice == 4:
        name = "rows"
        rows = rows[: rng.randrange(len(rows))] + [[] for _ in range(rng.randint(0, 2))]
        if rows and rng.random() < 0.5:
            rows.append(rows[0])
    text = _render(base, header, rows)
    raw = text.encode("utf-8")
    if choice == 5:
        name = "bytes"
        at = rng.randrange(len(raw))
        junk = rng.choice((b"\xe9", b"\xff\xfe", b"\x00", bytes(rng.randrange(256) for _ in range(128))))
        raw = raw[:at] + junk + raw[at:]
    elif choice == 6:
        name = "encoding"
        raw = (text.replace("t1", "tëam") + "").encode(rng.choice(("latin-1", "utf-16", "cp1252")))
    elif choice == 7:
        name = "huge"
        if base.suffix == ".jsonl":
            depth = rng.choice((100, 10_000, 100_000))
            raw += ('{"id": "deep", "x": ' + "[" * depth + "]" * depth + "}\n").encode()
        else:
            raw += ("x" * rng.choice((200_000, 1_000_000)) + ",1,1,1,1\n").encode()
    return base.suffix, raw, name


COMPARE_NAMES = ("gpuplane", "fifo", "tiresias", "tiresiass", "sjf", "fifo-quota", "priority", "Gpuplane", "")


def trace_fuzz(tries: int = 100, seed: int = 0, limit_s: float = 30.0) -> dict[str, Any]:
    """Simulate ``tries`` mutated traces; figures of the outcomes (tracebacks and hangs must be 0)."""
    tally = Tally()
    bases = _bases()
    policy = str(EXAMPLES / "philly.yaml")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:

        @hypothesis_seed(seed)
        @settings(
            max_examples=tries,
            phases=[Phase.generate],
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.sampled_from(bases), st.randoms(use_true_random=False))
        def one(base: TraceBase, rng: random.Random) -> None:
            suffix, raw, mutation = _mutate_trace(rng, base)
            target = Path(tmp) / f"trace{suffix}"
            target.write_bytes(raw)
            argv = ["simulate", "--policy", policy, "--trace", f"{base.kind}:{target}", "--auto-teams"]
            argv += rng.choice((["--gpus", "16"], ["--load", "0.9"], ["--gpus", "64"]))
            if rng.random() < 0.2:
                argv += ["--compare", ",".join(rng.sample(COMPARE_NAMES, 2))]
                mutation += "+compare"
            began = time.perf_counter()
            outcome = run_cli(argv, limit_s)
            _record(tally, f"{base.kind}{suffix}:{mutation}", outcome, False, time.perf_counter() - began)

        one()
    return {**tally.to_dict("trace_fuzz"), "wall_s": round(time.perf_counter() - started, 1)}


FUZZ_SECTIONS: dict[str, Callable[..., dict[str, Any]]] = {"policy_fuzz": policy_fuzz, "trace_fuzz": trace_fuzz}


def main_cli(argv: list[str] | None = None) -> int:
    """Run both sections, print their figures, write them with ``--json``; 1 when anything failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--policy-tries", type=int, default=300)
    parser.add_argument("--trace-tries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    figures = {
        "policy": policy_fuzz(args.policy_tries, args.seed),
        "trace": trace_fuzz(args.trace_tries, args.seed),
    }
    failed = 0
    for name, section in figures.items():
        bad = sum(int(section[k]) for k in ("tracebacks", "hangs", "other_exits", "unsound_accepted"))
        failed += bad
        print(
            f"{name}: {section[f'{name}_fuzz_tries']} tries, {section['accepted']} accepted, "
            f"{section['refused']} refused, {section['tracebacks']} tracebacks, {section['hangs']} hangs, "
            f"{section['other_exits']} other exits, {section['unsound_accepted']} unsound acceptances, "
            f"slowest try {section['slowest_try_s']} s, {section['wall_s']} s in all"
        )
        for example in section["failure_examples"]:
            print(f"  {example}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main_cli())
