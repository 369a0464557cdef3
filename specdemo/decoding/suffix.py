"""Suffix decoding (Oliaro et al., NeurIPS 2025): propose what followed the current context
before, in this prompt and answer or in earlier answers of the same process.

Two suffix trees do the matching (``suffix_index.py``: the trees of Snowflake's ``arctic-inference``,
which vLLM's ``suffix`` method uses, in pure Python): one over this request's prompt and its answer
so far, one over the answers of earlier requests. Each proposes the continuation seen most often
after the longest match of the context's tail, as long as the match allows (at most
``max_spec_factor`` × match length tokens, capped by γ) and only through tokens seen at least
``min_token_prob`` of the time; the better-scored tree wins.
A repeated workload (a workshop asking the same questions, templated answers) gets faster the
more it is used: a second, identical greedy answer is proposed whole.

No model runs; q is one-hot on the proposal, so the acceptance rule is lossless unchanged.
Memory is bounded: the store keeps the last ``max_answers`` answers (FIFO), and ``reset()`` forgets
them all.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from specdemo.decoding.drafters import Draft
from specdemo.decoding.sampling import SamplingConfig
from specdemo.decoding.suffix_index import SuffixDecodingCache
from specdemo.errors import InputError

CONTEXT_WINDOW = 24  # the tree depth: the longest context tail matched (vLLM's default)
SOURCE_CONTEXT = 6  # tokens of context shown before a proposal in its source
DEFAULT_GAMMA = 4  # the longest proposal where no γ is chosen (its length follows the match below that;
# a long verify costs more than a longer proposal gains on a CPU: docs/design.md)
MAX_ANSWERS = 256  # earlier answers a store keeps (FIFO): the memory bound


@dataclass(frozen=True)
class SuffixConfig:
    # propose at most factor × match length tokens (and ≤ γ). vLLM's default is 1.0; here 4.0, so a
    # 1-token match may propose up to γ = 4, as prompt lookup does (higher τ on every task: docs/design.md)
    max_spec_factor: float = 4.0
    min_token_prob: float = 0.1  # stop the proposal at a continuation seen less often than this
    # the hybrid (suffix decoding, else the draft model): a suffix proposal from a match of at least
    # hybrid_min tokens is drafted (at most γ); otherwise the draft model drafts at most
    # hybrid_model_gamma (its own best γ on a CPU).
    # The match, not the proposal's length, decides: a 1-token match is a common word, where the draft
    # model guesses better
    hybrid_min: int = 2
    hybrid_model_gamma: int = 1


def validate_suffix(cfg: SuffixConfig) -> None:
    if not cfg.max_spec_factor > 0:
        raise InputError(f"the suffix proposal factor must be > 0, got {cfg.max_spec_factor}", field="method")
    if not 0 <= cfg.min_token_prob < 1:
        raise InputError(f"the suffix minimum probability must be in [0, 1), got {cfg.min_token_prob}", field="method")
    if cfg.hybrid_min < 1 or cfg.hybrid_model_gamma < 1:
        raise InputError("the hybrid's shortest suffix proposal and the draft model's γ must be ≥ 1", field="method")


class SuffixStore:
    """Earlier answers of this process: one suffix tree over them (``SuffixDecodingCache``), and
    the answers' ids side by side in one array, to show where a proposal came from. Thread-safe:
    the app's sessions share one store."""

    def __init__(self, max_answers: int = MAX_ANSWERS, index=SuffixDecodingCache):
        self.max_answers = max_answers
        self.index = index  # the trees' class: this package's, or arctic-inference's (same API, same proposals)
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.reset()

    def reset(self) -> None:
        """Forget every earlier answer (a request running now finishes on the old tree)."""
        with self.lock:
            self.cache = self.index(max_tree_depth=CONTEXT_WINDOW, max_cached_requests=self.max_answers)
            self.answers: deque[list[int]] = deque(maxlen=self.max_answers)
            self.joined = np.empty(0, dtype=np.int64)

    def add(self, cache, answer: list[int]) -> None:
        """Keep ``answer`` beside the tree (the tree itself was extended as it was written)."""
        if cache is not self.cache:  # reset while this request ran: it belongs to nothing now
            return
        self.answers.append(answer)
        self.joined = np.concatenate([np.asarray(a + [-1], dtype=np.int64) for a in self.answers])

    def remember(self, answer: list[int]) -> None:
        """File an answer written elsewhere (a ZeroGPU worker, which keeps nothing) as if it had
        been written here."""
        with self.lock:
            request = next(self.ids)
            self.cache.start_request(request, [])
            self.cache.add_active_response(request, answer)
            self.cache.stop_request(request)
            self.add(self.cache, list(answer))

    def stats(self) -> dict:
        return {"answers": len(self.answers), "tokens": sum(len(a) for a in self.answers)}

    def find(self, pattern: list[int]) -> list[int] | None:
        """The latest place in the earlier answers holding ``pattern``, with the tokens before it
        in that answer (for the hover)."""
        where = find_span(self.joined, pattern)
        if where is None:
            return None
        begin = where
        while begin > 0 and self.joined[begin - 1] != -1 and where - begin < SOURCE_CONTEXT:
            begin -= 1
        return self.joined[begin : where + len(pattern)].tolist()


def find_span(tokens, pattern: list[int]) -> int | None:
    """Start of the last occurrence of ``pattern`` in ``tokens`` (a list or an array), or None.
    Only the places holding the pattern's first token are compared (a step's budget is ms)."""
    n = len(pattern)
    arr = np.asarray(tokens, dtype=np.int64)
    if n == 0 or len(arr) < n:
        return None
    starts = np.flatnonzero(arr[: len(arr) - n + 1] == pattern[0])
    if not len(starts):
        return None
    hits = starts[(arr[starts[:, None] + np.arange(n)] == np.asarray(pattern, dtype=np.int64)).all(axis=1)]
    return int(hits[-1]) if len(hits) else None


_shared: dict[str, SuffixStore] = {}


def vocabulary_of(model) -> str:
    """What an answer's ids mean: models with the same vocabulary (size and special ids) share a
    tokenizer, as SmolLM2-135M and -1.7B do, and so share earlier answers; other models do not."""
    c = model.config
    return f"{c.vocab_size}/{c.bos_token_id}/{c.eos_token_id}"


def shared_store(vocabulary: str = "") -> SuffixStore:
    """The process's store for one vocabulary (``vocabulary_of``; created on first use)."""
    if vocabulary not in _shared:
        _shared[vocabulary] = SuffixStore()
    return _shared[vocabulary]


def shared_stores() -> list[SuffixStore]:
    """Every vocabulary's store (the app shows and forgets them together)."""
    return list(_shared.values())


class SuffixDrafter:
    """Drafts from ``store`` and this request's own prompt and answer. Call ``close()`` when the
    generation ends: the answer then joins the store for later requests."""

    def __init__(self, store: SuffixStore, config: SuffixConfig = SuffixConfig(), vocab_size: int | None = None):
        self.store = store
        self.config = config
        # a store passed in may hold answers of another tokenizer, with ids this target does not
        # have (proposals stop before them); the process's stores are kept per vocabulary
        self.vocab_size = vocab_size
        self.cache = None  # the store's tree this request was started on
        self.request = None
        self.prompt_length = 0
        self.seen = 0
        self.tokens: list[int] = []
        self.match_len = 0  # how many tokens of the context's tail the last proposal matched

    def follow(self, tokens: list[int]) -> None:
        """Tell the trees about the tokens emitted since the last call (the prompt, first)."""
        with self.store.lock:
            if self.request is None:
                self.cache, self.request = self.store.cache, next(self.store.ids)
                self.cache.start_request(self.request, tokens)
                self.prompt_length = self.seen = len(tokens)
            elif len(tokens) > self.seen:
                self.cache.add_active_response(self.request, tokens[self.seen :])
                self.seen = len(tokens)
        self.tokens = tokens

    def speculate(self, tokens: list[int], n: int, tree: bool = False):
        """The trees' best continuation of ``tokens`` (≤ n tokens; with ``tree``, several
        branches: token ids, their parents, their estimated probabilities)."""
        self.follow(tokens)
        cfg = self.config
        with self.store.lock:
            return self.cache.speculate(
                self.request,
                tokens[-CONTEXT_WINDOW:],
                max_spec_tokens=n,
                max_spec_factor=cfg.max_spec_factor,
                min_token_prob=cfg.min_token_prob,
                use_tree_spec=tree,
            )

    def propose(self, tokens: list[int], n: int, sampling: SamplingConfig, generator) -> Draft:
        self.match_len = 0
        if n <= 0:
            self.follow(tokens)
            return Draft()
        found = self.speculate(tokens, n)
        ids = self.known(list(found.token_ids)[:n])
        self.match_len = found.match_len if ids else 0
        return Draft(ids, source=self.source(tokens, ids, found.match_len)) if ids else Draft()

    def known(self, ids: list[int]) -> list[int]:
        """``ids`` up to the first one outside the target's vocabulary."""
        if self.vocab_size is None:
            return ids
        bad = next((i for i, t in enumerate(ids) if not 0 <= t < self.vocab_size), len(ids))
        return ids[:bad]

    def source(self, tokens: list[int], ids: list[int], match_len: int) -> dict:
        """Where the proposal was seen: in this prompt, this answer, or an earlier answer, with
        the tokens around it there (the race shows them on hover)."""
        tail = tokens[-max(1, min(match_len, SOURCE_CONTEXT)) :]
        where = find_span(tokens, tail + ids)
        if where is not None:
            part = "prompt" if where + len(tail) <= self.prompt_length else "answer"
            return {
                "from": part,
                "ids": tokens[max(0, where - SOURCE_CONTEXT + len(tail)) : where + len(tail) + len(ids)],
            }
        with self.store.lock:
            earlier = self.store.find(tail + ids)
        if earlier is not None:
            return {"from": "earlier answer", "ids": earlier}
        return {"from": "several places", "ids": []}  # the tree joined continuations seen apart

    def close(self) -> None:
        """End the request: its answer stays in the store's tree (FIFO-bounded)."""
        if self.request is None:
            return
        with self.store.lock:
            if len(self.tokens) > self.seen:
                self.cache.add_active_response(self.request, self.tokens[self.seen :])
            self.cache.stop_request(self.request)
            self.store.add(self.cache, list(self.tokens[self.prompt_length :]))
        self.request = None


class HybridDrafter:
    """Suffix decoding where it has seen this context go on (free, often long), the draft model
    everywhere else: each step's draft comes from one of them, with its own q, so the rule is
    unchanged. The draft model catches up on the tokens it skipped at its next turn."""

    def __init__(self, suffix: SuffixDrafter, model_drafter, config: SuffixConfig = SuffixConfig()):
        self.suffix = suffix
        self.model = model_drafter
        self.config = config

    def propose(self, tokens: list[int], n: int, sampling: SamplingConfig, generator) -> Draft:
        found = self.suffix.propose(tokens, n, sampling, None)
        if found and self.suffix.match_len >= min(n, self.config.hybrid_min):
            return found
        return self.model.propose(tokens, min(n, self.config.hybrid_model_gamma), sampling, generator)

    def capture(self, first_feed: int) -> None:
        if hasattr(self.model, "capture"):
            self.model.capture(first_feed)

    def close(self) -> None:
        self.suffix.close()
