"""``python -m specdemo precision``: speed and greedy identity of one preset in several dtypes
(and ``int8-cpu``: fp32 with int8 weight-only linears in the target).

For each dtype: load the pair in it, run the baseline and speculative decoding on every prompt
(greedy, wall clock around each whole generation), and count the prompts whose two outputs are
token-identical; every difference is explained (``divergence.py``). This is the table behind
each preset's default dtype.
"""

from __future__ import annotations

from specdemo.decoding.engine import DecodeConfig
from specdemo.measure.compare import compare
from specdemo.measure.divergence import dtype_name, explain


def measure_dtype(load, prompts: list[str], encode, config: DecodeConfig, dtype: str) -> dict:
    """``load(dtype)`` → Pair; ``encode(pair, text)`` → ids."""
    pair = load(dtype)
    base_s = spec_s = 0.0
    base_n = spec_n = identical = 0
    divergences = []
    for text in prompts:
        ids = encode(pair, text)
        base, spec = compare(pair, ids, config)
        base_s, spec_s = base_s + base.wall_s, spec_s + spec.wall_s
        base_n, spec_n = base_n + len(base.token_ids), spec_n + len(spec.token_ids)
        why = explain(base.steps, spec.steps, dtype_name(pair.target))  # the arithmetic it rounds in
        identical += why is None and base.token_ids == spec.token_ids
        if why is not None:
            divergences.append(why)
    return {
        "dtype": dtype,
        "baseline_tokens_per_second": base_n / base_s,
        "speculative_tokens_per_second": spec_n / spec_s,
        "speedup": (spec_n / spec_s) / (base_n / base_s),
        "identical": identical,
        "prompts": len(prompts),
        "near_ties": sum(d["near_tie"] for d in divergences),
        "first_divergences": [d["position"] for d in divergences],
        "divergences": divergences,
    }


def precision_table(load, prompts, encode, dtypes, gamma: int, max_new_tokens: int) -> list[dict]:
    config = DecodeConfig(max_new_tokens=max_new_tokens, gamma=gamma)
    return [measure_dtype(load, prompts, encode, config, d) for d in dtypes]


def format_precision(rows: list[dict]) -> str:
    lines = [
        "| dtype | baseline tok/s | speculative tok/s | speedup | greedy outputs identical | differences explained |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        where = ", ".join(str(p) for p in r["first_divergences"]) or "–"
        lines.append(
            f"| {r['dtype']} | {r['baseline_tokens_per_second']:.1f} | {r['speculative_tokens_per_second']:.1f} | "
            f"{r['speedup']:.2f}x | {r['identical']}/{r['prompts']} | {r['near_ties']} near-ties "
            f"(first difference at token {where}) |"
        )
    return "\n".join(lines)
