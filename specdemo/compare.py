"""Baseline vs speculative on one prompt: the record that `generate --json` and the app's
/compare endpoint return."""

from __future__ import annotations

from dataclasses import replace

from .engine import DecodeConfig, baseline_steps, decode_steps, run_all
from .metrics import acceptance_rate, mean_accepted_tokens

WARMUP_TOKENS = 8


def compare(pair, prompt_ids: list[int], config: DecodeConfig, warmup: bool = True):
    """Baseline then speculative on the same prompt: (baseline Run, speculative Run)."""
    if warmup:  # one short untimed run of each, so that lazy initialisation is not timed
        short = replace(config, max_new_tokens=min(WARMUP_TOKENS, config.max_new_tokens))
        run_all(baseline_steps(pair.target, prompt_ids, short, pair.eos))
        run_all(decode_steps(pair.target, pair.draft, prompt_ids, short, pair.eos))
    base = run_all(baseline_steps(pair.target, prompt_ids, config, pair.eos))
    spec = run_all(decode_steps(pair.target, pair.draft, prompt_ids, config, pair.eos))
    return base, spec


def comparison_record(tokenizer, prompt_ids, base_steps, spec_steps) -> dict:
    def side(steps):
        ids = [t for s in steps for t in s.emitted]
        seconds = sum(s.seconds for s in steps)
        return {
            "token_ids": ids,
            "text": tokenizer.decode(ids, skip_special_tokens=True),
            "seconds": seconds,
            "tokens_per_second": len(ids) / seconds if seconds else 0.0,
        }

    spec = side(spec_steps) | {
        "acceptance_rate": acceptance_rate(spec_steps),
        "mean_accepted_tokens": mean_accepted_tokens(spec_steps),
        "target_forwards": len(spec_steps),
        "steps": [{"drafted": s.drafted, "accepted": s.accepted, "emitted": s.emitted} for s in spec_steps],
    }
    base = side(base_steps)
    return {
        "prompt_ids": list(prompt_ids),
        "baseline": base,
        "speculative": spec,
        "speedup": base["seconds"] / spec["seconds"] if spec["seconds"] else 0.0,
    }
