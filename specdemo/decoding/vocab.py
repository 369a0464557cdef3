"""Reduced-vocabulary drafting: the draft scores only the N most frequent target tokens.

A small draft spends most of its step in the output head (SmolLM2: 49,152 × 576 multiply-adds
per token against a few layers). FR-Spec (Zhao et al. 2025) ranks the target's vocabulary by
frequency on target-tokenized text and lets the draft compute logits only for the top N rows;
EAGLE-3 stores the same idea as a draft-to-target id map. Here the N ids are a subset of the
target's vocabulary, the draft's logits for every other id are −inf, so q is exactly 0 there.

That keeps speculative sampling exactly lossless: the acceptance rule holds for ANY q, and a
token outside the subset (q = 0) can still appear through the correction, which draws from
norm(max(0, p − q)) and so contains all of p's mass outside the subset.

The ranking is stored with a draft as ``draft_vocab.json`` (``{"ranked_ids": [...]}``). A draft
without one (a hub checkpoint) is ranked by token id: BPE gives low ids to the merges it
learned first, which are the most frequent ones — a cruder ranking, still lossless.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace

import torch

RANKING_FILE = "draft_vocab.json"


def rank_by_frequency(sequences: Iterable[list[int]], vocab_size: int) -> list[int]:
    """Every id of the vocabulary, most frequent in ``sequences`` first (ties: lower id first)."""
    counts = Counter(t for seq in sequences for t in seq)
    return sorted(range(vocab_size), key=lambda i: (-counts.get(i, 0), i))


def save_ranking(folder: Path, ranked_ids: list[int], source: str) -> None:
    (Path(folder) / RANKING_FILE).write_text(json.dumps({"source": source, "ranked_ids": ranked_ids}))


def load_ranking(draft_id: str, vocab_size: int) -> list[int]:
    """The draft's stored frequency ranking, or ids in order when it has none."""
    path = Path(draft_id).expanduser() / RANKING_FILE
    if path.exists():
        return json.loads(path.read_text())["ranked_ids"]
    return list(range(vocab_size))


def subset_ids(ranked_ids: list[int], n: int, always: Iterable[int] = ()) -> list[int]:
    """The first ``n`` ranked ids, plus ``always`` (the end-of-sequence ids: a draft that can
    never propose EOS would always be refused at the end of an answer)."""
    chosen = list(dict.fromkeys(ranked_ids[:n]))
    return chosen + [i for i in dict.fromkeys(always) if i not in set(chosen)]


class ReducedVocabLM:
    """A causal LM whose head computes logits only for ``ids``; every other logit is −inf.

    Callable like the transformers model it wraps (``input_ids``, ``cache``, masks, position ids,
    ``logits_to_keep``), so the chain and the tree drafters use it unchanged. ``full_model`` is the
    wrapped model (for transformers' own assisted generation)."""

    def __init__(self, model, ids: list[int]):
        self.full_model = model
        self.config = model.config
        self.device = model.device
        self.dtype = model.dtype
        self.body = model.base_model  # the transformer without its head (LlamaModel, GPT2Model, …)
        head = model.get_output_embeddings()
        self.vocab_size = head.weight.shape[0]
        self.ids = torch.tensor(ids, device=model.device)
        # The N rows of the head, copied once so each step multiplies a contiguous [N, hidden].
        bias = getattr(head, "bias", None)
        self.head = torch.nn.Linear(head.weight.shape[1], len(ids), bias=bias is not None, device=model.device)
        self.head.requires_grad_(False)
        self.head.weight.data = head.weight.detach()[self.ids].contiguous()
        if bias is not None:
            self.head.bias.data = bias.detach()[self.ids].contiguous()

    def __len__(self) -> int:
        return len(self.ids)

    def get_output_embeddings(self):
        return self.full_model.get_output_embeddings()

    def parameters(self):
        return self.full_model.parameters()

    @torch.inference_mode()
    def __call__(self, input_ids, logits_to_keep: int = 0, **kwargs):
        hidden = self.body(input_ids=input_ids, **kwargs).last_hidden_state
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        scores = self.head(hidden)
        logits = scores.new_full((*scores.shape[:-1], self.vocab_size), float("-inf"))
        logits[..., self.ids] = scores
        return SimpleNamespace(logits=logits)


def reduce_draft(model, draft_id: str, n: int, eos: Iterable[int] = ()):
    """``model`` restricted to its ``n`` most frequent target ids (0 or ≥ vocabulary: unchanged)."""
    vocab = model.get_output_embeddings().weight.shape[0]
    if not n or n >= vocab:
        return model
    return ReducedVocabLM(model, subset_ids(load_ranking(draft_id, vocab), n, eos))
