"""Drafters propose the next few tokens cheaply; the target then verifies them.

A drafter returns the drafted ids and the distribution q each was drawn from. The
acceptance rule in ``engine.py`` needs q(x) for each drafted x and, at a rejection, the whole
row q to form the residual max(0, p − q). Also here: the draft-length schedules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specdemo.decoding.kv import CachedLM, common_prefix_length
from specdemo.decoding.sampling import SamplingConfig, align_vocab, draw, to_probs

MAX_GAMMA = 32
PROMPT_LOOKUP_GAMMA = 4  # prompt lookup's γ where none is chosen (measured best on the task suite)


@dataclass
class Draft:
    ids: list[int] = field(default_factory=list)
    # q of each drafted position [k, V]; None means every q is one-hot on the drafted id
    # (a deterministic drafter such as prompt lookup).
    probs: torch.Tensor | None = None
    # Where a model-free proposal was seen ({"from": "prompt" | "answer" | "earlier answer", "ids"}).
    source: dict | None = None
    # auto's choice for this step: {"source", "gamma", "expected", "cost", "reason"} (decoding/auto.py)
    choice: dict | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def q_of_drafted(self) -> list[float]:
        if self.probs is None:
            return [1.0] * len(self.ids)
        idx = torch.tensor(self.ids, device=self.probs.device).unsqueeze(1)
        return self.probs.gather(1, idx).squeeze(1).tolist()

    def q_row(self, i: int, vocab_size: int, device) -> torch.Tensor:
        if self.probs is not None:
            return self.probs[i]
        row = torch.zeros(vocab_size, device=device)
        row[self.ids[i]] = 1.0
        return row


class ModelDrafter:
    """A small causal LM drafting autoregressively with its own KV cache.

    ``min_confidence`` > 0 stops a draft early when the draft's top probability falls below
    it: the draft is unsure, so the target's time is better spent on a shorter check."""

    def __init__(self, model, target_vocab_size: int, min_confidence: float = 0.0, like: CachedLM | None = None):
        self.lm = like.like(model) if like else CachedLM(model)  # ``like``: the target's kind of step
        self.vocab_size = target_vocab_size
        self.min_confidence = min_confidence

    def capture(self, first_feed: int) -> None:
        """Its steps' shapes (compiled steps only): one token, or two after a fully kept draft and its bonus."""
        self.lm.capture(first_feed, [(1, 1), (2, 1)])

    def lag(self, tokens: list[int]) -> int:
        """Tokens its cache must take in before it drafts after ``tokens`` (many, after other sources drafted)."""
        return len(tokens) - common_prefix_length(self.lm.fed, tokens)

    def propose(self, tokens: list[int], n: int, sampling: SamplingConfig, generator) -> Draft:
        if n <= 0:
            return Draft()
        ids, logit_rows, prob_rows = [], [], []
        feed = self.lm.pending(tokens)
        if not feed:  # the cache already holds every token: recompute the last position
            self.lm.rollback_to(len(tokens) - 1)
            feed = tokens[-1:]
        # Greedy without a confidence stop needs q only for the records: one softmax at the end.
        per_token_q = not sampling.greedy or self.min_confidence > 0
        for _ in range(n):
            logits = align_vocab(self.lm.forward(feed), self.vocab_size)[0]
            if per_token_q:
                probs = to_probs(logits[None], sampling)[0]
                if self.min_confidence > 0 and float(probs.max()) < self.min_confidence:
                    break
                prob_rows.append(probs)
            x = int(logits.argmax()) if sampling.greedy else draw(probs, generator)
            ids.append(x)
            logit_rows.append(logits)
            feed = [x]  # the last drafted token is fed only if another one is drafted
        if not ids:
            return Draft()
        q = torch.stack(prob_rows) if per_token_q else to_probs(torch.stack(logit_rows), sampling)
        return Draft(ids, q)


class PromptLookupDrafter:
    """Prompt lookup decoding (Saxena 2023): find the latest earlier occurrence of the last
    n tokens (n = max_ngram … 1) and propose what followed it. No model runs; q is one-hot
    on the proposal, and the acceptance rule keeps sampling lossless all the same."""

    def __init__(self, max_ngram: int = 3):
        self.max_ngram = max_ngram
        self.match_len = 0  # the n-gram the last proposal matched (auto's signal)

    def propose(self, tokens: list[int], n: int, sampling: SamplingConfig, generator) -> Draft:
        self.match_len = 0
        if n <= 0:
            return Draft()
        for size in range(min(self.max_ngram, len(tokens) - 1), 0, -1):
            tail = tokens[-size:]
            for start in range(len(tokens) - size - 1, -1, -1):
                if tokens[start : start + size] == tail:
                    self.match_len = size
                    return Draft(tokens[start + size : start + size + n])
        return Draft()


class ConstantSchedule:
    """Draft the same γ tokens every step."""

    def __init__(self, gamma: int):
        self.gamma = gamma

    def update(self, drafted: int, accepted: int) -> None:
        pass


class HeuristicSchedule(ConstantSchedule):
    """transformers' "heuristic" schedule: γ += 2 after a fully accepted draft, else γ −= 1."""

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        step = 2 if accepted == drafted else -1
        self.gamma = max(1, min(MAX_GAMMA, self.gamma + step))


SCHEDULES = {"constant": ConstantSchedule, "heuristic": HeuristicSchedule}
