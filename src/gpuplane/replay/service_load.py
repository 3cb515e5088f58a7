"""A replay's service load: the simulator's replica counts for it, the live plane's, and how far apart they may be.

The simulator replays each service's stretch of load through the serving simulator (``sim.serving``, every
request through the gateway's router, one slot per replica as the live engine starts them). The live plane
replays it in real time (its clock follows the wall clock while a load runs): the requests go through its
gateway, its replica autoscaler decides every tick. Real timing enters here, so replica counts agree within
a tolerance, the one ``tests/integration/test_serving_fidelity_live.py`` states for the same reasons:

- peak ready replicas within ``PEAK_TOLERANCE`` (1): the live gateway measures the rate over a sliding 10 s
  window each tick, the simulator each metrics interval, so the live count may lag by seconds and stop one
  replica short or over;
- ready replica-seconds within ``REPLICA_S_TOLERANCE`` (30 %) of the simulator's: the same lag, at each step
  of the load.

With ``--live`` the simulator is given the replica startup the live run measured (the mean time from a rise of
the desired count to the ready count reaching it), since a Ray actor's start is not the policy's figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuplane.replay.script import LoadStretch, ReplayScript
from gpuplane.sim.serving import compare_serving, select_service
from gpuplane.sim.serving_trace import ServingTrace

PEAK_TOLERANCE = 1
REPLICA_S_TOLERANCE = 0.3


@dataclass(frozen=True, slots=True)
class ReplicaTimeline:
    """A service's ready replicas in each second of its stretch of load (``start`` on the replay's clock)."""

    service: str
    start: float
    ready: np.ndarray

    @property
    def peak(self) -> int:
        """The most replicas ready at once."""
        return int(self.ready.max()) if self.ready.size else 0

    @property
    def replica_s(self) -> float:
        """Ready replica-seconds over the stretch."""
        return float(self.ready.sum())


def simulate_load(script: ReplayScript, stretch: LoadStretch, startup_s: float | None = None) -> ReplicaTimeline:
    """The serving simulator's ready replicas for one stretch (``startup_s``: the replica startup to assume
    instead of the policy's)."""
    spec = select_service(script.policy, stretch.service)
    tokens = np.round(stretch.request_s * spec.model.prefill_tokens_per_s)
    trace = ServingTrace(
        stretch.service,
        f"replay {script.path}",
        0.0,
        np.array([]),
        stretch.arrivals - stretch.start,
        tokens,
        np.zeros(stretch.arrivals.size),
        token_source="requests",
    )
    compared = compare_serving(
        script.policy, stretch.service, trace, ("gpuplane",), replica_model="router", measured_startup_s=startup_s
    )
    seconds = int(np.ceil(stretch.end - stretch.start))
    ready = compared.runs["gpuplane"].ready[:seconds]
    return ReplicaTimeline(stretch.service, stretch.start, ready)


def timeline_of(service: str, start: float, end: float, samples: list[tuple[float, int, int]]) -> ReplicaTimeline:
    """The live samples (replay clock, ready, desired) as ready replicas in the middle of each second."""
    seconds = int(np.ceil(end - start))
    if not samples:
        return ReplicaTimeline(service, start, np.zeros(seconds, dtype=int))
    times = np.array([t for t, _, _ in samples]) - start
    ready = np.array([r for _, r, _ in samples])
    picks = np.clip(np.searchsorted(times, np.arange(seconds) + 0.5), 0, len(ready) - 1)
    return ReplicaTimeline(service, start, ready[picks])


def measured_startup(samples: list[tuple[float, int, int]], default: float) -> float:
    """Mean seconds from a rise of the desired count to the ready count reaching it (``default`` without one)."""
    delays = []
    for index in range(1, len(samples)):
        t, _, desired = samples[index]
        if desired > samples[index - 1][2]:
            reached = next((u for u, ready, _ in samples[index:] if ready >= desired), None)
            if reached is not None:
                delays.append(reached - t)
    return float(np.mean(delays)) if delays else default


@dataclass(frozen=True, slots=True)
class ReplicaAgreement:
    """One service's replica counts in both runtimes and whether they agree within the tolerances."""

    simulated: ReplicaTimeline
    live: ReplicaTimeline | None
    startup_s: float | None = None

    @property
    def agrees(self) -> bool | None:
        """Within both tolerances (None without a live run)."""
        if self.live is None:
            return None
        peak_ok = abs(self.live.peak - self.simulated.peak) <= PEAK_TOLERANCE
        share = abs(self.live.replica_s - self.simulated.replica_s) / max(1.0, self.simulated.replica_s)
        return peak_ok and share <= REPLICA_S_TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "service": self.simulated.service,
            "simulated": {"peak": self.simulated.peak, "replica_s": self.simulated.replica_s},
            "live": None if self.live is None else {"peak": self.live.peak, "replica_s": self.live.replica_s},
            "startup_s": self.startup_s,
            "agrees": self.agrees,
            "tolerance": {"peak": PEAK_TOLERANCE, "replica_s_share": REPLICA_S_TOLERANCE},
        }
