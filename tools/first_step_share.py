"""Probe: how much of a task's wall clock is the first step (the prompt's prefill and the first token)?

    python -m tools.first_step_share --task rewrite --method prompt-lookup --gamma 4

The first step is the same work on both sides (the target encodes the prompt), so where answers are
short and prompts long, it caps the speedup whatever the drafter does. Each prompt of the task runs
through the baseline, then the method (wall clock around each whole generation, warm-up excluded); the
probe prints both totals, the first steps' share, and the speedup with and without them.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, run_timed
from specdemo.measure.tasks import encode_tasks, load_tasks
from specdemo.models import PRESETS, load_pair


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--task", default="rewrite")
    parser.add_argument("--method", default="prompt-lookup", help="draft, prompt-lookup, suffix, hybrid")
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()
    preset = PRESETS[args.preset]
    pair = load_pair(
        preset.target, preset.draft, preset.target_options, preset.draft_options, draft_vocab=preset.draft_vocab
    )
    prompts = encode_tasks(pair.tokenizer, load_tasks(names=[args.task]))[args.task]
    cfg = DecodeConfig(max_new_tokens=args.max_new_tokens)
    method = replace(cfg, gamma=args.gamma, method=args.method)
    sides = {
        "baseline": lambda p: baseline_steps(pair.target, p, cfg, pair.eos),
        args.method: lambda p: decode_steps(pair.target, pair.draft, p, method, pair.eos),
    }
    for make in sides.values():  # warm-up, not timed
        run_timed(lambda make=make: make(prompts[0]), pair.target.device)
    totals = {side: {"wall": 0.0, "first": 0.0, "tokens": 0} for side in sides}
    for p in prompts:
        for side, make in sides.items():
            run = run_timed(lambda make=make, p=p: make(p), pair.target.device)
            totals[side]["wall"] += run.wall_s
            totals[side]["first"] += run.steps[0].seconds
            totals[side]["tokens"] += len(run.token_ids)
    lengths = sorted(len(p) for p in prompts)
    print(f"{args.task}: {len(prompts)} prompts of {lengths[0]}–{lengths[-1]} tokens, {args.method} γ {args.gamma}")
    for side, t in totals.items():
        first = f"first steps {t['first']:.2f} s ({t['first'] / t['wall']:.0%})"
        print(f"  {side:<14} {t['tokens']:>4} tokens  wall {t['wall']:.2f} s  {first}")
    base, spec = totals["baseline"], totals[args.method]
    print(
        f"  speedup {base['wall'] / spec['wall']:.2f}x; without the first steps "
        f"{(base['wall'] - base['first']) / (spec['wall'] - spec['first']):.2f}x"
    )


if __name__ == "__main__":
    main()
