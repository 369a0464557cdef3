"""Eager, static and compiled steps on one pair, in one interleaved run: is capturing the steps worth it here?

    python -m tools.steps_compare [--preset smollm2-135m] [--steps eager,static,compiled] [--out FILE]
    python -m tools.steps_compare --plain --steps eager,static,compiled,aot --out docs/results/steps_cpu_plain.json

``--plain``: fp32 weights as transformers keeps them and the draft's whole vocabulary (no compact kernel,
no reduced head): what every kind of step, aot included, can run.

For each kind of step: the baseline and the draft model at γ, prompt by prompt in turns (time_interleaved:
the machine's drift lands on every row alike), after a warm-up that compiles every shape; prints t_t (the
target's one-token step), c (a draft step over it), t_v/t_t, tokens/s of both sides, the speedup, and
whether every row wrote the eager baseline's tokens. The compile time is in the log (kv.capture).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from specdemo.cli.common import bench_prompts
from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, run_timed
from specdemo.measure.bench import SpecdemoJob, time_interleaved
from specdemo.measure.machine import machine
from specdemo.models import PRESETS, LoadOptions, encode_prompt, load_pair


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--steps", default="eager,static,compiled")
    parser.add_argument("--gamma", type=int, default=None, help="default: the preset's")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=5, help="how many of the preset's held-out prompts")
    parser.add_argument("--plain", action="store_true", help="plain fp32 weights and the draft's whole vocabulary")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    preset = PRESETS[args.preset]
    if args.plain:
        plain = LoadOptions(dtype="float32", quantization="none")
        preset = replace(preset, target_options=plain, draft_options=plain, draft_vocab=0)
    pair = load_pair(
        preset.target, preset.draft, preset.target_options, preset.draft_options, draft_vocab=preset.draft_vocab
    )
    texts = bench_prompts(preset.prompts_file)[: args.prompts]
    prompts = [encode_prompt(pair.tokenizer, t, preset.chat_template) for t in texts]
    gamma = args.gamma or preset.gamma
    jobs = []
    for kind in args.steps.split(","):
        cfg = DecodeConfig(max_new_tokens=args.max_new_tokens, gamma=gamma, steps=kind)
        for run in (  # warm-up, untimed: every shape compiled before the first timed step
            lambda p, c=cfg: baseline_steps(pair.target, p, c, pair.eos),
            lambda p, c=cfg: decode_steps(pair.target, pair.draft, p, c, pair.eos),
        ):
            run_timed(lambda run=run: run(prompts[0]), pair.target.device)
        jobs.append(
            SpecdemoJob(
                "specdemo-baseline",
                None,
                lambda p, c=cfg: baseline_steps(pair.target, p, c, pair.eos),
                pair.target.device,
            )
        )
        jobs.append(
            SpecdemoJob(
                "specdemo-draft",
                gamma,
                lambda p, c=cfg: decode_steps(pair.target, pair.draft, p, c, pair.eos),
                pair.target.device,
            )
        )
    rows = time_interleaved(jobs, prompts, 1, eos=pair.eos)
    record = {"measured": time.strftime("%Y-%m-%d"), "machine": machine()}
    record |= {
        "preset": args.preset,
        "weights": "plain fp32, the draft's whole vocabulary" if args.plain else "the preset's",
        "gamma": gamma,
        "max_new_tokens": args.max_new_tokens,
        "prompts": len(prompts),
        "kinds": {},
    }
    for kind, (base, spec) in zip(args.steps.split(","), zip(rows[::2], rows[1::2])):
        entry = {
            "t_t_ms": 1000 * base.t_target,
            "c": spec.t_draft / base.t_target,
            "tv_tt": spec.t_verify / base.t_target,
            "baseline_tokens_per_second": base.tokens_per_second,
            "speculative_tokens_per_second": spec.tokens_per_second,
            "speedup": spec.tokens_per_second / base.tokens_per_second,
            "same_tokens": bool(base.same_tokens and spec.same_tokens),
        }
        record["kinds"][kind] = entry
        print(
            f"{kind:<9} t_t {entry['t_t_ms']:.1f} ms  c {entry['c']:.2f}  t_v/t_t {entry['tv_tt']:.2f}  "
            f"baseline {entry['baseline_tokens_per_second']:.1f} tok/s  speculative "
            f"{entry['speculative_tokens_per_second']:.1f} tok/s  speedup {entry['speedup']:.2f}x  "
            f"same tokens as eager: {'yes' if entry['same_tokens'] else 'NO'}",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
