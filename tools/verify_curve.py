"""Probe: a target step and the verify's cost curve under several kernel choices, interleaved.

    python -m tools.verify_curve [--quantizations compact-fp32,none] [--rounds 5] [--repeats 7] [--draft]

A choice named ``compact-fp32-heavy`` is compact-fp32 with transformers' own forward instead of the
lean one (models/lean_forward.py); ``compact-fp32-repeat-kv`` is the lean forward attending as
transformers does (the cache copied per query head for a verify, instead of torch's ``enable_gqa``).
``--draft``: the preset's draft as the engine runs it (its reduced vocabulary), instead of the target.

The machine this runs on is shared: its speed drifts by tens of percent within minutes. So the
choices are loaded side by side and take turns at every k (in reverse order every second round),
and each figure is the median over all rounds. One forward of k new tokens over a warm 100-token
cache, as the engine runs it (``measure/profile.py``).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from specdemo.measure.profile import KS, time_forward, warm_cache
from specdemo.models import PRESETS, LoadOptions, ModelCache, lean_forward, load_pair

HEAVY, REPEAT_KV = "-heavy", "-repeat-kv"
LEAN_ATTEND = lean_forward.attend


def load(preset, quantization: str, draft: bool):
    """The preset's target (or draft) under ``quantization``; ``…-heavy``: without the lean forward."""
    options = LoadOptions(dtype="float32", quantization=quantization.removesuffix(HEAVY).removesuffix(REPEAT_KV))
    pair = load_pair(preset.target, preset.draft, options, options, ModelCache(), preset.draft_vocab)
    model = pair.draft if draft else pair.target
    if quantization.endswith(HEAVY):
        for module in (pair.target, pair.target.base_model, pair.draft.full_model, pair.draft.full_model.base_model):
            vars(module).pop("forward", None)  # the class's forward again: transformers' own
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--quantizations", default="compact-fp32,none")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--draft", action="store_true", help="the preset's draft instead of its target")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    preset = PRESETS[args.preset]
    choices = args.quantizations.split(",")
    caches = {}
    for q in choices:
        model = load(preset, q, args.draft)
        caches[q] = (model, *warm_cache(model, 100))
    times = {q: {k: [] for k in KS} for q in choices}
    with torch.inference_mode():
        for round_ in range(args.rounds):
            for k in KS:
                for q in choices if round_ % 2 == 0 else choices[::-1]:
                    _, lm, prefix = caches[q]
                    lean_forward.attend = lean_forward.transformers_attend if q.endswith(REPEAT_KV) else LEAN_ATTEND
                    times[q][k] += [time_forward(lm, prefix, prefix[:k]) * 1000 for _ in range(args.repeats)]
    for q in choices:
        t1 = statistics.median(times[q][1])
        curve = ", ".join(f"k={k}: {statistics.median(times[q][k]) / t1:.2f}" for k in KS[1:])
        ms = ", ".join(f"{statistics.median(times[q][k]):.1f}" for k in KS)
        model = caches[q][0]
        kernels = getattr(getattr(model, "full_model", model), "specdemo_kernels", "torch")
        print(f"{q:>13} ({kernels}): t_t = {t1:.1f} ms; t_v(k)/t_t: {curve} (ms: {ms})")


if __name__ == "__main__":
    main()
