"""The shapes a static cache and its captured steps agree on: read by the cache (``kv``) and by the
steps compiled ahead of time (``aot``), which import this and not each other."""

from __future__ import annotations

import inspect

from transformers.masking_utils import create_causal_mask

# transformers 5.24 renamed the forward's ``past_key_values`` to ``cache`` (5.17, a lent GPU's image, has the old
# name): every call here passes it by this name
CACHE_ARG = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"
STEPS = ("eager", "static", "compiled", "aot")
STATIC_ROUNDING = 256  # a static cache's length is rounded up to this: one size (one graph) for many prompts
MAX_CAPTURED = 64  # steps feeding at most this many tokens run compiled (a verify, a tree); longer ones eager


def static_length(needed: int) -> int:
    return -(-needed // STATIC_ROUNDING) * STATIC_ROUNDING
