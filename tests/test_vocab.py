"""Reduced-vocabulary drafting: q is 0 outside the subset and decoding stays lossless."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB
from test_engine import PROMPTS, reference
from test_sampling import PROMPT, SAMPLES, TARGET, chi2_pvalue, exact_joint, small_llama

from specdemo.decoding.engine import DecodeConfig, decode_steps, eos_ids, run_all, sample_many
from specdemo.decoding.sampling import SamplingConfig
from specdemo.decoding.tree import TreeConfig
from specdemo.decoding.vocab import (
    ReducedVocabLM,
    load_ranking,
    rank_by_frequency,
    reduce_draft,
    save_ranking,
    subset_ids,
)


def test_ranking_orders_by_frequency_then_id_and_keeps_eos(tmp_path):
    ranked = rank_by_frequency([[5, 5, 3], [3, 5, 9]], vocab_size=10)
    assert ranked[:3] == [5, 3, 9] and ranked[3:] == [0, 1, 2, 4, 6, 7, 8]
    save_ranking(tmp_path, ranked, "test")
    assert load_ranking(str(tmp_path), 10) == ranked
    assert load_ranking(str(tmp_path / "none"), 4) == [0, 1, 2, 3]  # no file: ids in order
    assert subset_ids(ranked, 2, always=[7]) == [5, 3, 7]
    assert subset_ids(ranked, 2, always=[3]) == [5, 3]


def test_reduced_logits_are_the_full_logits_on_the_subset_and_minus_inf_elsewhere(llama_pair):
    _, draft = llama_pair
    ids = list(range(0, VOCAB, 3))
    reduced = ReducedVocabLM(draft, ids)
    x = torch.tensor([[1, 4, 9, 16]])
    with torch.no_grad():
        full = draft(input_ids=x).logits
    logits = reduced(input_ids=x).logits
    assert logits.shape == full.shape
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[ids] = False
    torch.testing.assert_close(logits[..., ids], full[..., ids], rtol=1e-5, atol=1e-5)
    assert torch.isinf(logits[..., outside]).all()
    assert reduce_draft(draft, "nowhere", 0) is draft and reduce_draft(draft, "nowhere", VOCAB) is draft


@pytest.mark.parametrize("method", ["draft", "tree"])
def test_greedy_with_a_reduced_draft_is_token_identical_to_generate(llama_pair, method):
    target, draft = llama_pair
    eos = eos_ids(target)
    # A subset that misses many of the target's choices: corrections must fill them in.
    reduced = ReducedVocabLM(draft, subset_ids(list(range(VOCAB)), VOCAB // 2, eos))
    for prompt in PROMPTS:
        expected = reference(target, prompt, 40)
        for gamma in (1, 4):
            cfg = DecodeConfig(max_new_tokens=40, gamma=gamma, method=method, tree=TreeConfig(2, gamma, 2 * gamma))
            run = run_all(decode_steps(target, reduced, prompt, cfg, eos))
            assert run.token_ids == expected, (prompt, gamma)
            drafted = {t for s in run.steps for t in s.drafted}
            assert drafted <= set(reduced.ids.tolist())
    assert any(t >= VOCAB // 2 for t in expected), "the check needs target tokens outside the subset"


@pytest.mark.slow
def test_reduced_draft_sampling_follows_the_target_and_corrections_leave_the_subset():
    subset = [0, 1, 2]  # 3 of 8 tokens: the correction must produce the other 5
    draft = ReducedVocabLM(small_llama(7, 1.0), subset)
    sampling = SamplingConfig(temperature=1.0, seed=11)
    cfg = DecodeConfig(max_new_tokens=3, gamma=4, sampling=sampling)
    samples = sample_many(TARGET, draft, PROMPT, cfg, SAMPLES)
    pvalue = chi2_pvalue(samples, exact_joint(TARGET, PROMPT, sampling))
    print(f"chi2 p-value {pvalue:.4f}")
    assert pvalue > 1e-3
    assert any(s[0] not in subset for s in samples) and any(s[0] in subset for s in samples)
