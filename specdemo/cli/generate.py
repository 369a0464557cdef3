"""``generate`` (baseline vs speculative on one prompt) and ``sample`` (independent speculative samples)."""

from __future__ import annotations

import json
import sys

from specdemo.cli.common import (
    add_model_args,
    add_sampling_args,
    decode_config,
    encode,
    load_from_args,
)
from specdemo.decoding import methods
from specdemo.decoding.engine import sample_many
from specdemo.decoding.tree import TreeConfig
from specdemo.errors import InputError
from specdemo.measure.compare import compare, comparison_record
from specdemo.measure.divergence import dtype_name
from specdemo.models import (
    check_request,
)
from specdemo.view.render import token_spans, tokens_ansi


def add_parsers(sub) -> None:
    gen = sub.add_parser("generate", help="baseline vs speculative on one prompt")
    add_model_args(gen)
    gen.add_argument(
        "--method",
        choices=methods.names(on_engine=True),
        default=methods.DRAFT.name,
        help="; ".join(f"{n}: {methods.get(n).description}" for n in methods.names(on_engine=True)),
    )
    gen.add_argument(
        "--gamma", type=int, default=None, help="draft length (default: the method's own, else the preset's best γ)"
    )
    gen.add_argument("--schedule", choices=["constant", "heuristic"], default="constant")
    gen.add_argument("--min-confidence", type=float, default=0.0, help="draft-confidence stop (0 = off)")
    gen.add_argument("--max-ngram", type=int, default=3, help="prompt lookup: longest n-gram matched")
    gen.add_argument("--max-new-tokens", type=int, default=64)
    tree = TreeConfig()
    gen.add_argument("--tree-k", type=int, default=tree.k, help="tree: children per node")
    gen.add_argument("--tree-depth", type=int, default=tree.depth, help="tree: depth")
    gen.add_argument("--tree-nodes", type=int, default=tree.max_nodes, help="tree: most nodes kept (N)")
    gen.add_argument(
        "--tree-min-prob", type=float, default=tree.min_prob, help="tree: prune paths below this draft prob"
    )
    add_sampling_args(gen)

    smp = sub.add_parser("sample", help="M independent speculative samples")
    add_model_args(smp)
    smp.add_argument(
        "--gamma", type=int, default=None, help="draft length (default: the method's own, else the preset's best γ)"
    )
    smp.add_argument("--max-new-tokens", type=int, required=True)
    smp.add_argument("--samples", type=int, required=True)
    add_sampling_args(smp)


def cmd_generate(args) -> None:
    config = decode_config(args)
    check_request(args.prompt, config)
    pair = load_from_args(args)
    prompt_ids = encode(pair, args, args.prompt)
    base_run, spec_run = compare(pair, prompt_ids, config)
    record = comparison_record(pair.tokenizer, prompt_ids, base_run, spec_run, dtype_name(pair.target), config.method)
    if args.json:
        print(json.dumps(record))
        return
    base, spec = record["baseline"], record["speculative"]
    decode = lambda t: pair.tokenizer.decode([t])  # noqa: E731
    steps = spec_run.steps
    print(f"prompt: {args.prompt}\n")
    print(f"baseline    ({base['tokens_per_second']:.1f} tok/s):\n{base['text']}\n")
    spans = token_spans(steps, decode)
    print(f"speculative ({spec['tokens_per_second']:.1f} tok/s):")
    print(tokens_ansi(spans) if sys.stdout.isatty() else spec["text"])  # the same text as the baseline's
    print(
        f"\nspeedup {record['speedup']:.2f}x · acceptance {spec['acceptance_rate']:.2f} · "
        f"τ {spec['mean_accepted_tokens']:.2f} tokens per target forward · {spec['target_forwards']} target "
        f"forwards for {len(spec['token_ids'])} tokens"
    )
    if record["limited_by"]:
        from specdemo.measure.diagnosis import question

        print(f"{question(record['limited_by']['term'], record['speedup'])} {record['limited_by']['text']}")
    if sys.stdout.isatty():
        print("colours: green accepted · red struck rejected · yellow correction · blue bonus")


def cmd_sample(args) -> None:
    config = decode_config(args)
    check_request(args.prompt, config)
    if args.samples < 1:
        raise InputError("--samples must be ≥ 1")
    pair = load_from_args(args)
    prompt_ids = encode(pair, args, args.prompt)
    samples = sample_many(pair.target, pair.draft, prompt_ids, config, args.samples, pair.eos)
    if args.json:
        print(json.dumps({"prompt_ids": prompt_ids, "samples": samples}))
        return
    for i, ids in enumerate(samples):
        print(f"[{i}] {pair.tokenizer.decode(ids, skip_special_tokens=True)}")
