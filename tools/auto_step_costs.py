"""Probe: what auto's steps cost, against what its cost model said they would (in target steps).

    python -m tools.auto_step_costs --prompt "What is the purpose of life?" --max-new-tokens 48
    python -m tools.auto_step_costs --task extract --split held-out    (a task's prompts, each step pooled)
    python -m tools.auto_step_costs --task chat --split tune --by choice    (a row per source and γ)

auto chooses each step's source and γ by expected tokens over ``CostModel.step`` (t_v(1+k)/t_t + k·c, and the
draft model's catch-up, timed on bare forwards at start-up). This runs the baseline, then auto (warm-up
excluded), and prints per choice (source, γ; with --task, per source unless --by choice) the median step's
draft, verify and rest clocks over the baseline's median step, beside the cost the model gave it, and its tokens
a step: where the model is low, auto drafts where it does not pay; a source whose tokens/measured is below 1
loses to a plain step.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from dataclasses import replace

from specdemo.decoding import methods
from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, run_timed
from specdemo.decoding.suffix import SuffixStore
from specdemo.measure.tasks import SPLITS, encode_tasks, load_tasks
from specdemo.models import PRESETS, load_pair
from specdemo.models.loading import encode_prompt


def by_choice(runs: list[tuple[list, list]], key=lambda choice: (choice["source"], choice["gamma"])) -> list[dict]:
    """One row per ``key`` of a choice (source and γ): its steps, the modelled cost (their mean) and the measured
    clocks (their medians), each step in its own prompt's baseline steps. ``runs``: (baseline, auto) steps."""
    groups = defaultdict(list)
    for baseline, speculative in runs:
        t_t = statistics.median(s.seconds for s in baseline[1:] or baseline)  # the prompt's prefill left out
        for s in speculative[1:]:
            groups[key(s.draft_choice)].append((s, t_t))
    rows = []
    for group, steps in sorted(groups.items()):
        clock = {
            part: statistics.median(getattr(s, f"{part}_s") / t_t for s, t_t in steps)
            for part in ("draft", "verify", "rest")
        }
        modelled = statistics.mean(s.draft_choice["cost"] for s, _ in steps)
        tokens = statistics.mean(len(s.emitted) for s, _ in steps)
        rows.append({"choice": group, "steps": len(steps), "tokens": tokens, "modelled": modelled,
                     "measured": sum(clock.values()), **clock})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--prompt", default="What is the purpose of life?")
    parser.add_argument("--task", default=None, help="a task's prompts (assets/prompts/tasks/) instead: by source")
    parser.add_argument("--split", default="held-out", choices=list(SPLITS))
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--by", choices=["source", "choice"], default=None,
                        help="a row per source, or per source and γ (default: per source with --task)")  # fmt: skip
    args = parser.parse_args()
    tasks = load_tasks(names=[args.task], split=args.split) if args.task else {}
    if args.task and not tasks:  # one line, before the models load: not the --prompt silently instead
        parser.error(f"--task {args.task!r}: no such file in assets/prompts/tasks/")
    preset = PRESETS[args.preset]
    pair = load_pair(
        preset.target, preset.draft, preset.target_options, preset.draft_options, draft_vocab=preset.draft_vocab
    )
    prompts = encode_tasks(pair.tokenizer, tasks)[args.task] if tasks else [encode_prompt(pair.tokenizer, args.prompt)]
    cfg = DecodeConfig(max_new_tokens=args.max_new_tokens)
    auto = replace(cfg, gamma=methods.AUTO.gamma, method=methods.AUTO.name)
    methods.AUTO.prepare(pair.target, pair.draft, auto.gamma)  # the start-up measurement, not timed
    runs, walls = [], [0.0, 0.0]
    for i, ids in enumerate(prompts):
        sides = [
            lambda ids=ids: baseline_steps(pair.target, ids, cfg, pair.eos),
            # a store of its own each run: the timed run must not copy the warm-up's answer
            lambda ids=ids: decode_steps(pair.target, pair.draft, ids, auto, pair.eos, store=SuffixStore()),
        ]
        for make in sides if i == 0 else ():  # warm-up, not timed
            run_timed(make, pair.target.device)
        base, spec = (run_timed(make, pair.target.device) for make in sides)
        runs.append((base.steps, spec.steps))
        walls = [walls[0] + base.wall_s, walls[1] + spec.wall_s]
    by_source = args.by == "source" or (args.by is None and args.task)
    key = (lambda c: (c["source"],)) if by_source else (lambda c: (c["source"], c["gamma"]))
    rows = by_choice(runs, key)
    what = f"task {args.task} ({args.split}, {len(prompts)} prompts)" if args.task else repr(args.prompt)
    print(f"auto on {what}, {args.max_new_tokens} tokens: speedup {walls[0] / walls[1]:.2f}x")
    print(f"{'choice':<12} {'steps':>5} {'tokens':>6} {'modelled':>8} {'measured':>8} = {'draft':>5} + {'verify':>6} + "
          f"{'rest':>5} {'tokens/measured':>15}")  # fmt: skip
    for r in rows:
        choice = " γ ".join(str(part) for part in r["choice"])
        per_step = r["tokens"] / r["measured"]
        print(f"{choice:<12} {r['steps']:>5} {r['tokens']:>6.2f} {r['modelled']:>8.2f} {r['measured']:>8.2f} = "
              f"{r['draft']:>5.2f} + {r['verify']:>6.2f} + {r['rest']:>5.2f} {per_step:>15.2f}")  # fmt: skip
    modelled = sum(r["modelled"] * r["steps"] for r in rows)
    measured = sum(r["measured"] * r["steps"] for r in rows)
    print(f"all steps after the first: modelled {modelled:.1f}, measured {measured:.1f} target steps (medians × steps)")


if __name__ == "__main__":
    main()
