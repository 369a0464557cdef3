"""An LRU cache of loaded models, and pairs (target + draft) loaded through it."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import torch

from specdemo import env
from specdemo.decoding import aot
from specdemo.decoding.feature import FeatureHead
from specdemo.decoding.vocab import ReducedVocabLM, reduce_draft
from specdemo.errors import InputError
from specdemo.models.compact_linear import from_half
from specdemo.models.loading import LoadOptions, capture_problem, check_same_vocabulary, load_model
from specdemo.models.presets import PRESETS

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    model: object
    tokenizer: object
    nbytes: int


class ModelCache:
    """Loads each (id, options) once; evicts the least recently used past ``budget_bytes``."""

    def __init__(self, budget_bytes: int | None = None):
        default = int(env.number("SPECDEMO_CACHE_GB") * 2**30)
        self.budget_bytes = budget_bytes if budget_bytes is not None else default
        self._entries: OrderedDict[tuple, LoadedModel] = OrderedDict()
        self._lock = threading.RLock()
        self.loads = 0
        self.frozen = False  # True: serve the preloaded models only (a ZeroGPU Space)

    def get(self, model_id: str, options: LoadOptions = LoadOptions()) -> LoadedModel:
        key = (model_id, options)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
            if self.frozen:
                loaded = ", ".join(sorted({f"{k[0]} ({k[1].dtype})" for k in self._entries}))
                raise InputError(f"this Space runs only the models it loaded at start: {loaded}")
            model, tokenizer = load_model(model_id, options)
            self.loads += 1
            entry = LoadedModel(model, tokenizer, model.get_memory_footprint())
            self._entries[key] = entry
            self._evict(keep=key)
            return entry

    def preload(self, model_id: str, options: LoadOptions, device: str) -> None:
        """Load on the CPU, move to ``device`` and keep it under the key a request for
        (model_id, options) looks up. On ZeroGPU this runs at import: ``.to("cuda")`` there is
        recorded by the spaces package and replayed in each GPU worker."""
        model, tokenizer = load_model(model_id, replace(options, device="cpu"))
        model.to(device)
        with self._lock:
            self._entries[(model_id, options)] = LoadedModel(model, tokenizer, model.get_memory_footprint())

    def _evict(self, keep) -> None:
        while self.total_bytes > self.budget_bytes and len(self._entries) > 1:
            oldest = next(iter(self._entries))
            if oldest == keep:
                break
            del self._entries[oldest]
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    @property
    def total_bytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def __contains__(self, key) -> bool:
        return key in self._entries

    def keys(self) -> list[tuple]:
        return list(self._entries)


@dataclass
class Pair:
    """A target, its draft (None for prompt lookup) and the shared tokenizer."""

    target: object
    draft: object | None
    tokenizer: object
    target_id: str
    draft_id: str | None
    eos: set[int] = field(default_factory=set)


def load_pair(
    target_id: str,
    draft_id: str | None,
    target_options: LoadOptions = LoadOptions(),
    draft_options: LoadOptions = LoadOptions(),
    cache: ModelCache | None = None,
    draft_vocab: int = 0,
) -> Pair:
    """``draft_vocab`` N > 0: the draft computes logits for the target's N most frequent tokens only."""
    from specdemo.decoding.engine import eos_ids

    if draft_vocab < 0:
        raise InputError(f"the draft vocabulary must be ≥ 0 tokens (0 = all), got {draft_vocab}")
    cache = cache or DEFAULT_CACHE
    target = cache.get(target_id, target_options)
    eos = eos_ids(target.model, target.tokenizer)
    draft = None
    if draft_id:
        loaded = cache.get(draft_id, draft_options)
        if isinstance(loaded.model, FeatureHead):  # reads the target's features: it must be its target
            loaded.model.check_target(target.model, f"the feature drafter {draft_id!r}")
            draft = loaded.model
        else:
            check_same_vocabulary(target.tokenizer, loaded.tokenizer, target_id, draft_id)
            draft = reduce_draft(loaded.model, draft_id, draft_vocab, eos)
            if draft_options.quantization == "compact-fp32" and isinstance(draft, ReducedVocabLM):
                draft.head = from_half(draft.head) or draft.head  # its N rows: as compact as the rest
    return Pair(target.model, draft, target.tokenizer, target_id, draft_id, eos)


def draft_options_for(target_options: LoadOptions) -> LoadOptions:
    """The app loads a draft in its target's dtype, unquantized (compact where its target is: the
    same fp32 numbers): one rule, so that the preloaded models of a ZeroGPU Space sit under the very
    keys a request looks up."""
    compact = "compact-fp32" if target_options.quantization == "compact-fp32" else "none"
    return LoadOptions(dtype=target_options.dtype, quantization=compact)


def preload_presets(names: list[str], cache: ModelCache | None = None) -> None:
    """Load these presets' pairs now (on CUDA when there is one) and serve only them afterwards:
    what a ZeroGPU Space does at import, because a GPU call cannot keep what it loads."""
    cache = cache or DEFAULT_CACHE
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for name in names:
        p = PRESETS[name]
        cache.preload(p.target, p.target_options, device)
        cache.preload(p.draft, draft_options_for(p.target_options), device)
    cache.frozen = True


def compile_ahead(cache: ModelCache | None = None, package=aot.package_here) -> dict[tuple, bytes]:
    """Every loaded model's steps compiled ahead of time (``aot.build``), by cache key; a model that cannot
    be is left out (its races run static steps, with a line). On ZeroGPU this runs in the start-up GPU
    call: the bytes come back by pickle and ``install_ahead`` gives them to the models it forked from."""
    cache = cache or DEFAULT_CACHE
    packages = {}
    for key in cache.keys():
        model = cache.get(*key).model
        if problem := capture_problem(model, "aot"):
            log.info("%s: not compiled ahead of time: %s", key[0], problem)
            continue
        try:
            packages[key] = aot.build(model, package)
        except Exception as error:  # noqa: BLE001 (one model that does not export: its races run static steps)
            log.warning("%s: not compiled ahead of time: %s", key[0], str(error).splitlines()[0])
    return packages


def install_ahead(packages: dict[tuple, bytes], cache: ModelCache | None = None) -> None:
    cache = cache or DEFAULT_CACHE
    for key, package in packages.items():
        aot.install(cache.get(*key).model, package)


DEFAULT_CACHE = ModelCache()
