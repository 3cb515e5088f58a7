"""Token lengths of a ServeGen category from its own data: the per-client, per-window distributions that
ServeGen ships beside each rate trace (``chunk-<client>-dataset.json``).

Each dataset file maps a window start (seconds) to distributions written as Python dict literals,
``"{length: probability, ...}"``: ``input_tokens`` and ``output_tokens`` for language and reasoning
models; ``text_tokens``, ``image_tokens``, ``audio_tokens``, ``video_tokens`` and ``output_tokens`` for
multimodal ones (the prompt is the sum of the four). A distribution holds from its window until the
client's next one (ServeGen's own ``ClientPool`` reads them so). A request of the category is drawn by
picking a (client, rate window) in proportion to the requests it sent, then its lengths from the
distributions in force for that client then, so the sample has the category's real mix of clients and
times of day.
"""

from __future__ import annotations

import bisect
import json
import re
from pathlib import Path

import numpy as np

from gpuplane.sim.trace import TraceError

PROMPT_FIELDS = ("input_tokens", "text_tokens", "image_tokens", "audio_tokens", "video_tokens")
OUTPUT_FIELD = "output_tokens"
SAMPLE = 20_000
"""Requests drawn: the 99.9th percentile of prefill time rests on 20 of them."""
_PAIR = re.compile(r"(\d+)\s*:\s*([0-9.eE+-]+)")


def _distribution(text: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Lengths and probabilities of one ``"{length: p, ...}"`` field (regex, never eval)."""
    pairs = _PAIR.findall(text)
    if not pairs:
        raise TraceError(f"{where}: no 'length: probability' pairs. Fix: a ServeGen chunk-*-dataset.json field")
    lengths = np.array([int(k) for k, _ in pairs], dtype=np.int64)
    weights = np.array([float(v) for _, v in pairs])
    if (weights < 0).any() or weights.sum() <= 0:
        raise TraceError(f"{where}: probabilities must be non-negative and not all zero")
    return lengths, weights / weights.sum()


def _windows(path: Path) -> tuple[list[int], list[dict[str, str]]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TraceError(f"{path}: not a ServeGen dataset JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise TraceError(f"{path}: expected an object of window start -> token distributions")
    windows = sorted((int(float(k)), v) for k, v in data.items() if isinstance(v, dict))
    return [k for k, _ in windows], [v for _, v in windows]


def sample_tokens(
    folder: Path, client_rates: dict[int, dict[int, float]], seed: int = 0, n: int = SAMPLE
) -> tuple[np.ndarray, np.ndarray] | None:
    """``n`` (prompt, output) token lengths drawn from the category's dataset files in ``folder``, each
    client and window weighted by its request rate (``client_rates``: client -> window start -> req/s);
    None when the folder has no dataset file (ServeGen's public copy in ../shared ships only the rates)."""
    files = {
        int(p.name.split("-")[1]): p for p in folder.glob("chunk-*-dataset.json") if p.name.split("-")[1].isdigit()
    }
    if not files:
        return None
    keys = [(c, ts) for c, rates in client_rates.items() if c in files for ts, r in rates.items() if r > 0]
    if not keys:
        return None
    weights = np.array([client_rates[c][ts] for c, ts in keys])
    rng = np.random.default_rng(seed)
    picks = np.bincount(rng.choice(len(keys), size=n, p=weights / weights.sum()), minlength=len(keys))
    prompts: list[np.ndarray] = []
    outputs: list[np.ndarray] = []
    by_client: dict[int, list[tuple[int, int]]] = {}
    for index in np.flatnonzero(picks):
        client, start = keys[index]
        by_client.setdefault(client, []).append((start, int(picks[index])))
    for client, wanted in sorted(by_client.items()):
        starts, windows = _windows(files[client])
        for start, count in wanted:
            at = bisect.bisect_right(starts, start) - 1
            if at < 0:
                continue
            fields = windows[at]
            where = f"{files[client]} window {starts[at]}"
            if OUTPUT_FIELD not in fields or not any(f in fields for f in PROMPT_FIELDS):
                raise TraceError(f"{where}: needs output_tokens and input_tokens (or text/image/audio/video_tokens)")
            prompt = np.zeros(count, dtype=np.int64)
            for name in PROMPT_FIELDS:
                if name in fields:
                    lengths, p = _distribution(str(fields[name]), f"{where} {name}")
                    prompt += rng.choice(lengths, size=count, p=p)
            lengths, p = _distribution(str(fields[OUTPUT_FIELD]), f"{where} {OUTPUT_FIELD}")
            prompts.append(prompt)
            outputs.append(rng.choice(lengths, size=count, p=p))
    if not prompts:
        return None
    return np.concatenate(prompts), np.concatenate(outputs)
