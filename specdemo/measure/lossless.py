"""Losslessness check: sample the first k tokens N times with the target alone and with
speculative decoding, and test whether the two empirical distributions differ (χ²)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace

from scipy.stats import chi2_contingency

from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, run_all


@dataclass
class LosslessCheck:
    baseline: Counter  # first-k token tuples → count
    speculative: Counter
    p_value: float
    samples: int
    k: int


def first_tokens(make_steps, config: DecodeConfig, seed: int, k: int) -> tuple[int, ...]:
    """One sample of the first k tokens, drawn with ``seed``."""
    cfg = replace(config, max_new_tokens=k, sampling=replace(config.sampling, seed=seed))
    return tuple(run_all(make_steps(cfg)).token_ids)


def two_sample_pvalue(a: Counter, b: Counter, min_expected: float = 5.0) -> float:
    """χ² test of homogeneity; categories too rare for the approximation are pooled."""
    keys = sorted(set(a) | set(b), key=lambda x: -(a[x] + b[x]))
    total_a, total_b = sum(a.values()), sum(b.values())
    share_a = total_a / (total_a + total_b)
    rows_a, rows_b, rare_a, rare_b = [], [], 0, 0
    for key in keys:
        n = a[key] + b[key]
        if n * min(share_a, 1 - share_a) < min_expected:
            rare_a, rare_b = rare_a + a[key], rare_b + b[key]
        else:
            rows_a.append(a[key])
            rows_b.append(b[key])
    if rare_a + rare_b:
        rows_a.append(rare_a)
        rows_b.append(rare_b)
    if len(rows_a) < 2:
        return 1.0  # a single category: nothing can differ
    return float(chi2_contingency([rows_a, rows_b]).pvalue)


def lossless_progress(
    pair, prompt_ids, config: DecodeConfig, samples: int = 200, k: int = 2, every: int = 10
) -> Iterator[LosslessCheck]:
    """The check as it goes: one baseline and one speculative sample at a time, and every
    ``every`` pairs the counts so far with their running χ² p-value (the last one is the result).
    ``config`` must sample (temperature > 0)."""
    from specdemo.errors import InputError

    if config.sampling.greedy:
        raise InputError("the losslessness check compares sampled distributions: set a temperature above 0")
    if not 1 <= k <= 8 or not 10 <= samples <= 5000:
        raise InputError("use 1–8 tokens and 10–5000 samples")
    # The χ² homogeneity test assumes two INDEPENDENT samples: the two sides draw from disjoint
    # seeds (sample i of both sides on one seed would share their random numbers).
    first = config.sampling.seed
    base, spec = Counter(), Counter()
    for i in range(samples):
        base[first_tokens(lambda c: baseline_steps(pair.target, prompt_ids, c, pair.eos), config, first + i, k)] += 1
        spec_seed = first + samples + i
        spec[
            first_tokens(lambda c: decode_steps(pair.target, pair.draft, prompt_ids, c, pair.eos), config, spec_seed, k)
        ] += 1
        if (i + 1) % every == 0 or i + 1 == samples:
            yield LosslessCheck(Counter(base), Counter(spec), two_sample_pvalue(base, spec), i + 1, k)
