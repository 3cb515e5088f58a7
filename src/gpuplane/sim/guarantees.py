"""Quota guarantees in a simulation: GPU-time each team was owed under its nominal quota and did not hold.

A nominal quota promises a team that work asking for no more than the quota is admitted, taking back
what other teams borrowed if it must (Kueue's reclaim). The ledger measures how well a policy keeps
that promise, whatever the policy itself enforces: while a team holds fewer GPUs than its nominal
quota and has pending jobs that fit in the difference, the GPUs of those jobs are owed
(``model.guarantee.owed_gpus``, which the live plane's gauge uses too).

Every policy of a comparison is measured against the same quotas (those of the user's policy), so a
policy without quotas (FIFO, Tiresias-style) shows what ignoring them costs the teams they protect.
Owed time includes the wait for the next scheduling cycle and for runs protected by a minimum runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuplane.model.guarantee import owed_gpus
from gpuplane.policy import PolicySpec


@dataclass(slots=True)
class _Team:
    nominal: float
    held: float = 0.0
    pending: dict[float, int] = field(default_factory=dict)
    rate: float = 0.0
    since: float = 0.0
    owed_gpu_s: float = 0.0

    def settle(self, now: float) -> None:
        """Add the owed GPUs since the last change, up to ``now``."""
        self.owed_gpu_s += self.rate * (now - self.since)
        self.since = now


class GuaranteeLedger:
    """Tracks, per team, held GPUs and pending jobs, and integrates the GPUs owed under the nominal quota."""

    def __init__(self, nominal_gpus: Mapping[str, float]) -> None:
        self._teams = {name: _Team(gpus) for name, gpus in nominal_gpus.items() if gpus > 0}

    @classmethod
    def of(cls, policy: PolicySpec) -> GuaranteeLedger:
        """A ledger holding each team of ``policy`` to its nominal quota."""
        return cls({team.name: team.nominal_gpus() for team in policy.teams})

    def _change(self, team: str, now: float) -> _Team | None:
        state = self._teams.get(team)
        if state is not None:
            state.settle(now)
        return state

    def held(self, team: str, gpus: float, now: float) -> None:
        """The team's running GPUs changed by ``gpus`` (a start, or a stop when negative)."""
        state = self._change(team, now)
        if state is not None:
            state.held += gpus
            state.rate = owed_gpus(state.nominal, state.held, state.pending)

    def asked(self, team: str, gpus: float, now: float) -> None:
        """A job of ``gpus`` GPUs became pending (submitted, preempted or interrupted)."""
        state = self._change(team, now)
        if state is not None:
            state.pending[gpus] = state.pending.get(gpus, 0) + 1
            state.rate = owed_gpus(state.nominal, state.held, state.pending)

    def granted(self, team: str, gpus: float, now: float) -> None:
        """A pending job of ``gpus`` GPUs started: it is no longer asked for."""
        state = self._change(team, now)
        if state is not None:
            left = state.pending[gpus] - 1
            if left:
                state.pending[gpus] = left
            else:
                del state.pending[gpus]
            state.rate = owed_gpus(state.nominal, state.held, state.pending)

    def owed_gpu_s(self, now: float) -> dict[str, float]:
        """GPU-seconds owed and not held, per team with a nominal quota, up to ``now``."""
        for state in self._teams.values():
            state.settle(now)
        return {name: state.owed_gpu_s for name, state in self._teams.items()}
