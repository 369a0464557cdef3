"""Greedy identity with model.generate, cache rollback, stopping, and validation."""

from __future__ import annotations

import math

import pytest
import torch

from specdemo.decoding.engine import (
    DecodeConfig,
    baseline_steps,
    eos_ids,
    run_all,
    speculative_steps,
)
from specdemo.decoding.kv import CachedLM
from specdemo.decoding.sampling import SamplingConfig
from specdemo.errors import InputError

PROMPTS = [[1, 5, 7, 9, 11], [3, 3, 3, 40, 41, 42, 3, 3], [17]]


def reference(target, prompt, n):
    out = target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("method", ["draft", "prompt-lookup", "suffix"])
@pytest.mark.parametrize("schedule", ["constant", "heuristic"])
def test_greedy_speculative_is_token_identical_to_generate(tiny_pair, method, schedule):
    target, draft = tiny_pair
    for prompt in PROMPTS:
        expected = reference(target, prompt, 40)
        for gamma in (1, 2, 4, 8):
            cfg = DecodeConfig(max_new_tokens=40, gamma=gamma, method=method, schedule=schedule)
            run = run_all(speculative_steps(target, draft, prompt, cfg, eos=eos_ids(target)))
            assert run.token_ids == expected, (prompt, gamma)


def test_baseline_is_token_identical_to_generate(tiny_pair):
    target, _ = tiny_pair
    for prompt in PROMPTS:
        run = run_all(baseline_steps(target, prompt, DecodeConfig(max_new_tokens=30), eos=eos_ids(target)))
        assert run.token_ids == reference(target, prompt, 30)
        assert all(len(s.emitted) == 1 and not s.drafted for s in run.steps)


def test_noisy_draft_gets_both_acceptances_and_rejections(llama_pair):
    """Guards the other tests: identity must hold on a draft that is right only sometimes."""
    target, draft = llama_pair
    run = run_all(speculative_steps(target, draft, PROMPTS[0], DecodeConfig(max_new_tokens=60, gamma=4)))
    accepted = sum(s.accepted for s in run.steps)
    drafted = sum(len(s.drafted) for s in run.steps)
    assert 0 < accepted < drafted
    assert any(s.correction is not None for s in run.steps)
    assert any(s.bonus is not None for s in run.steps)
    for s in run.steps:  # a step emits the kept drafts, then exactly one target token
        assert s.emitted[: s.accepted] == s.drafted[: s.accepted]
        assert s.emitted[-1] == (s.correction if s.correction is not None else s.bonus) or s.finished


def test_heuristic_schedule_changes_gamma(llama_pair):
    target, draft = llama_pair
    cfg = DecodeConfig(max_new_tokens=60, gamma=4, schedule="heuristic")
    lengths = {len(s.drafted) for s in run_all(speculative_steps(target, target, [1, 2], cfg)).steps}
    assert max(lengths) > 4  # the target drafting for itself is always accepted: γ grows by 2


def test_confidence_stop_shortens_drafts(llama_pair):
    target, draft = llama_pair
    eos = eos_ids(target)
    full = run_all(speculative_steps(target, draft, PROMPTS[0], DecodeConfig(max_new_tokens=40, gamma=8), eos))
    cfg = DecodeConfig(max_new_tokens=40, gamma=8, min_confidence=0.9)
    short = run_all(speculative_steps(target, draft, PROMPTS[0], cfg, eos))
    assert short.token_ids == full.token_ids == reference(target, PROMPTS[0], 40)
    assert sum(len(s.drafted) for s in short.steps) < sum(len(s.drafted) for s in full.steps)


def test_rollback_leaves_the_cache_equal_to_a_fresh_forward(llama_pair):
    """After a rejection, the next verify logits equal a fresh forward over the accepted sequence."""
    target, draft = llama_pair
    prompt = PROMPTS[0]
    steps = speculative_steps(target, draft, prompt, DecodeConfig(max_new_tokens=40, gamma=4))
    seen_rejection = False
    tokens = list(prompt)
    cached = CachedLM(target)
    for step in steps:
        tokens += step.emitted
        if step.correction is not None:
            seen_rejection = True
            # a cache that went through drafts and a rollback…
            cached.logits_after(tokens[: -len(step.emitted)], step.drafted)
            cached.rollback_to(len(tokens) - len(step.emitted) + step.accepted)
            probe = [5, 6, 7]
            rolled = cached.logits_after(tokens, probe)
            with torch.inference_mode():
                fresh = target(input_ids=torch.tensor([tokens + probe])).logits[0, -len(probe) - 1 :]
            torch.testing.assert_close(rolled, fresh, rtol=1e-4, atol=1e-4)
            cached.rollback_to(len(tokens))
    assert seen_rejection


def test_eos_inside_a_drafted_run_stops_at_the_eos(llama_pair):
    target, _ = llama_pair
    expected = reference(target, PROMPTS[0], 40)
    eos = {expected[6]}  # pretend the 7th greedy token is an end-of-sequence id
    # the target drafting for itself accepts everything, so the EOS sits inside a drafted run
    run = run_all(speculative_steps(target, target, PROMPTS[0], DecodeConfig(max_new_tokens=40, gamma=8), eos=eos))
    first = next(i for i, t in enumerate(expected) if t in eos)
    assert run.token_ids == expected[: first + 1]
    last = run.steps[-1]
    assert last.finished
    assert len(last.drafted) > last.emitted.index(expected[first]) + 1  # drafts went on past the EOS
    # ...but only the drafts up to the EOS count as accepted, and no target token follows it
    assert last.accepted == len(last.emitted) and last.bonus is None and last.correction is None
    assert sum(s.accepted for s in run.steps) == first + 1 - sum(1 for s in run.steps[:-1])


@pytest.mark.parametrize("budget", [1, 2, 5, 9, 13])
def test_max_new_tokens_never_exceeded_even_mid_accept(llama_pair, budget):
    target, _ = llama_pair
    run = run_all(speculative_steps(target, target, PROMPTS[0], DecodeConfig(max_new_tokens=budget, gamma=8)))
    assert run.token_ids == reference(target, PROMPTS[0], budget)
    assert len(run.token_ids) == budget


def test_cancel_stops_between_steps(llama_pair):
    target, draft = llama_pair
    calls = []
    steps = list(
        speculative_steps(
            target, draft, PROMPTS[0], DecodeConfig(max_new_tokens=60), cancel=lambda: len(calls.append(1) or calls) > 3
        )
    )
    assert len(steps) == 3


def test_step_timings_are_recorded(llama_pair):
    target, draft = llama_pair
    run = run_all(speculative_steps(target, draft, PROMPTS[0], DecodeConfig(max_new_tokens=20)))
    assert all(s.draft_s > 0 and s.verify_s > 0 and s.rest_s > 0 for s in run.steps)
    assert run.steps[-1].elapsed_s == pytest.approx(run.seconds)
    assert run.steps[-1].new_tokens == len(run.token_ids)


@pytest.mark.parametrize(
    "prompt, changes, message",
    [
        ([], {}, "prompt is empty"),
        ([1], {"max_new_tokens": 0}, "max new tokens must be a whole number ≥ 1"),
        ([1], {"max_new_tokens": 5000}, "at most 2048"),
        ([1], {"gamma": 0}, "between 1 and 32"),
        ([1], {"gamma": 33}, "between 1 and 32"),
        ([1], {"sampling": SamplingConfig(temperature=-1)}, "temperature must be a number ≥ 0"),
        ([1], {"sampling": SamplingConfig(temperature=math.nan)}, "temperature must be a number ≥ 0"),
        ([1], {"sampling": SamplingConfig(temperature=1, top_p=0)}, "top_p must be in (0, 1]"),
        ([1], {"sampling": SamplingConfig(temperature=1, top_p=1.5)}, "top_p must be in (0, 1]"),
        ([1], {"sampling": SamplingConfig(temperature=1, top_k=-1)}, "top_k must be ≥ 0"),
        (list(range(90)) * 3, {}, "longer than the model's context of 256"),
        (list(range(90)) * 2, {"max_new_tokens": 100}, "ask for at most 76 new tokens"),
    ],
)
def test_validation_errors_are_specific(llama_pair, prompt, changes, message):
    target, draft = llama_pair
    cfg = DecodeConfig(**changes)
    with pytest.raises(InputError, match=None) as err:
        next(speculative_steps(target, draft, prompt, cfg))
    assert message in str(err.value)
