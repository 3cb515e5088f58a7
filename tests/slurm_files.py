"""A strict reader for the Slurm files gpuplane writes: the ``Key=Value`` grammar of slurm.conf, gres.conf and
topology.conf (keys case-insensitive, values without spaces, ``#`` comments), Slurm host lists, and the
sacctmgr commands of the generated script. Anything outside the grammar or the parameter sets below is an
error, so a typo in a parameter name fails the tests the way slurmctld would refuse to start."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

_TOKEN = re.compile(r"^(?P<key>[A-Za-z]+)=(?P<value>\S+)$")
_RANGE = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<body>[0-9,\-]+)\](?P<suffix>[^\[\]]*)$")

# slurm.conf(5) parameter names gpuplane may write (global lines); node and partition lines have their own.
GLOBAL_KEYS = {
    k.lower()
    for k in [
        "GresTypes",
        "SelectType",
        "SelectTypeParameters",
        "SchedulerType",
        "SchedulerParameters",
        "PriorityType",
        "PriorityFlags",
        "PriorityWeightQOS",
        "PriorityWeightFairshare",
        "PriorityWeightAge",
        "PriorityWeightJobSize",
        "PriorityWeightPartition",
        "PriorityWeightTRES",
        "PriorityMaxAge",
        "PriorityDecayHalfLife",
        "AccountingStorageEnforce",
        "AccountingStorageTRES",
        "PreemptType",
        "PreemptMode",
        "PreemptExemptTime",
        "TopologyPlugin",
    ]
}
NODE_KEYS = {"nodename", "cpus", "realmemory", "gres", "features", "weight", "state"}
PARTITION_KEYS = {"partitionname", "nodes", "allowaccounts", "allowqos", "maxtime", "oversubscribe", "state"}
GRES_KEYS = {"nodename", "name", "type", "count", "file", "autodetect"}
SWITCH_KEYS = {"switchname", "nodes", "switches"}
QOS_KEYS = {"priority", "preempt", "preemptmode", "gracetime"}
ACCOUNT_KEYS = {"parent", "description", "organization", "fairshare", "grptres", "qos", "defaultqos", "grpjobs"}


def parse_lines(text: str) -> list[dict[str, str]]:
    """Each non-comment line as an ordered ``{lower-case key: value}``; ValueError on any token off the grammar."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs: dict[str, str] = {}
        for token in line.split():
            match = _TOKEN.match(token)
            if match is None:
                raise ValueError(f"line {number}: '{token}' is not Key=Value")
            key = match["key"].lower()
            if key in pairs:
                raise ValueError(f"line {number}: {key} twice")
            pairs[key] = match["value"]
        out.append(pairs)
    return out


def expand(hostlist: str) -> list[str]:
    """Slurm host list (``a-[00-03,07]`` or a comma list of names) to host names."""
    names: list[str] = []
    for part in re.split(r",(?![^\[]*\])", hostlist):
        match = _RANGE.match(part)
        if match is None:
            names.append(part)
            continue
        for piece in match["body"].split(","):
            first, _, last = piece.partition("-")
            width = len(first)
            for index in range(int(first), int(last or first) + 1):
                names.append(f"{match['prefix']}{index:0{width}d}{match['suffix']}")
    return names


def gres_counts(spec: str) -> dict[tuple[str, str], int]:
    """``gpu:h100:8,shard:32`` -> {("gpu", "h100"): 8, ("shard", ""): 32}."""
    out: dict[tuple[str, str], int] = {}
    for item in spec.split(","):
        parts = item.split(":")
        if len(parts) == 3:
            out[(parts[0], parts[1])] = int(parts[2])
        elif len(parts) == 2:
            out[(parts[0], "")] = int(parts[1])
        else:
            raise ValueError(f"bad GRES '{item}'")
    return out


@dataclass
class Accounting:
    """What the sacctmgr script defines."""

    qos: dict[str, dict[str, str]] = field(default_factory=dict)
    accounts: dict[str, dict[str, str]] = field(default_factory=dict)


def parse_sacctmgr(script: str) -> Accounting:
    """The QOS and accounts the script creates, with their settings; ValueError on an unexpected command."""
    result = Accounting()
    for number, raw in enumerate(script.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#") or line in ("set -eu",):
            continue
        words = shlex.split(line.removesuffix("|| true"))
        if words[:2] != ["sacctmgr", "-i"]:
            raise ValueError(f"line {number}: not an sacctmgr -i command")
        verb, entity, rest = words[2], words[3], words[4:]
        table = result.qos if entity == "qos" else result.accounts if entity == "account" else None
        if table is None:
            raise ValueError(f"line {number}: unknown entity {entity}")
        allowed = QOS_KEYS if entity == "qos" else ACCOUNT_KEYS
        if verb == "add":
            name, settings = rest[0], rest[1:]
            if name in table:
                raise ValueError(f"line {number}: {entity} {name} added twice")
            table[name] = {}
        elif verb == "modify" and rest[0] == "where" and rest[1].startswith("name=") and rest[2] == "set":
            name, settings = rest[1].removeprefix("name="), rest[3:]
            if name not in table:
                raise ValueError(f"line {number}: modify of {entity} {name} before it is added")
        else:
            raise ValueError(f"line {number}: unexpected command")
        for token in settings:
            key, _, value = token.partition("=")
            if key.lower() not in allowed or not value:
                raise ValueError(f"line {number}: {entity} setting '{token}'")
            table[name][key.lower()] = value
    return result


def tres(spec: str) -> dict[str, int]:
    """``gres/gpu=8,gres/gpu:h100=4`` -> {"gres/gpu": 8, "gres/gpu:h100": 4}."""
    return {k: int(v) for k, v in (item.split("=") for item in spec.split(","))}
