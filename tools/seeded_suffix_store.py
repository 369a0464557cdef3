"""Probe: does a suffix store seeded with the target's own answers to *other* questions draft new ones?

    python -m tools.seeded_suffix_store --write 10     # 10 batches of 32 greedy answers (≈ 8 min here)
    python -m tools.seeded_suffix_store --prompts 10 --max-new-tokens 64

Answers are written once, greedy, by the target (torch's fp32 products, batched) to topic × task
instructions of the distillation recipe (none of them a repo prompt), in JSON shards under the user
cache folder. The race then decodes held-out instructions with the draft model (γ 1), suffix decoding
and the hybrid over a store holding those answers, and the hybrid over an empty store; each method has
its own store (a store also learns the answers it writes, so sharing one would leak each prompt's
answer into the next method's run). Every text must equal the baseline's; the speedups are wall clock
around each whole generation, interleaved per prompt.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, run_timed
from specdemo.decoding.suffix import SuffixStore
from specdemo.models import PRESETS, ModelCache, encode_prompt, load_pair, smollm2
from specdemo.recipes.distill_data import DataConfig, held_out_prompts, make_instructions

ROOT = Path(__file__).resolve().parents[2]
SHARDS = smollm2.cache_dir() / "data" / "suffix-corpus"
BATCH = 32


def write_answers(batches: int, shards: Path, batch_size: int = BATCH, answer_tokens: int = 128) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = smollm2.resolve_target()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    held_out = held_out_prompts(ROOT / "assets" / "prompts")
    instructions = [
        i for i in make_instructions(DataConfig(instructions=2880, stories=0, seed=1), []) if i.lower() not in held_out
    ]
    shards.mkdir(parents=True, exist_ok=True)
    for b in range(batches):
        path = shards / f"shard-{b:04d}.json"
        if path.exists():  # resumable
            continue
        batch = instructions[b * batch_size : (b + 1) * batch_size]
        messages = [[{"role": "user", "content": text}] for text in batch]
        enc = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", padding=True, return_dict=True
        )
        start = time.time()
        with torch.inference_mode():
            out = model.generate(
                **enc, max_new_tokens=answer_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
        answers = []
        for row in out[:, enc["input_ids"].shape[1] :].tolist():
            while row and row[-1] == tokenizer.pad_token_id:
                row.pop()
            answers.append(row)
        path.write_text(json.dumps({"instructions": batch, "answers": answers}))
        tokens = sum(map(len, answers))
        print(f"{path.name}: {tokens} tokens, {tokens / (time.time() - start):.0f} tok/s", flush=True)


def seeded_store(answers: list[list[int]]) -> SuffixStore:
    store = SuffixStore(max_answers=len(answers) + 256)
    for answer in answers:
        store.remember(answer)
    return store


def race(n_prompts: int, max_new_tokens: int, shards: Path) -> None:
    preset = PRESETS["smollm2-135m"]
    pair = load_pair(
        preset.target, preset.draft, preset.target_options, preset.draft_options, ModelCache(), preset.draft_vocab
    )
    answers = [a for f in sorted(shards.glob("shard-*.json")) for a in json.loads(f.read_text())["answers"]]
    print(f"seed: {len(answers)} answers, {sum(map(len, answers))} tokens")
    config = DecodeConfig(max_new_tokens=max_new_tokens)
    methods = {
        "draft model, γ 1": (DecodeConfig(max_new_tokens=max_new_tokens, gamma=1), None),
        "suffix, seeded store, γ 4": (
            DecodeConfig(max_new_tokens=max_new_tokens, gamma=4, method="suffix"),
            seeded_store(answers),
        ),
        "hybrid, seeded store, γ 4": (
            DecodeConfig(max_new_tokens=max_new_tokens, gamma=4, method="hybrid"),
            seeded_store(answers),
        ),
        "hybrid, empty store, γ 4": (
            DecodeConfig(max_new_tokens=max_new_tokens, gamma=4, method="hybrid"),
            SuffixStore(),
        ),
    }
    wall = dict.fromkeys(["baseline", *methods], 0.0)
    counts = {m: [0, 0] for m in methods}  # tokens, target forwards
    cpu = torch.device("cpu")
    for prompt in preset.prompts_file.read_text().splitlines()[:n_prompts]:
        ids = encode_prompt(pair.tokenizer, prompt)
        base = run_timed(lambda ids=ids: baseline_steps(pair.target, ids, config, eos=pair.eos), cpu)
        wall["baseline"] += base.wall_s
        for m, (cfg, store) in methods.items():
            run = run_timed(
                lambda ids=ids, cfg=cfg, store=store: decode_steps(
                    pair.target, pair.draft, ids, cfg, eos=pair.eos, store=store
                ),
                cpu,
            )
            assert run.token_ids == base.token_ids, (m, prompt)
            wall[m] += run.wall_s
            counts[m][0] += len(run.token_ids)
            counts[m][1] += len(run.steps)
    for m, (tokens, forwards) in counts.items():
        print(f"{m:>28}: {wall['baseline'] / wall[m]:.2f}x, τ {tokens / forwards:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=int, default=0, help="write this many batches of answers first")
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--shards", type=Path, default=SHARDS, help="the answers' folder")
    parser.add_argument("--batch", type=int, default=BATCH, help="--write: answers per batch")
    parser.add_argument("--answer-tokens", type=int, default=128, help="--write: the longest answer")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.write:
        write_answers(args.write, args.shards, args.batch, args.answer_tokens)
    else:
        race(args.prompts, args.max_new_tokens, args.shards)


if __name__ == "__main__":
    main()
