"""Why greedy speculative output can differ from the baseline, found and explained.

In exact arithmetic greedy speculative decoding emits the baseline's tokens one for one. In
bf16/fp16 it need not: the baseline scores one token per forward, the verify scores γ+1 tokens in
one batched forward, and the two matrix-product shapes round differently. Where the target's two
best tokens are nearly tied, the rounding can pick the other one; from there on the two texts
follow different (equally valid) greedy paths. This module finds the first differing position
and reports the target's top-2 tokens and their logit gap in each computation (both recorded
during the run, ``Step.views.top2``). It is a near-tie when both gaps are within a few units of the
dtype's rounding at the logits' size (bf16 at logits ~20: 0.125): arithmetic, not the rule.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import torch

ULPS = 4  # a gap within this many units of the dtype's rounding (at the logits' size) is a near-tie


def position_rows(steps: Sequence) -> list[tuple[int, float, int, float]]:
    """The top-2 record of every emitted token, in output order."""
    return [row for s in steps for row in s.views.top2[: len(s.emitted)]]


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where both have a token and the tokens differ (None: none so far; a
    side that is still running or stopped at its budget is not a difference)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


def explain(base_steps: Sequence, spec_steps: Sequence, dtype: str, decode=None) -> dict | None:
    """The first greedy divergence and why, or None when the outputs are identical."""
    base_ids = [t for s in base_steps for t in s.emitted]
    spec_ids = [t for s in spec_steps for t in s.emitted]
    n = first_difference(base_ids, spec_ids)
    if n is None:
        return None
    base_rows, spec_rows = position_rows(base_steps), position_rows(spec_steps)
    if n >= len(base_rows) or n >= len(spec_rows):
        return None  # not greedy, or a method that records no logits (naive)
    b, v = base_rows[n], spec_rows[n]
    gaps = [r[1] - r[3] for r in base_rows]
    typical = statistics.median(gaps) if gaps else 0.0
    base_gap, verify_gap = b[1] - b[3], v[1] - v[3]
    tolerance = ULPS * rounding_unit(max(abs(b[1]), abs(v[1])), dtype)
    near_tie = max(base_gap, verify_gap) <= tolerance
    if near_tie:
        verdict = (
            f"near-tie flipped by {dtype} rounding: top-2 gap {base_gap:.3f} in the 1-token step vs "
            f"{verify_gap:.3f} in the batched verify (the rounding here is ~{tolerance / ULPS:.3g}), "
            f"typical gap {typical:.2f}"
        )
    else:
        verdict = (
            f"NOT a near-tie (gap {base_gap:.3g} / {verify_gap:.3g}, more than {ULPS} roundings of "
            f"{tolerance / ULPS:.3g} in {dtype}; typical gap {typical:.2f}): this would be a bug, please report it"
        )
    out = {
        "position": n,
        "baseline_token": base_ids[n],
        "speculative_token": spec_ids[n],
        "baseline_top2": [b[0], b[2]],
        "verify_top2": [v[0], v[2]],
        "baseline_top2_gap": base_gap,
        "verify_top2_gap": verify_gap,
        "typical_top2_gap": typical,
        "rounding_tolerance": tolerance,
        "near_tie": near_tie,
        "dtype": dtype,
        "verdict": verdict,
    }
    if decode is not None:
        out["baseline_text"], out["speculative_text"] = decode(base_ids[n]), decode(spec_ids[n])
    return out


def rounding_unit(value: float, dtype: str) -> float:
    """The spacing of ``dtype``'s numbers around ``value`` (one unit in the last place)."""
    eps = torch.finfo(getattr(torch, dtype, torch.float32)).eps
    return eps * 2.0 ** math.floor(math.log2(max(abs(value), 1e-30)))


def dtype_name(model) -> str:
    """The dtype the model's arithmetic rounds in (an int8 weight-only model: its bf16 products)."""
    compute = getattr(model, "specdemo_compute_dtype", None)
    return compute or str(getattr(model, "dtype", "float32")).removeprefix("torch.")
