"""The per-replica queueing model of the serving simulator.

A replica is a continuous-batching LLM server (vLLM-like) with ``max_batch`` request slots. A request holds
a slot for its prefill (context tokens at ``prefill_tokens_per_s``) plus one decode step per generated
token; its latency is the time to first token: the wait for a slot plus its prefill. Requests reach the
replicas through the live gateway's router (the replica with the fewest requests in flight) and wait in
that replica's own queue. Per second, the fleet's slot-seconds serve the work that arrived; what does not
fit waits (a fluid backlog, first come first served, spread evenly over the replicas), and within a second
a request waits when every slot is busy (Erlang C over the fleet's slots, Halfin-Whitt), then for its own
replica's next departures (``autoscale.capacity``: the wait beyond ``t`` decays as
``exp(-c (1 - ρ^N) t / S)`` for ``N`` replicas of ``c`` slots, not as one pooled queue's
``exp(-(Nc - a) t / S)``). ``sim.serving_router`` simulates the same router request by request; it is run
where the trace is small enough, and checks this model in the tests.

Token counts come from the trace where it has them: each request's own (Azure, Mooncake), or a sample of
the category's own distributions for a ServeGen folder that has its chunk-*-dataset.json files
(``sim.servegen_tokens``); otherwise (ServeGen's rate files alone, as in ../shared) from lognormals fitted
to the Azure 2023 conversation trace (context median 1,020 / mean 1,155 tokens, generated median 129 /
mean 211).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuplane.policy.schema_serving import ModelProfileSpec

QUANTILES = 64
BLOCK = 65_536


@dataclass(frozen=True)
class ServingModel:
    """Speed of one replica and the token profile used when the trace has no tokens."""

    prefill_tokens_per_s: float = 8000.0
    decode_step_s: float = 0.025
    max_batch: int = 32
    kv_cache_tokens: int | None = None
    context_median: float = 1020.0
    context_sigma: float = 0.4986
    generated_median: float = 129.0
    generated_sigma: float = 0.992

    @staticmethod
    def of(profile: ModelProfileSpec) -> ServingModel:
        """The replica a service's model profile (policy ``services[].model``) describes."""
        return ServingModel(
            prefill_tokens_per_s=profile.prefill_tokens_per_s,
            decode_step_s=profile.decode_step_s,
            max_batch=profile.max_concurrency,
            kv_cache_tokens=profile.kv_cache_tokens,
        )

    def slots(self, mean_kv_tokens: float) -> int:
        """Concurrent sequences a replica holds: ``max_batch``, or fewer when the KV cache fills first (a
        sequence holds its context plus, on average over its life, half its generated tokens)."""
        if self.kv_cache_tokens is None or mean_kv_tokens <= 0:
            return self.max_batch
        return max(1, min(self.max_batch, int(self.kv_cache_tokens // mean_kv_tokens)))

    def prefill_s(self, context: np.ndarray) -> np.ndarray:
        """Seconds of prefill for these context lengths."""
        return context / self.prefill_tokens_per_s

    def occupancy_s(self, context: np.ndarray, generated: np.ndarray) -> np.ndarray:
        """Seconds a request holds a slot: prefill plus one decode step per generated token."""
        return self.prefill_s(context) + generated * self.decode_step_s


@dataclass(frozen=True)
class TokenProfile:
    """What the queueing model needs of the requests' tokens: slot time mean and spread, prefill quantiles."""

    mean_occupancy_s: float
    std_occupancy_s: float
    prefill_quantiles_s: np.ndarray
    mean_kv_tokens: float = 0.0
    """Tokens a sequence holds in the KV cache, averaged over its life (context plus half the output)."""
    mean_context_tokens: float = 0.0
    mean_generated_tokens: float = 0.0

    @staticmethod
    def of(model: ServingModel, context: np.ndarray, generated: np.ndarray) -> TokenProfile:
        """The profile of a sample of requests."""
        occupancy = model.occupancy_s(context, generated)
        prefill = np.sort(model.prefill_s(context))
        picks = np.quantile(prefill, (np.arange(QUANTILES) + 0.5) / QUANTILES)
        kv = float(np.mean(context + generated / 2)) if context.size else 0.0
        means = (float(np.mean(context)), float(np.mean(generated))) if context.size else (0.0, 0.0)
        return TokenProfile(float(occupancy.mean()), float(occupancy.std()), picks, kv, *means)

    @staticmethod
    def synthetic(model: ServingModel, seed: int, n: int = 50_000) -> TokenProfile:
        """The profile of ``n`` requests drawn from the model's fitted lognormals."""
        return TokenProfile.of(model, *synthetic_tokens(model, seed, n))

    def capacity_rps(self, max_batch: int) -> float:
        """Requests/s one replica completes when all its slots are busy."""
        return max_batch / self.mean_occupancy_s


def synthetic_tokens(model: ServingModel, seed: int, n: int = 50_000) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (context, generated) token counts drawn from the lognormals fitted to the Azure 2023
    conversation trace (the model's ``context_*`` and ``generated_*`` figures)."""
    rng = np.random.default_rng(seed)
    context = rng.lognormal(math.log(model.context_median), model.context_sigma, n)
    generated = rng.lognormal(math.log(model.generated_median), model.generated_sigma, n)
    return np.round(context), np.round(generated)


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF (Abramowitz-Stegun 7.1.26 erf, error below 1.5e-7)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    cdf: np.ndarray = 0.5 * (1.0 + np.sign(x) * erf)
    return cdf


def wait_probability(slots: np.ndarray, offered: np.ndarray) -> np.ndarray:
    """Probability that a request finds every slot busy (Erlang C, Halfin-Whitt); 1 when overloaded."""
    slots = np.asarray(slots, dtype=float)
    offered = np.asarray(offered, dtype=float)
    out = np.ones_like(offered)
    ok = (offered > 0) & (slots > offered)
    beta = np.zeros_like(offered)
    beta[ok] = (slots[ok] - offered[ok]) / np.sqrt(offered[ok])
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        pdf = np.exp(-0.5 * beta**2) / math.sqrt(2 * math.pi)
        ratio = np.where(pdf > 1e-300, beta * _normal_cdf(beta) / np.maximum(pdf, 1e-300), np.inf)
        out[ok] = 1.0 / (1.0 + ratio[ok])
    out[offered <= 0] = 0.0
    clipped: np.ndarray = np.clip(out, 0.0, 1.0)
    return clipped


def wait_decay(slots: np.ndarray, offered: np.ndarray, slots_per_replica: float | None) -> np.ndarray:
    """Per second, how fast the wait of a request that found every slot busy runs out (times the mean slot
    time): ``c (1 - ρ^N)`` behind the least-in-flight router (``autoscale.capacity.wait_decay``), or
    ``slots - offered`` for one pooled queue (``slots_per_replica`` None)."""
    slots = np.asarray(slots, dtype=float)
    offered = np.asarray(offered, dtype=float)
    out = np.zeros_like(offered)
    ok = slots > offered
    if slots_per_replica is None:
        out[ok] = slots[ok] - offered[ok]
        return out
    replicas = slots[ok] / slots_per_replica
    out[ok] = slots_per_replica * (1.0 - (offered[ok] / slots[ok]) ** replicas)
    return out


def attainment(
    profile: TokenProfile,
    slo_s: float,
    backlog_wait_s: np.ndarray,
    slots: np.ndarray,
    offered: np.ndarray,
    slots_per_replica: float | None = None,
) -> np.ndarray:
    """Fraction of each second's requests whose time to first token is within ``slo_s``.

    ``backlog_wait_s``: wait for the backlog ahead (fluid, first come first served); ``slots``: slots of
    ready replicas; ``offered``: slot-seconds of work that arrived in the second (Erlangs);
    ``slots_per_replica``: the slots of one replica, whose own queue a waiting request is in (None: one
    pooled queue). Computed in blocks of ``BLOCK`` seconds, so memory stays bounded on a 14-day trace (one
    block's seconds x prefill quantiles at a time, not the whole trace's).
    """
    slots = np.asarray(slots, dtype=float)
    offered = np.asarray(offered, dtype=float)
    backlog_wait_s = np.asarray(backlog_wait_s, dtype=float)
    result = np.empty(offered.size)
    for start in range(0, offered.size, BLOCK):
        end = min(offered.size, start + BLOCK)
        result[start:end] = _attainment_block(
            profile, slo_s, backlog_wait_s[start:end], slots[start:end], offered[start:end], slots_per_replica
        )
    return result


def _attainment_block(
    profile: TokenProfile,
    slo_s: float,
    backlog_wait_s: np.ndarray,
    slots: np.ndarray,
    offered: np.ndarray,
    slots_per_replica: float | None,
) -> np.ndarray:
    pw = wait_probability(slots, offered)
    theta = wait_decay(slots, offered, slots_per_replica) / profile.mean_occupancy_s
    room = slo_s - backlog_wait_s[:, None] - profile.prefill_quantiles_s[None, :]
    ok = np.where(room >= 0, 1.0 - pw[:, None] * np.exp(-theta[:, None] * np.maximum(room, 0.0)), 0.0)
    result: np.ndarray = ok.mean(axis=1)
    result[slots <= 0] = 0.0
    return result


def prefill_quantile(profile: TokenProfile, q: float) -> float:
    """The ``q`` quantile of prefill time: the latency no replica count removes."""
    return float(profile.prefill_quantiles_s[min(QUANTILES - 1, int(q * QUANTILES))])


def latency_quantile(
    profile: TokenProfile,
    q: float,
    backlog_wait_s: float,
    slots: float,
    offered: float,
    slots_per_replica: float | None = None,
) -> float:
    """An estimate of the ``q`` quantile of time to first token in one second (for the autoscaler's signal);
    when overloaded, the backlog ahead plus the second's excess work spread over the slots."""
    if slots <= 0:
        return math.inf
    prefill = prefill_quantile(profile, q)
    pw = float(wait_probability(np.array([slots]), np.array([offered]))[0])
    if offered >= slots:
        return backlog_wait_s + prefill + (offered - slots) / slots
    extra = 0.0
    if pw > 1 - q:
        decay = float(wait_decay(np.array([slots]), np.array([offered]), slots_per_replica)[0])
        extra = math.log(pw / (1 - q)) * profile.mean_occupancy_s / decay
    return backlog_wait_s + prefill + extra


def best_attainment(profile: TokenProfile, slo_s: float) -> float:
    """The attainment no replica count can beat: the fraction of requests whose prefill alone fits in the
    SLO (unlimited replicas, no wait)."""
    return float(np.mean(profile.prefill_quantiles_s <= slo_s))


@dataclass(frozen=True)
class SloCheck:
    """Whether the service's latency SLO can be met at all under this trace and replica model, and why not."""

    attainable: bool
    best_attainment: float
    target: float
    reason: str | None = None
    """Machine-readable code when unattainable (``prefill_exceeds_slo``)."""
    message: str = ""

    def to_dict(self) -> dict[str, object]:
        """JSON-ready."""
        return {
            "attainable": self.attainable,
            "best_attainment": self.best_attainment,
            "target": self.target,
            "reason": self.reason,
            "message": self.message,
        }


def check_slo(profile: TokenProfile, slo_s: float, target: float) -> SloCheck:
    """Decide whether ``target`` of requests can start within ``slo_s`` with unlimited replicas; when not,
    say why in terms of the prompts (the median prompt's prefill, the share whose prefill is too long)."""
    best = best_attainment(profile, slo_s)
    if best >= target:
        return SloCheck(True, best, target)
    median = float(np.median(profile.prefill_quantiles_s))
    head = (
        f"prefill of the median prompt ({median:.2f} s) exceeds the TTFT SLO ({slo_s:g} s)"
        if median > slo_s
        else f"{1 - best:.1%} of prompts take longer than the TTFT SLO ({slo_s:g} s) to prefill"
    )
    message = (
        f"SLO unattainable: {head}; with unlimited replicas at most {best:.2%} of requests meet it "
        f"(target {target:.2%}). Fix: raise slo.latency_ms, lower slo.attainment, or use a faster model profile"
    )
    return SloCheck(False, best, target, "prefill_exceeds_slo", message)
