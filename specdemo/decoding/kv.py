"""A causal LM together with its KV cache and the token ids that cache holds.

Both the target and the draft run through this: each forward feeds only the tokens the
cache does not hold yet, and a rejection is undone with ``Cache.crop`` (never by
re-encoding the prefix).
"""

from __future__ import annotations

import time

import torch
from transformers import DynamicCache


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so wall-clock timings measure the work itself."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    """``with watch: ...`` adds the block's synced wall time to ``watch.seconds``."""

    def __init__(self, device: torch.device):
        self.device = device
        self.seconds = 0.0

    def __enter__(self):
        synchronize(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        synchronize(self.device)
        self.seconds += time.perf_counter() - self._start
        return False


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    # Sequences only change near their end, so compare the bulk at C speed first.
    start = max(0, n - 64)
    if a[:start] != b[:start]:
        start = 0
    for i in range(start, n):
        if a[i] != b[i]:
            return i
    return n


class CachedLM:
    """``feature_layers``: also keep, per cached position, the concatenated hidden states of these
    layers (indices into ``hidden_states``; a feature drafter reads them), cropped with the cache."""

    def __init__(self, model, feature_layers: tuple[int, ...] = ()):
        self.model = model
        self.device = model.device
        self.cache = DynamicCache(config=model.config)
        self.fed: list[int] = []  # the ids whose keys/values the cache holds, in order
        self.forwards = 0
        self.feature_layers = tuple(feature_layers)
        self.features = torch.empty(0)  # [len(fed), len(feature_layers) × hidden] when kept

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def rollback_to(self, length: int) -> None:
        """Drop cached positions from ``length`` on (transformers 5: crop takes −count)."""
        drop = len(self.fed) - length
        if drop > 0:
            self.cache.crop(-drop)
            del self.fed[length:]
            if self.feature_layers:
                self.features = self.features[:length]

    def pending(self, tokens: list[int]) -> list[int]:
        """Roll back to the longest cached prefix of ``tokens``; return what is left to feed."""
        self.rollback_to(common_prefix_length(self.fed, tokens))
        return tokens[len(self.fed) :]

    @torch.inference_mode()
    def forward(self, new_ids: list[int], keep: int = 1) -> torch.Tensor:
        """Feed ``new_ids`` after the cached prefix; logits of the last ``keep`` positions [keep, V]."""
        input_ids = torch.tensor([new_ids], dtype=torch.long, device=self.device)
        extra = {"output_hidden_states": True} if self.feature_layers else {}
        out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=keep, **extra)
        if self.feature_layers:  # the hidden states exist anyway: keep the chosen layers' rows
            new = torch.cat([out.hidden_states[i][0] for i in self.feature_layers], dim=-1)
            self.features = new if not len(self.fed) else torch.cat([self.features, new])
        self.fed.extend(new_ids)
        self.forwards += 1
        return out.logits[0, -keep:]

    def logits_after(self, tokens: list[int], extra: list[int] = ()) -> torch.Tensor:
        """Logits predicting each of ``extra`` and the token after them: [len(extra) + 1, V].

        ``tokens`` is the whole sequence so far; only its uncached tail is fed."""
        feed = self.pending(tokens) + list(extra)
        if not feed:
            # Everything is cached, yet we need the logits at the last position: re-feed it.
            self.rollback_to(len(tokens) - 1)
            feed = [tokens[-1]]
        return self.forward(feed, keep=len(extra) + 1)
