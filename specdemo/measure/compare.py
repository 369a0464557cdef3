"""Baseline vs speculative on one prompt: the record that `generate --json` and the app's
/compare endpoint return."""

from __future__ import annotations

from dataclasses import replace

from specdemo.decoding import methods
from specdemo.decoding.engine import DecodeConfig, Run, baseline_steps, decode_steps, run_all, run_timed
from specdemo.measure.diagnosis import limited_by
from specdemo.measure.divergence import explain
from specdemo.measure.metrics import acceptance_rate, mean_accepted_tokens

WARMUP_TOKENS = 8


def compare(pair, prompt_ids: list[int], config: DecodeConfig, warmup: bool = True):
    """Baseline then speculative on the same prompt: (baseline Run, speculative Run)."""
    if warmup:  # one short untimed run of each, so that lazy initialisation is not timed
        short = replace(config, max_new_tokens=min(WARMUP_TOKENS, config.max_new_tokens))
        run_all(baseline_steps(pair.target, prompt_ids, short, pair.eos))
        run_all(decode_steps(pair.target, pair.draft, prompt_ids, short, pair.eos))
    device = pair.target.device
    base = run_timed(lambda: baseline_steps(pair.target, prompt_ids, config, pair.eos), device)
    spec = run_timed(lambda: decode_steps(pair.target, pair.draft, prompt_ids, config, pair.eos), device)
    return base, spec


def comparison_record(
    tokenizer, prompt_ids, base_run: Run, spec_run: Run, dtype: str = "float32", method: str = methods.DRAFT.name
) -> dict:
    """``seconds``: wall clock around each whole generation (the clock to compare with);
    ``compute_seconds``: the sum of the step stopwatches (what the per-step breakdowns add up to);
    ``first_divergence``: where and why greedy outputs differ (null when identical);
    ``limited_by``: below a 1.15× speedup, the term that held it back and what would change it."""

    def side(run: Run):
        ids = run.token_ids
        return {
            "token_ids": ids,
            "text": tokenizer.decode(ids, skip_special_tokens=True),
            "seconds": run.wall_s,
            "compute_seconds": run.seconds,
            "tokens_per_second": len(ids) / run.wall_s if run.wall_s else 0.0,
        }

    spec_steps = spec_run.steps
    spec = side(spec_run) | {
        "acceptance_rate": acceptance_rate(spec_steps),
        "mean_accepted_tokens": mean_accepted_tokens(spec_steps),
        "target_forwards": len(spec_steps),
        "steps": [{"drafted": s.drafted, "accepted": s.accepted, "emitted": s.emitted} for s in spec_steps],
    }
    base = side(base_run)
    speedup = base["seconds"] / spec["seconds"] if spec["seconds"] else 0.0
    why = limited_by(base_run.steps, spec_steps, method, speedup)
    return {
        "prompt_ids": list(prompt_ids),
        "baseline": base,
        "speculative": spec,
        "speedup": speedup,
        "dtype": dtype,
        "first_divergence": explain(base_run.steps, spec_steps, dtype),
        "limited_by": {"term": why["term"], "text": why["text"]} if why else None,
    }
