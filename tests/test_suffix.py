"""Suffix decoding: lossless whatever the store holds, faster on a repeated workload, memory-bounded."""

from __future__ import annotations

import pytest
import torch

from specdemo.decoding.engine import DecodeConfig, decode_steps, eos_ids, run_all, speculative_steps
from specdemo.decoding.sampling import SamplingConfig
from specdemo.decoding.suffix import (
    SuffixConfig,
    SuffixDrafter,
    SuffixStore,
    find_span,
    shared_store,
    vocabulary_of,
)

PROMPT = [1, 5, 7, 9, 11, 13, 5, 7, 9]


def greedy(target, prompt, n=40):
    out = target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


def suffix_run(target, prompt, store, gamma=8, n=40, method="suffix", **sampling):
    cfg = DecodeConfig(max_new_tokens=n, gamma=gamma, method=method, sampling=SamplingConfig(**sampling))
    return run_all(decode_steps(target, None, prompt, cfg, eos_ids(target), store=store))


@pytest.mark.parametrize("method", ["suffix", "suffix-tree"])
def test_greedy_suffix_is_token_identical_to_generate(tiny_pair, method):
    target, _ = tiny_pair
    store = SuffixStore()
    for prompt in ([1, 5, 7, 9, 11], [3, 3, 3, 40, 41, 42, 3, 3], PROMPT):
        expected = greedy(target, prompt)
        for gamma in (1, 4, 8):
            assert suffix_run(target, prompt, store, gamma, method=method).token_ids == expected, (prompt, gamma)


def test_the_suffix_tree_tries_several_continuations_in_one_forward(llama_pair):
    """Two answers that share a start and then part: the tree proposes both branches."""
    target, _ = llama_pair
    store = SuffixStore()
    expected = greedy(target, PROMPT)
    for wrong in ([(t + 1) % 100 for t in expected], expected):
        drafter = SuffixDrafter(store)
        drafter.follow(PROMPT)
        drafter.follow(PROMPT + expected[:3] + wrong[3:])
        drafter.close()
    run = suffix_run(target, PROMPT, store, method="suffix-tree")
    assert run.token_ids == expected
    branching = [s for s in run.steps if len(set(s.tree_parents)) < len(s.tree_parents)]
    assert branching and any(s.accepted >= 3 for s in run.steps)


def test_a_store_of_wrong_answers_changes_nothing_but_the_speed(llama_pair):
    """Earlier answers that continue the context differently: proposed, rejected, output unchanged."""
    target, _ = llama_pair
    expected = greedy(target, PROMPT)
    store = SuffixStore()
    wrong = [(t + 1) % 100 for t in expected]
    drafter = SuffixDrafter(store)
    drafter.follow(PROMPT)
    drafter.follow(PROMPT + wrong)  # an "earlier answer" that is not the target's
    drafter.close()
    run = suffix_run(target, PROMPT, store)
    assert run.token_ids == expected
    assert any(s.drafted and s.accepted < len(s.drafted) for s in run.steps)  # proposals were rejected


@pytest.mark.parametrize("method", ["suffix", "suffix-tree", "hybrid"])
def test_an_answer_from_another_vocabulary_is_never_proposed_past_its_first_unknown_id(llama_pair, method):
    """The store is shared by every pair of the process: an answer written with a larger vocabulary
    (ids this target does not have) must not reach the target's embedding."""
    target, draft = llama_pair
    vocab = target.config.vocab_size
    prompt = [1, 2, 3, 4, 6, 8, 10]  # nothing repeats in it: the first proposal comes from the store
    expected = greedy(target, prompt)
    store = SuffixStore()
    drafter = SuffixDrafter(store)
    drafter.follow(prompt)
    drafter.follow(prompt + expected[:1] + [vocab + 5, vocab + 6] + expected[1:])
    drafter.close()
    cfg = DecodeConfig(max_new_tokens=40, gamma=8, method=method)
    run = run_all(decode_steps(target, draft, prompt, cfg, eos_ids(target), store=store))
    assert run.token_ids == expected
    drafted = [t for step in run.steps for t in step.drafted]
    assert drafted and all(t < vocab for t in drafted)  # the answer's known part is still drafted


def test_the_processs_stores_keep_each_vocabulary_apart(llama_pair):
    """Without a store passed in, an answer joins the store of its target's vocabulary: the same
    target is drafted from it next time, a target with another tokenizer never sees it."""
    from conftest import VOCAB, llama

    target, _ = llama_pair
    other = llama(1, 3, vocab=VOCAB + 32)
    cfg = DecodeConfig(max_new_tokens=40, gamma=8, method="suffix")
    stores = [shared_store(vocabulary_of(m)) for m in (target, other)]
    for store in stores:
        store.reset()
    try:
        run_all(decode_steps(target, None, PROMPT, cfg, eos_ids(target)))
        assert [store.stats()["answers"] for store in stores] == [1, 0]
        again = run_all(decode_steps(target, None, PROMPT, cfg, eos_ids(target)))
        assert any(s.draft_source and s.draft_source["from"] == "earlier answer" for s in again.steps)
        elsewhere = run_all(decode_steps(other, None, PROMPT, cfg, eos_ids(other)))
        assert not any(s.draft_source and s.draft_source["from"] == "earlier answer" for s in elsewhere.steps)
        assert [store.stats()["answers"] for store in stores] == [2, 1]
    finally:
        for store in stores:
            store.reset()


def test_the_second_pass_of_a_question_is_proposed_whole(llama_pair):
    target, _ = llama_pair
    store = SuffixStore()
    first = suffix_run(target, PROMPT, store)
    second = suffix_run(target, PROMPT, store)
    assert first.token_ids == second.token_ids == greedy(target, PROMPT)
    assert len(second.steps) < len(first.steps) / 2  # τ more than doubles on the second pass
    sources = [s.draft_source for s in second.steps if s.accepted]
    assert any(src["from"] == "earlier answer" and src["ids"] for src in sources)
    assert store.stats()["answers"] == 2


def test_a_proposal_says_where_it_was_seen():
    store = SuffixStore()
    drafter = SuffixDrafter(store)
    draft = drafter.propose([1, 2, 3, 4, 9, 9, 1, 2], 2, SamplingConfig(), None)
    assert draft.ids == [3, 4]
    assert draft.source == {"from": "prompt", "ids": [1, 2, 3, 4]}
    drafter.close()
    assert drafter.propose([7], 2, SamplingConfig(), None).source is None  # a new request, nothing to match


def test_the_store_keeps_only_the_last_answers_and_resets():
    store = SuffixStore(max_answers=2)
    answers = [[50 + 10 * i + j for j in range(8)] for i in range(4)]
    for answer in answers:
        d = SuffixDrafter(store)
        d.follow([1])
        d.follow([1] + answer)
        d.close()
    assert store.stats() == {"answers": 2, "tokens": 16}

    def proposes(answer) -> bool:
        d = SuffixDrafter(store)
        ids = d.propose([2] + answer[:3], 3, SamplingConfig(), None).ids
        d.close()
        return ids == answer[3:6]

    assert proposes(answers[-1])  # kept: its continuation is proposed
    assert not proposes(answers[0])  # evicted (FIFO): nothing left to propose from
    store.reset()
    assert store.stats() == {"answers": 0, "tokens": 0} and not proposes(answers[-1])


def test_an_answer_stopped_early_still_joins_the_store(llama_pair):
    target, _ = llama_pair
    store = SuffixStore()
    cfg = DecodeConfig(max_new_tokens=40, gamma=4, method="suffix")
    steps = speculative_steps(target, None, PROMPT, cfg, store=store)
    next(steps), next(steps)
    steps.close()  # the race's Stop
    assert store.stats()["answers"] == 1 and store.stats()["tokens"] > 0


def test_find_span_finds_the_last_occurrence():
    assert find_span([1, 2, 3, 1, 2], [1, 2]) == 3
    assert find_span([1, 2, 3], [2, 4]) is None
    assert find_span([1], [1, 2]) is None


def test_bad_suffix_settings_are_refused_in_one_line(llama_pair):
    from specdemo.errors import InputError

    target, _ = llama_pair
    cfg = DecodeConfig(method="suffix", suffix=SuffixConfig(min_token_prob=1.5))
    with pytest.raises(InputError, match="minimum probability"):
        list(speculative_steps(target, None, PROMPT, cfg))


def test_the_hybrid_drafts_from_the_store_where_it_can_and_from_the_draft_model_elsewhere(tiny_pair):
    target, draft = tiny_pair
    store = SuffixStore()
    cfg = DecodeConfig(max_new_tokens=40, gamma=8, method="hybrid")
    for prompt in ([1, 5, 7, 9, 11], PROMPT):
        expected = greedy(target, prompt)
        first = run_all(decode_steps(target, draft, prompt, cfg, eos_ids(target), store=store))
        again = run_all(decode_steps(target, draft, prompt, cfg, eos_ids(target), store=store))
        assert first.token_ids == again.token_ids == expected
        by_model = [s for s in first.steps if s.drafted and s.draft_source is None]
        assert by_model and all(len(s.drafted) == 1 for s in by_model)  # the model's own γ: 1
        assert len(again.steps) < len(first.steps)  # the second time, suffix decoding drafts it


def test_a_one_token_match_proposes_up_to_gamma_but_the_hybrid_leaves_it_to_the_draft_model(tiny_pair):
    """Suffix decoding proposes up to γ tokens after a match of any length (factor 4); the hybrid
    drafts such a proposal only where the match is at least ``hybrid_min`` tokens long."""
    from specdemo.decoding.drafters import ModelDrafter
    from specdemo.decoding.suffix import HybridDrafter

    target, draft = tiny_pair
    sampling = SamplingConfig()
    context = [50, 60, 7, 8, 9, 10, 11, 70, 7]  # the tail "7" matches one token, then "8 9 10 11"
    alone = SuffixDrafter(SuffixStore())
    proposal = alone.propose(context, 4, sampling, None)
    assert proposal.ids == [8, 9, 10, 11] and alone.match_len == 1
    one = SuffixDrafter(SuffixStore(), SuffixConfig(max_spec_factor=1.0))  # vLLM's factor: one token
    assert one.propose(context, 4, sampling, None).ids == [8]
    hybrid = HybridDrafter(SuffixDrafter(SuffixStore()), ModelDrafter(draft, target.config.vocab_size))
    by_model = hybrid.propose(context, 4, sampling, torch.Generator())
    assert by_model.source is None and len(by_model) == 1  # the draft model, at its own γ
    longer = context + [8]  # now "7 8" matches two tokens: suffix decoding drafts
    by_suffix = hybrid.propose(longer, 4, sampling, torch.Generator())
    assert by_suffix.ids[:3] == [9, 10, 11] and by_suffix.source is not None and hybrid.suffix.match_len == 2
