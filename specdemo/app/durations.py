"""ZeroGPU durations: seconds of GPU each call may take, from its own arguments."""

from __future__ import annotations

from specdemo.app.settings import (
    number,
)

# Seconds of GPU a call may take, from its own arguments (ZeroGPU refuses a call longer than the
# visitor's quota left: 2 min a day unauthenticated, 3.5 min free), capped at MAX_GPU_SECONDS.
MAX_GPU_SECONDS = 120


def _seconds(fixed: float, per_unit: float, units: float) -> int:
    return int(min(MAX_GPU_SECONDS, fixed + per_unit * units))


def race_seconds(*_, max_new_tokens=128, **__) -> int:
    return _seconds(10, 0.15, number(max_new_tokens, "max_new_tokens"))  # two generations side by side


def compare_seconds(*args, max_new_tokens=64, **__) -> int:
    return race_seconds(max_new_tokens=args[1] if len(args) > 1 else max_new_tokens)


def stepper_seconds(*_, max_new_tokens=128, **__) -> int:
    return _seconds(10, 0.08, number(max_new_tokens, "max_new_tokens"))


def benchmark_seconds(*_, max_new_tokens=128, gammas="1,2,3,4,6,8", repeats=1, with_transformers=False, **__) -> int:
    runs = (len(str(gammas).split(",")) + 1) * number(repeats, "repeats") * (2 if with_transformers else 1)
    return _seconds(15, 0.08, runs * number(max_new_tokens, "max_new_tokens"))


def lossless_seconds(*_, samples=100, k=2, **__) -> int:
    return _seconds(15, 0.05, 2 * number(samples, "samples") * number(k, "k"))


def methods_seconds(*_, max_new_tokens=48, **__) -> int:
    return _seconds(30, 1.0, number(max_new_tokens, "max_new_tokens"))  # 9 tasks × 8 prompts × 3 runs


def ahead_seconds(*_, **__) -> int:
    """The start-up call that compiles the preloaded pairs' steps ahead of time (not a visitor's quota:
    the HF blog's example asks 1500 s for one model)."""
    return 1500
