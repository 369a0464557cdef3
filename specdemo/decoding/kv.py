"""A causal LM together with its KV cache and the token ids that cache holds.

Both the target and the draft run through this: each forward feeds only the tokens the
cache does not hold yet, and a rejection is undone with ``Cache.crop`` (never by
re-encoding the prefix).

Three kinds of step (``STEPS``), the same on both sides of a race:
- ``eager``: a ``DynamicCache`` that grows and is cropped;
- ``static``: a ``StaticCache`` preallocated for the prompt and the answer (rounded up, so one
  size serves many prompts); a rollback moves its write position back (``move_back``) and
  the causal mask hides what lies beyond it: the tensors keep their addresses and shapes;
- ``compiled``: static, and each short step (a draft token, a verify of k tokens: one graph per k)
  runs through ``torch.compile`` (gpt-fast's recipe: on CUDA "reduce-overhead", i.e. CUDA graphs,
  which replay a step's hundreds of kernel launches as one; on a CPU inductor's fused kernels). The
  prompt's prefill stays eager (one long shape, once);
- ``aot``: static, and each short step runs from a package compiled ahead of time (``aot.py``: what a
  ZeroGPU Space runs, where nothing can compile while it serves); chains only.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from pathlib import Path

import torch
from transformers import DynamicCache, StaticCache

from specdemo import env
from specdemo.decoding.shapes import CACHE_ARG, MAX_CAPTURED, static_length

log = logging.getLogger(__name__)


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so wall-clock timings measure the work itself."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


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


_compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model → its compiled forward
_captured: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model → {(cache length, new, keep)} warmed


def compiled_forward(model):
    """``model``'s forward through ``torch.compile``, made once per model; with CUDA graphs on a GPU."""
    if model not in _compiled:
        # inductor's compiled kernels are kept across runs beside the converted checkpoints (not in /tmp)
        os.environ.setdefault(
            "TORCHINDUCTOR_CACHE_DIR", str(Path(env.get("SPECDEMO_CACHE_DIR"), "inductor").expanduser())
        )
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)  # a graph per k
        mode = "reduce-overhead" if model.device.type == "cuda" else None
        forward = getattr(model, "forward", model)  # a reduced-vocabulary draft is a plain callable
        _compiled[model] = torch.compile(forward, mode=mode, dynamic=False)
    return _compiled[model]


class CachedLM:
    """``feature_layers``: also keep, per cached position, the concatenated hidden states of these
    layers (indices into ``hidden_states``; a feature drafter reads them), cropped with the cache.
    ``steps``: eager, static or compiled (the module doc); ``room``: how many tokens a static cache
    holds beyond the first feed (the prompt): the answer, a draft and a tree's nodes."""

    def __init__(self, model, feature_layers: tuple[int, ...] = (), steps: str = "eager", room: int = 0):
        self.model = model
        self.device = model.device
        self.steps, self.room = steps, room
        self.cache = DynamicCache(config=model.config) if steps == "eager" else None  # static: at the first feed
        self.length = 0  # a static cache's positions
        self.fed: list[int] = []  # the ids whose keys/values the cache holds, in order
        self.forwards = 0
        self.feature_layers = tuple(feature_layers)
        self.features = torch.empty(0)  # [len(fed), len(feature_layers) × hidden] when kept

    def like(self, model) -> CachedLM:
        """A cache of the same kind for another model (a draft beside this target)."""
        return CachedLM(model, steps=self.steps, room=self.room)

    def ensure_cache(self, first_feed: int) -> None:
        if self.cache is None:
            self.length = static_length(first_feed + self.room)
            self.cache = StaticCache(config=self.model.config, max_cache_len=self.length)

    def key_width(self, new: int) -> int:
        """The key length an explicit attention mask spans when ``new`` tokens are fed now."""
        self.ensure_cache(new)
        return self.length if self.steps != "eager" else len(self.fed) + new

    @torch.inference_mode()
    def capture(self, first_feed: int, shapes) -> None:
        """Compile the steps of these (new tokens, logits kept) shapes before any step is timed; a CUDA
        graph is recorded on a shape's third call, so each runs three times. The cache is left empty.
        Ahead of time: the model's one package, built here where it has none."""
        if self.steps == "aot":
            from specdemo.decoding import aot

            aot.ensure(self.model)
            aot.runner(self.model)  # loaded here, not in the first timed step (a ZeroGPU worker loads its own)
        if self.steps != "compiled":
            return
        self.ensure_cache(first_feed)
        done = _captured.setdefault(self.model, set())
        shapes = {(self.length, *shape) for shape in shapes} - done
        if not shapes:
            return  # captured by an earlier run of this model (its graphs stay; a new cache is new inputs)
        done |= shapes
        extra = {"output_hidden_states": True} if self.feature_layers else {}
        started = time.perf_counter()
        self.model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=self.device), **self.kwargs(), **extra)
        self.move_back(1)  # the cache's layers now exist: the graphs are made for them as a race finds them
        for _, new, keep in sorted(shapes):
            ids = torch.zeros((1, new), dtype=torch.long, device=self.device)
            for _ in range(3):
                compiled_forward(self.model)(
                    input_ids=ids, use_cache=True, logits_to_keep=keep, **self.kwargs(), **extra
                )
                self.move_back(new)
        synchronize(self.device)
        log.info(
            "captured %s steps of %s in %.1f s",
            sorted(shapes),
            type(self.model).__name__,
            time.perf_counter() - started,
        )

    def call(self, new: int):
        """The forward to run for ``new`` tokens: compiled for a short step where asked, else the model's."""
        if self.steps == "compiled" and self.fed and new <= MAX_CAPTURED:
            return compiled_forward(self.model)
        return self.model

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def kwargs(self) -> dict:
        return {CACHE_ARG: self.cache}

    @torch.inference_mode()  # a static cache's tensors were made in it: moving its position back is too
    def move_back(self, drop: int) -> None:
        """Forget the last ``drop`` positions: a dynamic cache is cropped (transformers 5: crop takes −count);
        a static one's write position moves back (what 5.24's ``StaticLayer.crop`` does; 5.17 has none)."""
        if self.steps == "eager":
            self.cache.crop(-drop)
        else:
            for layer in self.cache.layers:
                layer.cumulative_length.sub_(drop)

    def rollback_to(self, length: int) -> None:
        """Drop cached positions from ``length`` on."""
        drop = len(self.fed) - length
        if drop > 0:
            self.move_back(drop)
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
        self.ensure_cache(len(new_ids))
        if self.length and len(self.fed) + len(new_ids) > self.length:
            raise RuntimeError(f"the static cache holds {self.length} positions, {len(self.fed) + len(new_ids)} fed")
        if self.steps == "aot" and self.fed and len(new_ids) <= MAX_CAPTURED and not self.feature_layers:
            return self.forward_ahead(input_ids, keep)
        self.align_positions()
        forward = self.call(len(new_ids))
        out = forward(input_ids=input_ids, use_cache=True, logits_to_keep=keep, **self.kwargs(), **extra)
        if self.feature_layers:  # the hidden states exist anyway: keep the chosen layers' rows
            new = torch.cat([out.hidden_states[i][0] for i in self.feature_layers], dim=-1)
            self.features = new if not len(self.fed) else torch.cat([self.features, new])
        self.fed.extend(new_ids)
        self.forwards += 1
        return out.logits[0, -keep:]

    def forward_ahead(self, input_ids: torch.Tensor, keep: int) -> torch.Tensor:
        """A short step from the package compiled ahead of time: it writes the cache after ``len(fed)``."""
        from specdemo.decoding import aot

        logits = aot.run(self.model, input_ids, len(self.fed), self.cache)
        self.fed.extend(input_ids[0].tolist())
        self.forwards += 1
        return logits[0, -keep:]

    def align_positions(self) -> None:
        """Ahead of time, the package writes at ``len(fed)`` without counting: the layers' own counters
        (what the model itself writes at) are set from it before the model runs."""
        if self.steps == "aot" and self.cache is not None:
            for layer in self.cache.layers:
                layer.cumulative_length.fill_(len(self.fed))

    def logits_after(self, tokens: list[int], extra: list[int] = ()) -> torch.Tensor:
        """Logits predicting each of ``extra`` and the token after them: [len(extra) + 1, V].

        ``tokens`` is the whole sequence so far; only its uncached tail is fed."""
        feed = self.pending(tokens) + list(extra)
        if not feed:
            # Everything is cached, yet we need the logits at the last position: re-feed it.
            self.rollback_to(len(tokens) - 1)
            feed = [tokens[-1]]
        return self.forward(feed, keep=len(extra) + 1)
