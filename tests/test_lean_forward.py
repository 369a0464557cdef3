"""The lean forward (models/lean_forward.py): transformers' Llama operations without its per-call
plumbing, q/k/v and gate/up joined on compact weights. Its logits must be transformers' bit for bit
at every step shape a decode makes, and greedy decoding on it must stay token-identical to
``generate()`` (which runs transformers' own forward)."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import llama, perturbed
from test_compact_linear import gguf_llama

from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, eos_ids, run_all
from specdemo.decoding.kv import CachedLM
from specdemo.decoding.tree import tree_steps
from specdemo.decoding.vocab import ReducedVocabLM
from specdemo.models import compact_linear, lean_forward
from specdemo.models.compact_linear import MAX_ROWS, use_compact_weights
from specdemo.models.lean_forward import use_lean_forward

pytestmark = pytest.mark.skipif(compact_linear.kernels() is None, reason="no C compiler for the kernels")

# a prompt, steps of one token, a verify of 4, a step, a long prompt's worth (past MAX_ROWS: torch's product)
FEEDS = [[3, 9, 27, 4, 11], [5], [8], [13, 2, 40, 7], [6], list(range(20, 20 + MAX_ROWS + 3))]


def lean_and_reference(model):
    """``model`` given the lean forward, and an untouched copy of it (transformers' forward)."""
    reference = copy.deepcopy(model)
    assert use_lean_forward(model)
    return model, reference


def counted_lean_steps(monkeypatch) -> list[int]:
    calls = []
    body_step = lean_forward.body_step
    monkeypatch.setattr(lean_forward, "body_step", lambda *a: calls.append(1) or body_step(*a))
    return calls


@pytest.mark.parametrize("weights", ["gguf", "F16"])
def test_the_lean_forward_gives_transformers_logits_bit_for_bit(tmp_path, monkeypatch, weights):
    if weights == "gguf":
        model, path = gguf_llama(tmp_path, layers=2)
        assert use_compact_weights(model, path) == 2 * 7 + 1
    else:
        model = llama(2, 3).half().float()
        assert use_compact_weights(model) == 2 * 7 + 1
    lean, reference = lean_and_reference(model)
    calls = counted_lean_steps(monkeypatch)
    ours, theirs = CachedLM(lean), CachedLM(reference)
    for feed in FEEDS:
        assert torch.equal(ours.forward(feed, keep=len(feed)), theirs.forward(feed, keep=len(feed)))
    assert len(calls) == len(FEEDS)  # every one of those steps ran the lean forward
    ours.rollback_to(7)  # a rejection: both caches cropped, then the same tokens again
    theirs.rollback_to(7)
    assert torch.equal(ours.forward([9, 9, 1]), theirs.forward([9, 9, 1]))


def test_a_reduced_vocabulary_draft_runs_its_body_lean_and_the_same(monkeypatch):
    draft = llama(2, 4).half().float()
    use_compact_weights(draft)
    lean, reference = lean_and_reference(draft)
    calls = counted_lean_steps(monkeypatch)
    ids = list(range(0, 96, 3))
    ours, theirs = CachedLM(ReducedVocabLM(lean, ids)), CachedLM(ReducedVocabLM(reference, ids))
    for feed in FEEDS[:5]:
        assert torch.equal(ours.forward(feed), theirs.forward(feed))
    assert len(calls) == 5


def test_a_control_that_changes_one_weight_is_caught():
    """The comparison above can fail: one kernel weight one code off changes the logits."""
    model = llama(1, 5).half().float()
    use_compact_weights(model)
    lean, reference = lean_and_reference(model)
    lean.model.layers[0].mlp.up_proj.codes[0, 0] ^= 1  # a view of the joined gate/up blocks
    assert not torch.equal(CachedLM(lean).forward([1, 2, 3]), CachedLM(reference).forward([1, 2, 3]))


def test_greedy_decoding_on_the_lean_forward_equals_generate(tmp_path):
    target, path = gguf_llama(tmp_path, layers=3)
    use_compact_weights(target, path)
    assert use_lean_forward(target)
    draft = perturbed(llama(3, 0), 0.3, 5).half().float()
    use_compact_weights(draft)
    assert use_lean_forward(draft)
    rejected = 0
    for prompt in ([1, 2, 3], [5, 9, 11, 40, 2], [7] * 20):
        out = target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=30, pad_token_id=0)
        expected = out[0, len(prompt) :].tolist()
        cfg = DecodeConfig(max_new_tokens=30, gamma=4)
        eos = eos_ids(target)
        spec = run_all(decode_steps(target, draft, prompt, cfg, eos=eos))
        assert run_all(baseline_steps(target, prompt, cfg, eos=eos)).token_ids == expected
        assert spec.token_ids == expected
        assert run_all(tree_steps(target, draft, prompt, cfg, eos=eos)).token_ids == expected  # masks: transformers'
        rejected += sum(len(s.drafted) - s.accepted for s in spec.steps)
    assert rejected > 0


def test_other_models_keep_transformers_forward():
    from conftest import gpt2

    assert not use_lean_forward(gpt2(1, 0))
