"""Strict checkers for the NVIDIA configuration files the GPU Operator reads from ConfigMaps, written from
their Go parsers (no published schema exists):

- mig-parted ``api/spec/v1/spec.go`` (NVIDIA/mig-parted): ``version: v1``, only ``mig-configs``, each config
  a non-empty list of entries with ``devices`` ('all' or a list of indices) and ``mig-enabled``,
  ``mig-devices`` required when enabled and empty otherwise, optional ``device-filter``, nothing else.
- k8s-device-plugin ``api/config/v1`` (NVIDIA/k8s-device-plugin): ``version: v1``, ``sharing.timeSlicing``
  with ``renameByDefault``/``failRequestsGreaterThanOne`` booleans and a non-empty ``resources`` list of
  ``name`` + ``replicas`` > 0 (optional ``rename``, ``devices``).
"""

from __future__ import annotations

import re
from typing import Any

_PROFILE = re.compile(r"^[1-8]g\.\d+(\.\d+)?gb(\+me)?$")
_RESOURCE = re.compile(r"^nvidia\.com/(gpu|mig-[1-8]g\.\d+(\.\d+)?gb)$")


def mig_parted_problems(doc: Any) -> list[str]:
    """Every reason nvidia-mig-parted would refuse this document (empty when it parses)."""
    if not isinstance(doc, dict) or doc.get("version") != "v1":
        return ["version must be v1"]
    problems = [f"unexpected field: {k}" for k in doc if k not in ("version", "mig-configs")]
    configs = doc.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        return [*problems, "at least one entry in 'mig-configs' is required"]
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            problems.append(f"{name}: at least one entry is required")
            continue
        for index, entry in enumerate(entries):
            where = f"{name}[{index}]"
            problems += [f"{where}: unexpected field: {k}" for k in entry if k not in _ENTRY_FIELDS]
            if "devices" not in entry or "mig-enabled" not in entry:
                problems.append(f"{where}: devices and mig-enabled are required")
                continue
            devices = entry["devices"]
            if devices != "all" and not (
                isinstance(devices, list) and all(isinstance(d, int) and d >= 0 for d in devices)
            ):
                problems.append(f"{where}: devices must be 'all' or a list of indices")
            if not isinstance(entry["mig-enabled"], bool):
                problems.append(f"{where}: mig-enabled must be a boolean")
            mig_devices = entry.get("mig-devices")
            if entry["mig-enabled"] and mig_devices is None:
                problems.append(f"{where}: missing required field 'mig-devices' when 'mig-enabled' is true")
            if not entry["mig-enabled"] and mig_devices:
                problems.append(f"{where}: MIG devices included when 'mig-enabled' is false")
            for profile, count in (mig_devices or {}).items():
                if not _PROFILE.match(str(profile)) or not isinstance(count, int) or count < 0:
                    problems.append(f"{where}: bad mig-devices entry {profile}: {count}")
    return problems


_ENTRY_FIELDS = ("device-filter", "devices", "mig-enabled", "mig-devices")
_REPLICA_FIELDS = ("name", "rename", "devices", "replicas")


def device_plugin_problems(doc: Any) -> list[str]:
    """Every reason the NVIDIA device plugin would refuse this configuration (empty when it parses)."""
    if not isinstance(doc, dict) or doc.get("version", "v1") != "v1":
        return ["version must be v1"]
    problems = [f"unexpected field: {k}" for k in doc if k not in ("version", "flags", "resources", "sharing")]
    sharing = doc.get("sharing")
    if sharing is None:
        return problems
    problems += [f"sharing: unexpected field: {k}" for k in sharing if k not in ("timeSlicing", "mps")]
    slicing = sharing.get("timeSlicing", {})
    allowed = ("strategy", "renameByDefault", "failRequestsGreaterThanOne", "resources")
    problems += [f"timeSlicing: unexpected field: {k}" for k in slicing if k not in allowed]
    for flag in ("renameByDefault", "failRequestsGreaterThanOne"):
        if flag in slicing and not isinstance(slicing[flag], bool):
            problems.append(f"timeSlicing.{flag} must be a boolean")
    resources = slicing.get("resources")
    if not isinstance(resources, list) or not resources:
        return [*problems, "timeSlicing: no resources specified"]
    for index, resource in enumerate(resources):
        where = f"timeSlicing.resources[{index}]"
        problems += [f"{where}: unexpected field: {k}" for k in resource if k not in _REPLICA_FIELDS]
        if not _RESOURCE.match(str(resource.get("name", ""))):
            problems.append(f"{where}: no valid resource name")
        replicas = resource.get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas <= 0:
            problems.append(f"{where}: number of replicas must be > 0")
    return problems
