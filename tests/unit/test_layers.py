"""The policy core does no I/O, reads no clock and imports no runtime (checked on the source itself)."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "src" / "gpuplane"
CORE_PACKAGES = ("model", "policy", "accounting", "scheduler", "autoscale")
BANNED_MODULES = {
    "time",
    "random",
    "uuid",
    "datetime",
    "os",
    "socket",
    "subprocess",
    "ray",
    "sqlalchemy",
    "fastapi",
    "prometheus_client",
    "rich",
}
BANNED_CALLS = {"open", "print", "input"}
LAYER = {"model": 0, "policy": 1, "accounting": 2, "scheduler": 3, "autoscale": 4}


def core_files():
    for package in CORE_PACKAGES:
        yield from sorted((CORE / package).glob("*.py"))


def test_core_imports_no_io_clock_or_runtime_and_layers_point_down():
    problems = []
    for path in core_files():
        layer = LAYER[path.parent.name]
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in BANNED_MODULES:
                    problems.append(f"{path.name}: imports {name}")
                parts = name.split(".")
                if top == "gpuplane" and len(parts) > 1:
                    if parts[1] not in LAYER:
                        problems.append(f"{path.name}: imports runtime module {name}")
                    elif LAYER[parts[1]] > layer:
                        problems.append(f"{path.name}: imports upward {name}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BANNED_CALLS:
                problems.append(f"{path.name}:{node.lineno}: calls {node.func.id}()")
    assert not problems, problems
