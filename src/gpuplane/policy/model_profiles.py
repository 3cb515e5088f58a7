"""Shipped model profiles: what one replica of a named model on a named GPU can do, and where it comes from.

A service names a profile (``services[].model.profile``) instead of guessing prefill and decode speeds;
every figure is derived below from the GPU's datasheet and the model's published architecture, with the
derivation in code and in docs/autoscaling.md ("Shipped model profiles"), where each source is cited:

- KV cache per token: ``2 (key and value) × layers × KV heads × head dim × bytes per value``;
- KV cache tokens: ``(GPU memory × tensor parallel × MEMORY_UTILIZATION − weights) / KV bytes per token``
  (vLLM's default ``gpu_memory_utilization`` is 0.9; activations and the CUDA graph are ignored);
- prefill tokens/s: ``PREFILL_FLOPS_SHARE × dense BF16 peak × tensor parallel / (2 × parameters)`` (two
  FLOPs per parameter per prompt token; attention's quadratic term is ignored at these prompt lengths);
- decode step: ``(weights + KV cache in use) / (DECODE_BANDWIDTH_SHARE × memory bandwidth × tensor
  parallel)``, with the KV cache full: the step when the replica runs at the load the autoscaler sizes
  for (a step reads every weight and every cached token once).

Pure data and arithmetic: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

MEMORY_UTILIZATION = 0.9
"""Share of GPU memory a vLLM replica takes (vLLM's ``gpu_memory_utilization`` default)."""
PREFILL_FLOPS_SHARE = 0.5
"""Share of the dense BF16 peak a prefill reaches: an assumption (no published measurement of it was found
for these models; docs/autoscaling.md says so)."""
DECODE_BANDWIDTH_SHARE = 0.6
"""Share of peak memory bandwidth a decode step reaches: the low end of the 60-85 % reported for serving
stacks (docs/autoscaling.md)."""
MAX_CONCURRENCY = 256
"""Sequences a replica batches at most before its KV cache limits it."""


@dataclass(frozen=True)
class Gpu:
    """A GPU's datasheet figures."""

    name: str
    bf16_tflops: float
    memory_gb: float
    bandwidth_gb_s: float


@dataclass(frozen=True)
class Architecture:
    """A model's published shape (its Hugging Face ``config.json``)."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden // self.heads

    @property
    def parameters(self) -> float:
        """Weights: per layer the query and output projections (``2 h²``), the key and value projections
        (``2 h × KV heads × head dim``) and the gated MLP (``3 h × intermediate``), plus the input
        embedding and the output head (``2 × vocab × h``); norms are left out (under 0.01 %)."""
        attention = 2 * self.hidden**2 + 2 * self.hidden * self.kv_heads * self.head_dim
        return float(self.layers * (attention + 3 * self.hidden * self.intermediate) + 2 * self.vocab * self.hidden)


@dataclass(frozen=True)
class ShippedProfile:
    """A model on a GPU at a tensor-parallel degree and weight precision, and the replica it makes."""

    name: str
    model: Architecture
    gpu: Gpu
    tensor_parallel: int
    weight_bytes: float = 2.0
    """Bytes per parameter of the weights: 2 for BF16, 0.5 for 4-bit weight-only quantization."""
    quality: str = "full"
    """``full``, or ``lower`` for a quantized or smaller stand-in (a fallback variant)."""

    @property
    def weights_gb(self) -> float:
        """Weights in GB."""
        return self.model.parameters * self.weight_bytes / 1e9

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes one token holds (BF16 keys and values in every layer)."""
        return 2 * self.model.layers * self.model.kv_heads * self.model.head_dim * 2

    @property
    def kv_cache_tokens(self) -> int:
        """Tokens the replica's KV cache holds."""
        free_gb = self.gpu.memory_gb * self.tensor_parallel * MEMORY_UTILIZATION - self.weights_gb
        return max(0, int(free_gb * 1e9 // self.kv_bytes_per_token))

    @property
    def prefill_tokens_per_s(self) -> float:
        """Prompt tokens the replica prefills per second."""
        flops = PREFILL_FLOPS_SHARE * self.gpu.bf16_tflops * 1e12 * self.tensor_parallel
        return flops / (2 * self.model.parameters)

    @property
    def decode_step_s(self) -> float:
        """Seconds per decode step with the KV cache full."""
        read_gb = self.weights_gb + self.kv_cache_tokens * self.kv_bytes_per_token / 1e9
        return read_gb / (DECODE_BANDWIDTH_SHARE * self.gpu.bandwidth_gb_s * self.tensor_parallel)

    def fields(self) -> dict[str, float | int]:
        """The ``services[].model`` fields this profile sets."""
        return {
            "max_concurrency": MAX_CONCURRENCY,
            "prefill_tokens_per_s": round(self.prefill_tokens_per_s, 1),
            "decode_step_s": round(self.decode_step_s, 5),
            "kv_cache_tokens": self.kv_cache_tokens,
            "tensor_parallel": self.tensor_parallel,
        }


A100_80GB = Gpu("a100-80gb", bf16_tflops=312.0, memory_gb=80.0, bandwidth_gb_s=2039.0)
LLAMA_2_7B = Architecture("llama-2-7b", 4096, 11008, layers=32, heads=32, kv_heads=32, vocab=32000)
LLAMA_2_13B = Architecture("llama-2-13b", 5120, 13824, layers=40, heads=40, kv_heads=40, vocab=32000)
LLAMA_2_70B = Architecture("llama-2-70b", 8192, 28672, layers=80, heads=64, kv_heads=8, vocab=32000)

PROFILES: dict[str, ShippedProfile] = {
    p.name: p
    for p in (
        ShippedProfile("llama-2-7b/a100-80gb", LLAMA_2_7B, A100_80GB, tensor_parallel=1),
        ShippedProfile("llama-2-13b/a100-80gb", LLAMA_2_13B, A100_80GB, tensor_parallel=1),
        ShippedProfile("llama-2-70b/a100-80gb-tp4", LLAMA_2_70B, A100_80GB, tensor_parallel=4),
        ShippedProfile(
            "llama-2-70b-int4/a100-80gb-tp2",
            LLAMA_2_70B,
            A100_80GB,
            tensor_parallel=2,
            weight_bytes=0.5,
            quality="lower",
        ),
    )
}
"""The shipped profiles by name (``services[].model.profile``)."""
