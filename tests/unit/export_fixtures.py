"""Shared inputs of the export tests: the example policies, export variants, and lookups in a bundle."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuplane.export import ExportOptions
from gpuplane.export.nodes import NodeClass

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLATFORM = str(EXAMPLES / "platform.yaml")
POLICIES = ["platform.yaml", "philly.yaml", "alibaba-openb.yaml", "serving.yaml"]
VARIANTS = [
    ExportOptions(),
    ExportOptions(node_autoscaler="cluster-autoscaler", inference_autoscaler="hpa", serving_metrics="tgi"),
    ExportOptions(node_class=NodeClass("karpenter.azure.com", "AKSNodeClass", "gpu")),
]


def platform(**edits: object) -> str:
    """platform.yaml with edits: ``teams__1__max_gpus=100`` sets teams[1].max_gpus (None deletes the key)."""
    data = yaml.safe_load(Path(PLATFORM).read_text())
    for path, value in edits.items():
        node = data
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[int(key)] if key.isdigit() else node[key]
        last = keys[-1]
        if value is None:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return yaml.safe_dump(data)


def kind_of(bundle, kind: str, name: str | None = None) -> list[dict]:
    """Every emitted object of a kind (and name)."""
    return [o for o in bundle.of_kind(kind) if name is None or o["metadata"]["name"] == name]


def resources(cq: dict, flavor: str) -> dict[str, dict]:
    """The quota entries of one flavor in a ClusterQueue's first resource group, by resource name."""
    group = cq["spec"]["resourceGroups"][0]
    (entry,) = [f for f in group["flavors"] if f["name"] == flavor]
    return {r["name"]: r for r in entry["resources"]}
