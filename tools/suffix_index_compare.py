"""The pure-Python suffix index against arctic-inference's C++ one, on the methods × tasks prompts.

    python -m tools.suffix_index_compare [--tasks chat,rewrite] [--out docs/results/suffix_index.json]

Each prompt is raced by suffix decoding (greedy, γ 4) once with each index, taking turns prompt by
prompt (each goes first every other prompt), each index with its own store filled by the same
answers (so ``chat-again``, the chat prompts asked a second time, runs on equal stores). Prints per
task: whether every step drafted the same tokens, τ, tokens/s of each, and the index's own time per
step (the drafting stopwatch: no model runs). Needs arctic-inference (requirements-suffix.txt) and
the default preset's models.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from specdemo.decoding.engine import DecodeConfig, decode_steps, run_timed
from specdemo.decoding.suffix import SuffixStore
from specdemo.decoding.suffix_index import SuffixDecodingCache
from specdemo.measure.machine import machine
from specdemo.measure.tasks import REPEATED, encode_tasks, load_tasks
from specdemo.models import PRESETS, load_pair


def main() -> None:
    from arctic_inference.suffix_decoding import SuffixDecodingCache as ArcticCache

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    preset = PRESETS[args.preset]
    pair = load_pair(
        preset.target, preset.draft, preset.target_options, preset.draft_options, draft_vocab=preset.draft_vocab
    )
    tasks = encode_tasks(pair.tokenizer, load_tasks(names=[t for t in args.tasks.split(",") if t] or None))
    if "chat" in tasks:
        tasks[REPEATED] = tasks["chat"]  # right after chat: the stores keep its answers
        tasks = {t: tasks[t] for t in sorted(tasks, key=lambda t: (t != "chat", t != REPEATED))}
    cfg = replace(DecodeConfig(max_new_tokens=args.max_new_tokens), gamma=4, method="suffix")
    indexes = {"python": SuffixDecodingCache, "arctic-inference": ArcticCache}
    stores = {name: SuffixStore(index=index) for name, index in indexes.items()}
    run_timed(lambda: decode_steps(pair.target, None, tasks[next(iter(tasks))][0], cfg, pair.eos), pair.target.device)
    rows = []
    for task, prompts in tasks.items():
        if task != REPEATED:
            for store in stores.values():
                store.reset()
        totals = {name: {"tokens": 0, "wall": 0.0, "forwards": 0, "index_s": [], "drafts": []} for name in indexes}
        for i, p in enumerate(prompts):
            for name, store in sorted(stores.items(), reverse=i % 2 == 1):  # each goes first every other prompt
                race = lambda p=p, s=store: decode_steps(pair.target, None, p, cfg, pair.eos, store=s)
                run = run_timed(race, pair.target.device)
                t = totals[name]
                t["tokens"] += len(run.token_ids)
                t["wall"] += run.wall_s
                t["forwards"] += len(run.steps)
                t["index_s"] += [s.draft_s for s in run.steps]
                t["drafts"] += [s.drafted for s in run.steps]
        same = totals["python"]["drafts"] == totals["arctic-inference"]["drafts"]
        row = {"task": task, "prompts": len(prompts), "same_proposals": same}
        for name, t in totals.items():
            row[name] = {
                "tau": t["tokens"] / t["forwards"],
                "tokens_per_second": t["tokens"] / t["wall"],
                "index_ms_per_step": 1000 * statistics.mean(t["index_s"]),
            }
        rows.append(row)
        py, ai = row["python"], row["arctic-inference"]
        print(
            f"{task:<20} same proposals {'yes' if same else 'NO '}  τ {py['tau']:.2f} / {ai['tau']:.2f}  "
            f"tok/s {py['tokens_per_second']:.1f} / {ai['tokens_per_second']:.1f}  "
            f"index ms/step {py['index_ms_per_step']:.3f} / {ai['index_ms_per_step']:.3f}   (python / arctic-inference)"
        )
    if args.out:
        record = {"measured": time.strftime("%Y-%m-%d"), "machine": machine(), "preset": args.preset}
        record |= {"max_new_tokens": args.max_new_tokens, "gamma": 4, "rows": rows}
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
