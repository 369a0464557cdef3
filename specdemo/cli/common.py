"""What every command shares: the parser, the pair and sampling flags, the config and the pair they give."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from specdemo import env
from specdemo.decoding import methods
from specdemo.decoding.engine import DecodeConfig
from specdemo.decoding.sampling import SamplingConfig
from specdemo.decoding.shapes import STEPS
from specdemo.decoding.tree import TreeConfig
from specdemo.errors import InputError
from specdemo.models import (
    DTYPES,
    PRESETS,
    QUANTIZATIONS,
    LoadOptions,
    configure_cpu_threads,
    default_preset_name,
    draft_options_for,
    encode_prompt,
    load_pair,
)


class OneLineErrorParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def add_pair_args(p):
    p.add_argument(
        "--preset",
        choices=list(PRESETS),
        default=default_preset_name(),
        help="model pair (on a CPU: smollm2-135m when it is installed, else bundled-tinystories)",
    )
    p.add_argument("--target", default=None, help="hub id or local folder, instead of the preset's target")
    p.add_argument("--draft", default=None, help="hub id or local folder, instead of the preset's draft")
    p.add_argument(
        "--draft-vocab",
        type=int,
        default=None,
        help="the draft scores only the target's N most frequent tokens (0 = all; default: the preset's)",
    )
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="weights' dtype (default: the preset's)")
    p.add_argument(
        "--quantization",
        choices=list(QUANTIZATIONS),
        default=None,
        help=(
            "the target's: 8bit/4bit (bitsandbytes, CUDA), int8-cpu (int8 weights, bf16 products), compact-fp32 "
            "(the same fp32 weights kept as the GGUF's blocks or 16 bits, CPU; the draft follows); default: preset's"
        ),
    )
    p.add_argument("--no-chat-template", action="store_true", help="feed the prompt as plain text")
    p.add_argument(
        "--steps",
        choices=STEPS,
        default=env.get("SPECDEMO_STEPS"),
        help="eager (a growing KV cache), static (preallocated), compiled (static + torch.compile; CUDA graphs "
        "on a GPU) or aot (static + a package compiled ahead of time: torch.export + AOTInductor; chains only); "
        "both sides of a speedup run the same kind (default: $SPECDEMO_STEPS, else eager)",
    )
    p.add_argument("--compile", dest="steps", action="store_const", const="compiled", help="--steps compiled")


def add_model_args(p):
    add_pair_args(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def add_sampling_args(p):
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)


def decode_config(args) -> DecodeConfig:
    if args.gamma is None:  # the method's own γ (auto's most), else the preset's: as the app and bench choose
        args.gamma = methods.get(getattr(args, "method", methods.DRAFT.name)).gamma or PRESETS[args.preset].gamma
    # a command without a flag gets DecodeConfig's own default for it (one home for each default)
    given = {
        name: getattr(args, name)
        for name in ("schedule", "min_confidence", "method", "max_ngram", "steps")
        if name in args
    }
    tree = {field: getattr(args, f"tree_{flag}") for field, flag in TREE_FLAGS.items() if f"tree_{flag}" in args}
    return DecodeConfig(
        max_new_tokens=args.max_new_tokens,
        gamma=args.gamma,
        sampling=SamplingConfig(args.temperature, args.top_k, args.top_p, args.seed),
        tree=TreeConfig(**tree),
        **given,
    )


TREE_FLAGS = {"k": "k", "depth": "depth", "max_nodes": "nodes", "min_prob": "min_prob"}  # TreeConfig → --tree-*


def load_from_args(args):
    """The preset, overridden by --target/--draft/--draft-vocab/--dtype/--quantization → a loaded Pair."""
    preset = PRESETS[args.preset]
    own_target = args.target is not None
    target_options = LoadOptions() if own_target else preset.target_options
    draft_options = LoadOptions() if own_target else preset.draft_options
    if args.dtype:
        target_options = replace(target_options, dtype=args.dtype)
        draft_options = replace(draft_options, dtype=args.dtype)
    if getattr(args, "quantization", None):  # the target's: both sides of every speedup run it
        target_options = replace(target_options, quantization=args.quantization)
        # the draft is compact exactly when its target is (the same numbers either way)
        draft_options = replace(draft_options, quantization=draft_options_for(target_options).quantization)
    method = methods.get(getattr(args, "method", methods.DRAFT.name))
    draft = (args.draft or preset.draft) if method.draft_model else None
    draft_vocab = args.draft_vocab if args.draft_vocab is not None else (0 if args.draft else preset.draft_vocab)
    pair = load_pair(args.target or preset.target, draft, target_options, draft_options, draft_vocab=draft_vocab)
    configure_cpu_threads(pair)
    return pair


def encode(pair, args, prompt: str) -> list[int]:
    return encode_prompt(pair.tokenizer, prompt, chat_template=not args.no_chat_template)


def bench_prompts(path) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            prompts = [line.strip() for line in f if line.strip()]
    except OSError as error:
        raise InputError(f"cannot read the prompts file {str(path)!r}: {error.strerror}") from error
    if not prompts:
        raise InputError(f"the prompts file {str(path)!r} has no prompts (one per line)")
    return prompts
