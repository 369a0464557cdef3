"""Probe: what auto's steps cost, against what its cost model said they would (in target steps).

    python -m tools.auto_step_costs --prompt "What is the purpose of life?" --max-new-tokens 48

auto chooses each step's source and γ by expected tokens over ``CostModel.step`` (t_v(1+k)/t_t + k·c, timed
on bare forwards at start-up). This runs the baseline, then auto (warm-up excluded), and prints per choice
(source, γ) the median step's draft, verify and rest clocks over the baseline's median step, beside the cost
the model gave it: where the model is low, auto drafts where it does not pay.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from dataclasses import replace

from specdemo.decoding import methods
from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, run_timed
from specdemo.decoding.suffix import SuffixStore
from specdemo.models import PRESETS, load_pair
from specdemo.models.loading import encode_prompt


def by_choice(baseline, speculative) -> list[dict]:
    """One row per (source, γ): its steps, the modelled cost and the measured clocks, in baseline steps."""
    t_t = statistics.median(s.seconds for s in baseline[1:] or baseline)  # the prompt's prefill left out
    groups = defaultdict(list)
    for s in speculative[1:]:
        groups[(s.draft_choice["source"], s.draft_choice["gamma"])].append(s)
    rows = []
    for (source, gamma), steps in sorted(groups.items()):
        clock = {
            part: statistics.median(getattr(s, f"{part}_s") for s in steps) / t_t
            for part in ("draft", "verify", "rest")
        }
        rows.append({"source": source, "gamma": gamma, "steps": len(steps), "modelled": steps[0].draft_choice["cost"],
                     "measured": sum(clock.values()), **clock})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--prompt", default="What is the purpose of life?")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    preset = PRESETS[args.preset]
    pair = load_pair(
        preset.target, preset.draft, preset.target_options, preset.draft_options, draft_vocab=preset.draft_vocab
    )
    ids = encode_prompt(pair.tokenizer, args.prompt)
    cfg = DecodeConfig(max_new_tokens=args.max_new_tokens)
    auto = replace(cfg, gamma=methods.AUTO.gamma, method=methods.AUTO.name)
    methods.AUTO.prepare(pair.target, pair.draft, auto.gamma)  # the start-up measurement, not timed
    sides = [
        lambda: baseline_steps(pair.target, ids, cfg, pair.eos),
        # a store of its own each run: the timed run must not copy the warm-up's answer
        lambda: decode_steps(pair.target, pair.draft, ids, auto, pair.eos, store=SuffixStore()),
    ]
    for make in sides:  # warm-up, not timed
        run_timed(make, pair.target.device)
    base, spec = (run_timed(make, pair.target.device) for make in sides)
    rows = by_choice(base.steps, spec.steps)
    print(f"auto on {args.prompt!r}, {args.max_new_tokens} tokens: speedup {base.wall_s / spec.wall_s:.2f}x")
    print(f"{'choice':<12} {'steps':>5} {'modelled':>8} {'measured':>8} = {'draft':>5} + {'verify':>6} + {'rest':>5}")
    for r in rows:
        choice = f"{r['source']} γ {r['gamma']}"
        print(f"{choice:<12} {r['steps']:>5} {r['modelled']:>8.2f} {r['measured']:>8.2f} = "
              f"{r['draft']:>5.2f} + {r['verify']:>6.2f} + {r['rest']:>5.2f}")  # fmt: skip
    modelled = sum(r["modelled"] * r["steps"] for r in rows)
    measured = sum(r["measured"] * r["steps"] for r in rows)
    print(f"all steps after the first: modelled {modelled:.1f}, measured {measured:.1f} target steps (medians × steps)")


if __name__ == "__main__":
    main()
