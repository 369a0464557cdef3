"""The presets: which target, which draft, their load options, example prompts and γ; which one starts."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from specdemo import env
from specdemo.decoding import methods
from specdemo.models import smollm2
from specdemo.models.loading import LoadOptions

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "models"
BUNDLED_TARGET = str(ASSETS / "tinystories-target")
BUNDLED_DRAFT = str(ASSETS / "tinystories-draft")
SMOLLM2_DRAFT = str(ASSETS / "smollm2-draft")
# A feature drafter (decoding/feature.py) when one is trained: shipped in assets/ once it beats the draft,
# else where `python -m specdemo.recipes.feature` writes it (the user cache folder).
SMOLLM2_FEATURE = str(
    next(
        (
            f
            for f in (ASSETS / "smollm2-feature", smollm2.cache_dir() / "smollm2-feature")
            if (f / "feature_drafter.json").exists()
        ),
        ASSETS / "smollm2-feature",
    )
)
PROMPTS = ASSETS.parent / "prompts"
REPOSITORY = ASSETS.parents[1]


def shown_id(model_id: str) -> str:
    """A model id as a page shows it: a folder of this repository relative to it (the server's own path stays
    on the server)."""
    path = Path(model_id)
    return path.relative_to(REPOSITORY).as_posix() if path.is_relative_to(REPOSITORY) else model_id


def resolved_id(model_id: str) -> str:
    """What a page sent back: a folder of this repository as the presets name it, else the id as typed."""
    model_id = (model_id or "").strip()
    inside = REPOSITORY / model_id
    return str(inside) if model_id and not Path(model_id).is_absolute() and inside.is_dir() else model_id


DEFAULTS_DIR = ASSETS.parent / "defaults"  # each preset's measured start: method, γ, length (measure/defaults.py)


@dataclass(frozen=True)
class Preset:
    name: str
    target: str
    draft: str
    target_options: LoadOptions = LoadOptions()
    draft_options: LoadOptions = LoadOptions()
    chat_template: bool = True
    examples: tuple[str, ...] = ()
    needs_cuda: bool = False
    draft_vocab: int = 0  # the draft scores only its N most frequent target tokens (0 = all)
    gamma: int = 4  # the γ that measured fastest with this pair (the app's starting value)
    prompts_file: Path = PROMPTS / "instruct.txt"  # the benchmark's held-out prompts
    lowercase: bool = False  # the pair knows lower-case text only: prompts are lower-cased (with a note)
    role: str = ""  # what the preset is for, in a few words (the app's preset list says it)


@dataclass(frozen=True)
class StartSettings:
    """What a preset's race starts with: measured where assets/defaults/<preset>.json exists."""

    method: str = methods.DRAFT.name
    gamma: int = 4
    max_new_tokens: int = 128
    note: str = ""  # where the choice comes from, for the app


def chain_method(preset: Preset) -> str:
    """The method that runs the preset's draft model as a chain: a feature drafter's, or the draft model's."""
    return methods.chain_for(preset.draft).name


def start_settings(preset: Preset, folder: Path = DEFAULTS_DIR) -> StartSettings:
    """The preset's measured start, else its draft model at its γ."""
    path = folder / f"{preset.name}.json"
    if not path.exists():
        return StartSettings(method=chain_method(preset), gamma=preset.gamma)
    stored = json.loads(path.read_text(encoding="utf-8"))
    best = stored["ranked"][0]
    # where and when it was measured is in docs/benchmarks.md, not on the attendee's screen
    note = (
        f"the fastest of {len(stored['ranked'])} choices on its {stored['prompts']} example prompts "
        f"({best['speedup']:.2f}× its baseline)"
    )
    return StartSettings(best["method"], best["gamma"], stored["max_new_tokens"], note)


STORY_OPENINGS = (
    "once upon a time, there was a little",
    "one day, a little girl named lily went to the park. she saw",
    "tom had a red ball. he liked to",
    "the sun was shining and the birds were singing. sam and his mom",
)
QWEN_PROMPTS = (
    "What is the purpose of life?",
    "Explain speculative decoding to a ten-year-old.",
    "Write a Python function that checks whether a number is prime.",
)
# Held-out instructions (the SmolLM2 draft never trained on them); the seed's prompt comes first.
# Input-grounded examples (the answer copies the prompt: where prompt lookup pays), from the task suite.
GROUNDED_EXAMPLES = tuple(
    json.loads(line)["prompt"]
    for name in ("rewrite", "code-edit", "extract")
    for line in (PROMPTS / "tasks" / f"{name}.jsonl").read_text().splitlines()[:1]
)
INSTRUCT_PROMPTS = tuple(line for line in (PROMPTS / "instruct.txt").read_text().splitlines() if line.strip())

SMOLLM2 = Preset(
    "smollm2-135m",
    smollm2.HUB_ID,
    SMOLLM2_DRAFT,
    role="the CPU default, offline",
    # the same fp32 weights, kept as the GGUF's blocks (the draft: fp16) and expanded inside the product:
    # faster on both sides of every race on a CPU (docs/design.md)
    target_options=LoadOptions(dtype="float32", quantization="compact-fp32"),
    draft_options=LoadOptions(dtype="float32", quantization="compact-fp32"),
    examples=INSTRUCT_PROMPTS[:1] + GROUNDED_EXAMPLES + INSTRUCT_PROMPTS[1:],
    draft_vocab=8192,
    gamma=1,  # the draft model's best γ on a 2-core CPU (docs/design.md)
)

PRESETS = {
    p.name: p
    for p in (
        Preset(
            "bundled-tinystories",
            BUNDLED_TARGET,
            BUNDLED_DRAFT,
            role="tiny stories, bundled",
            chat_template=False,
            examples=STORY_OPENINGS,
            prompts_file=PROMPTS / "stories.txt",
            lowercase=True,
        ),
        # A real instruct model that runs offline on a CPU, with a draft distilled here.
        SMOLLM2,
        # The same target with a drafter that reads its hidden states (EAGLE-3 style), when trained here.
        *(
            [
                replace(
                    SMOLLM2,
                    name="smollm2-135m-feature",
                    draft=SMOLLM2_FEATURE,
                    draft_vocab=0,
                    examples=INSTRUCT_PROMPTS,
                )
            ]
            if Path(SMOLLM2_FEATURE, "feature_drafter.json").exists()
            else []
        ),
        # The pair and quantization of the script the project started from.
        Preset(
            "qwen2.5-3b-nf4+0.5b",
            "Qwen/Qwen2.5-3B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            role="the seed script's pair, CUDA",
            target_options=LoadOptions(dtype="float16", quantization="4bit"),
            draft_options=LoadOptions(dtype="float16"),
            examples=QWEN_PROMPTS,
            needs_cuda=True,
        ),
        # The same pair unquantized in bfloat16: what a ZeroGPU Space preloads (see README).
        Preset(
            "qwen2.5-3b+0.5b",
            "Qwen/Qwen2.5-3B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            role="the seed's pair in bf16, GPU",
            target_options=LoadOptions(dtype="bfloat16"),
            draft_options=LoadOptions(dtype="bfloat16"),
            examples=QWEN_PROMPTS,
            needs_cuda=True,
        ),
        # A target big enough that a 0.5B draft is cheap beside it on a GPU once the steps are captured:
        # the cost model (`profile --cost-model`, docs/results/cost_model.json) predicts 1.5–2.0× on an H200
        # at α 0.6–0.8, against 1.0–1.1× for the 3B target. bf16: ≈ 30 GB, within a ZeroGPU slice's 70 GB.
        Preset(
            "qwen2.5-14b+0.5b",
            "Qwen/Qwen2.5-14B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            target_options=LoadOptions(dtype="bfloat16"),
            draft_options=LoadOptions(dtype="bfloat16"),
            examples=QWEN_PROMPTS,
            needs_cuda=True,
            role="GPU showcase: run it with compiled steps",
        ),
        Preset(
            "qwen2.5-1.5b+0.5b",
            "Qwen/Qwen2.5-1.5B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            examples=QWEN_PROMPTS,
        ),
        Preset(
            "smollm2-1.7b+135m",
            "HuggingFaceTB/SmolLM2-1.7B-Instruct",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            examples=QWEN_PROMPTS,
        ),
    )
}


def default_preset_name() -> str:
    """The Qwen pair of the original script on a CUDA machine; on a CPU SmolLM2-135M-Instruct and
    its distilled draft when they can be loaded offline, else the bundled TinyStories pair."""
    if torch.cuda.is_available():
        return "qwen2.5-3b-nf4+0.5b"
    return "smollm2-135m" if smollm2_ready() else "bundled-tinystories"


def startup_preset() -> str:
    """SPECDEMO_PRESET, else the bf16 Qwen pair on ZeroGPU, else ``default_preset_name()``."""
    return env.get("SPECDEMO_PRESET") or ("qwen2.5-3b+0.5b" if env.on_zero_gpu() else default_preset_name())


def lowercases(target_id: str) -> bool:
    """Whether a preset says this target knows lower-case text only (the bundled TinyStories pair)."""
    return any(p.lowercase for p in PRESETS.values() if p.target == target_id)


def smollm2_ready() -> bool:
    return Path(SMOLLM2_DRAFT, "config.json").exists() and smollm2.available()


def default_preset_notice() -> str | None:
    """One line for a CPU user who gets the TinyStories pair instead of the real model."""
    if torch.cuda.is_available() or smollm2_ready():
        return None
    why = "" if Path(SMOLLM2_DRAFT, "config.json").exists() else " (its distilled draft is missing from assets/)"
    return (
        "Running the small TinyStories pair (lower-case stories only): the real instruct model, "
        f"SmolLM2-135M-Instruct, is not on this machine{why}, and {smollm2.hub_problem()}. {smollm2.how_to_get_it()}."
    )
