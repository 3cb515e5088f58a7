"""NVIDIA GPU Operator settings from the pools: the ClusterPolicy, the MIG manager's mig-parted layouts and the
device plugin's time-slicing for pools with ``gpu_sharing``, and the node labels that pick them per pool.

The MIG strategy is ``mixed`` as soon as one pool has MIG profiles: the rest of the export (Kueue resource
transformations, ResourceQuotas, Deployments) names slices ``nvidia.com/mig-<profile>``, which only the mixed
strategy advertises, and a pool's layout may hold several profiles on one node. Without MIG pools it is
``none`` and the MIG manager is off. Nodes select their layout by the label ``nvidia.com/mig.config=<pool>``
and their device-plugin configuration by ``nvidia.com/device-plugin.config=<pool>``; both labels are set on
the pool's NodePools (or node groups) by ``nodes.py``.
"""

from __future__ import annotations

import yaml

from gpuplane.export.mig_layout import MigLayout, mig_layout
from gpuplane.export.model import ExportBundle, ExportError, Obj
from gpuplane.export.view import GPU, PolicyView, metadata, mig_resource, tolerations_for
from gpuplane.policy.schema import PoolSpec

FILE = "gpu-operator.yaml"
NAMESPACE = "gpu-operator"
CLUSTER_POLICY = "cluster-policy"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIGMAP = "gpuplane-mig-parted-config"
DEVICE_PLUGIN_CONFIGMAP = "gpuplane-device-plugin-config"
MIG_DISABLED = "all-disabled"
WHOLE_GPUS = "whole-gpus"
DEFAULT_SHARE_REPLICAS = 4
"""Time-slices per GPU on shared pools unless the export is told otherwise (the GPU Operator docs' example)."""


def operator_node_labels(pool: PoolSpec) -> dict[str, str]:
    """The GPU Operator labels a pool's nodes carry: its MIG layout and its device-plugin configuration."""
    labels: dict[str, str] = {}
    if pool.mig_profiles:
        labels[MIG_CONFIG_LABEL] = pool.name
    if pool.gpu_sharing:
        labels[DEVICE_PLUGIN_CONFIG_LABEL] = pool.name
    return labels


def mig_strategy(view: PolicyView) -> str:
    """``mixed`` when any pool has MIG profiles, else ``none`` (see the module docstring for why not single)."""
    return "mixed" if any(p.mig_profiles for p in view.policy.pools) else "none"


def emit_gpu_operator(view: PolicyView, bundle: ExportBundle, share_replicas: int = DEFAULT_SHARE_REPLICAS) -> None:
    """The ClusterPolicy, and the mig-parted and time-slicing ConfigMaps when some pool needs them."""
    _check_names(view)
    layouts = [layout for pool in view.policy.pools if (layout := mig_layout(view, pool)) is not None]
    shared = [pool for pool in view.policy.pools if pool.gpu_sharing]
    bundle.add(FILE, cluster_policy(view, bool(layouts), bool(shared)))
    if layouts:
        bundle.add(FILE, _mig_configmap(layouts))
        _layout_warnings(view, bundle, layouts)
    if shared:
        layout_of = {layout.pool: layout for layout in layouts}
        bundle.add(FILE, _device_plugin_configmap(shared, layout_of, share_replicas))
        for pool in shared:
            bundle.warn(
                f"pools[{pool.name}].gpu_sharing",
                "fractional GPU shares",
                f"the device plugin time-slices each GPU of the pool into {share_replicas} replicas of the same "
                "resource: a pod asking one gets a time slice of a GPU with no memory or compute isolation and "
                "Kueue charges it a whole GPU (gpuplane charges gpu_milli); pods asking more than one fail on "
                "these nodes (failRequestsGreaterThanOne), so multi-GPU work belongs on other pools",
                "approximated",
            )


def cluster_policy(view: PolicyView, mig: bool, shared: bool) -> Obj:
    """The GPU Operator's ClusterPolicy: driver, toolkit, device plugin, GFD and the DCGM exporter on, the MIG
    strategy and manager from the pools, and tolerations for every taint of the GPU pools so the operator's
    DaemonSets run on all of them."""
    device_plugin: Obj = {"enabled": True}
    if shared:
        device_plugin["config"] = {"name": DEVICE_PLUGIN_CONFIGMAP, "default": WHOLE_GPUS}
    tolerations = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}, *tolerations_for(view.policy.pools)]
    mig_manager: Obj = {"enabled": mig}
    if mig:
        mig_manager["config"] = {"name": MIG_CONFIGMAP, "default": MIG_DISABLED}
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": metadata(CLUSTER_POLICY),
        "spec": {
            "operator": {"defaultRuntime": "containerd"},
            "daemonsets": {"priorityClassName": "system-node-critical", "tolerations": tolerations},
            "driver": {"enabled": True},
            "toolkit": {"enabled": True},
            "devicePlugin": device_plugin,
            "gfd": {"enabled": True},
            "dcgm": {"enabled": False},
            "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True, "interval": "15s"}},
            "nodeStatusExporter": {"enabled": False},
            "mig": {"strategy": mig_strategy(view)},
            "migManager": mig_manager,
        },
    }


def mig_parted_config(layouts: list[MigLayout]) -> Obj:
    """The mig-parted document: ``all-disabled`` for nodes without a label, and one named layout per MIG pool."""
    configs: dict[str, list[Obj]] = {MIG_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for layout in layouts:
        entries: list[Obj] = [
            {"devices": list(block.devices), "mig-enabled": True, "mig-devices": {block.profile: block.per_gpu}}
            for block in layout.blocks
        ]
        if layout.whole:
            entries.append({"devices": list(layout.whole), "mig-enabled": False})
        configs[layout.pool] = entries
    return {"version": "v1", "mig-configs": configs}


def time_slicing_config(resources: list[str], replicas: int) -> Obj:
    """A device-plugin configuration that time-slices each listed resource into ``replicas``."""
    return {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": name, "replicas": replicas} for name in resources],
            }
        },
    }


def _dump(document: Obj) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def _mig_configmap(layouts: list[MigLayout]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(MIG_CONFIGMAP, NAMESPACE),
        "data": {"config.yaml": _dump(mig_parted_config(layouts))},
    }


def _device_plugin_configmap(shared: list[PoolSpec], layout_of: dict[str, MigLayout], replicas: int) -> Obj:
    data = {WHOLE_GPUS: _dump({"version": "v1"})}
    for pool in shared:
        layout = layout_of.get(pool.name)
        resources = [GPU, *(mig_resource(b.profile) for b in layout.blocks)] if layout else [GPU]
        data[pool.name] = _dump(time_slicing_config(resources, replicas))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(DEVICE_PLUGIN_CONFIGMAP, NAMESPACE),
        "data": data,
    }


def _layout_warnings(view: PolicyView, bundle: ExportBundle, layouts: list[MigLayout]) -> None:
    for layout in layouts:
        pool = view.pools[layout.pool]
        dropped = ""
        if layout.dropped:
            dropped = f"; {', '.join(layout.dropped)} left out (more profiles than GPUs per node)"
        bundle.warn(
            f"pools[{pool.name}].mig_profiles",
            "MIG slicing on demand",
            "gpuplane cuts any GPU into any mix of the pool's profiles (or keeps it whole) as work arrives; the MIG "
            f"manager applies one fixed layout per node ({layout.describe()}{dropped}); edit the layout in "
            f"{MIG_CONFIGMAP} to change the mix",
            "approximated",
        )


def _check_names(view: PolicyView) -> None:
    problems = [
        f"pools[{pool.name}]: the name '{pool.name}' is reserved by the GPU Operator export (the "
        f"{'MIG layout' if pool.name == MIG_DISABLED else 'device-plugin configuration'} of unlabelled nodes). "
        "Fix: rename the pool"
        for pool in view.policy.pools
        if (pool.mig_profiles and pool.name == MIG_DISABLED) or (pool.gpu_sharing and pool.name == WHOLE_GPUS)
    ]
    if problems:
        raise ExportError(problems)
