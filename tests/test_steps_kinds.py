"""The static KV cache and captured (compiled) steps: the same tokens as the eager, growing cache
and as ``generate()``, for every method the engine runs; a rollback moves the write position."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import llama, perturbed

from specdemo.decoding import auto
from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, eos_ids, run_all
from specdemo.decoding.kv import CachedLM
from specdemo.decoding.sampling import SamplingConfig
from specdemo.decoding.shapes import STATIC_ROUNDING
from specdemo.decoding.suffix import SuffixStore
from specdemo.errors import InputError

PROMPTS = ([1, 5, 7, 9, 11], [3, 3, 3, 40, 41, 42, 3, 3, 40, 41], [7] * 20)
METHODS = ["draft", "prompt-lookup", "suffix", "hybrid", "tree", "suffix-tree"]
# auto's costs where drafting pays (a GPU-like flat verify): it drafts from every source, not only γ 0
FLAT = auto.CostModel([1.0] + [1.01] * 8, {"model": 0.05})


@pytest.fixture(scope="module")
def pair():
    target = llama(3, 0)
    return target, perturbed(target, 0.3, 5)


def generate(target, prompt, n, cache="dynamic"):
    out = target.generate(
        torch.tensor([prompt]), do_sample=False, max_new_tokens=n, pad_token_id=0, cache_implementation=cache
    )
    return out[0, len(prompt) :].tolist()


def race(target, draft, prompt, method, steps, n=30, **sampling):
    cfg = DecodeConfig(max_new_tokens=n, gamma=4, method=method, steps=steps, sampling=SamplingConfig(**sampling))
    return run_all(decode_steps(target, draft, prompt, cfg, eos_ids(target), store=SuffixStore()))


@pytest.mark.parametrize("method", METHODS)
def test_a_static_cache_gives_the_eager_caches_tokens_and_generates(pair, method):
    target, draft = pair
    rejected = 0
    for prompt in PROMPTS:
        expected = generate(target, prompt, 30)
        assert generate(target, prompt, 30, cache="static") == expected  # transformers' own static path agrees
        eager, static = race(target, draft, prompt, method, "eager"), race(target, draft, prompt, method, "static")
        assert eager.token_ids == expected and static.token_ids == expected, prompt
        assert [s.accepted for s in static.steps] == [s.accepted for s in eager.steps]
        rejected += sum(len(s.drafted) - s.accepted for s in static.steps)
    if method in ("draft", "hybrid", "tree"):
        assert rejected > 0  # rollbacks happened: the write position moved back and was overwritten


def test_sampling_on_a_static_cache_draws_the_same_tokens(pair):
    target, draft = pair
    for seed in range(3):
        runs = [race(target, draft, PROMPTS[0], "draft", s, temperature=0.9, seed=seed) for s in ("eager", "static")]
        assert runs[0].token_ids == runs[1].token_ids


def test_the_baseline_runs_the_same_kind_of_step():
    target = llama(2, 1)
    cfg = DecodeConfig(max_new_tokens=20, steps="static")
    assert run_all(baseline_steps(target, PROMPTS[1], cfg, eos_ids(target))).token_ids == generate(
        target, PROMPTS[1], 20
    )


def test_a_rollback_moves_the_write_position_and_the_tensors_stay_where_they_are():
    target = llama(2, 0)
    lm = CachedLM(target, steps="static", room=40)
    lm.logits_after(list(range(1, 11)), [20, 21, 22])
    keys = lm.cache.layers[0].keys
    where = keys.data_ptr()
    assert keys.shape[2] == STATIC_ROUNDING and int(lm.cache.get_seq_length()) == len(lm.fed) == 13
    lm.rollback_to(11)  # two drafts rejected
    assert int(lm.cache.get_seq_length()) == len(lm.fed) == 11
    after = lm.logits_after(list(range(1, 11)) + [20, 30], [31])
    fresh = CachedLM(target).logits_after(list(range(1, 11)) + [20, 30], [31])  # the control: eager, from scratch
    assert torch.allclose(after, fresh, atol=1e-5) and lm.cache.layers[0].keys.data_ptr() == where


def test_an_unknown_kind_of_step_is_refused_in_one_line(pair):
    target, draft = pair
    with pytest.raises(InputError, match="steps must be one of eager, static, compiled, aot"):
        race(target, draft, PROMPTS[0], "draft", "graphs")


@pytest.mark.parametrize("method", ["draft", "auto"])
def test_compiled_steps_give_the_same_tokens(pair, method, monkeypatch):
    """torch.compile of the short steps (inductor on a CPU): fused kernels may sum in another order, so
    the check is against the baseline on the same compiled steps and against generate(). auto takes
    every chain its sources propose through the same captured verify shapes."""
    monkeypatch.setattr(auto, "measure_costs", lambda *a, **k: FLAT)
    target, draft = pair
    prompt = PROMPTS[1]
    cfg = DecodeConfig(max_new_tokens=16, gamma=2, steps="compiled")
    base = run_all(baseline_steps(target, prompt, cfg, eos_ids(target)))
    spec = run_all(decode_steps(target, draft, prompt, replace(cfg, method=method), eos_ids(target)))
    assert spec.token_ids == base.token_ids == generate(target, prompt, 16)
    if method == "auto":
        assert {s.draft_choice["source"] for s in spec.steps} - {auto.NONE}  # it drafted


@pytest.mark.slow
def test_steps_compiled_ahead_of_time_give_the_same_tokens(pair, monkeypatch):
    """torch.export + AOTInductor (aot.py): one package per model, its cache and position as inputs.
    Fused kernels may sum in another order: the check is against the baseline on the same package's steps
    and against generate(); the package did run (its calls counted), for the draft and the target."""
    from specdemo.decoding import aot

    target, draft = pair
    ran = []
    real_run = aot.run
    monkeypatch.setattr(aot, "run", lambda model, *args: ran.append(model) or real_run(model, *args))
    monkeypatch.setattr(auto, "measure_costs", lambda *a, **k: FLAT)
    for method in ("draft", "prompt-lookup", "suffix", "hybrid", "auto"):
        for prompt in PROMPTS:
            cfg = DecodeConfig(max_new_tokens=24, gamma=3, method=method, steps="aot")
            base = run_all(baseline_steps(target, prompt, cfg, eos_ids(target)))
            spec = run_all(decode_steps(target, draft, prompt, cfg, eos_ids(target), store=SuffixStore()))
            assert spec.token_ids == base.token_ids == generate(target, prompt, 24), (method, prompt)
    assert ran.count(target) > 100 and ran.count(draft) > 50  # the short steps ran from the packages


def test_ahead_of_time_rollbacks_write_where_the_sequence_ends(pair):
    """The package writes at len(fed): after a rollback the next step overwrites the rejected slots,
    and a long feed (run by the model itself) continues from the same place."""
    target, _ = pair
    lm = CachedLM(target, steps="aot", room=100)
    lm.capture(10, [])
    lm.logits_after(list(range(1, 11)), [20, 21, 22])  # the prompt's prefill: the model itself
    lm.logits_after(list(range(1, 11)) + [20, 21, 22, 23], [24, 25])  # a short step: from the package
    lm.rollback_to(12)
    tokens = list(range(1, 11)) + [20, 30] + [40 + i % 40 for i in range(70)]  # 70 new: too long for a package
    after = lm.logits_after(tokens, [5])
    fresh = CachedLM(target).logits_after(tokens, [5])  # the control: eager, from scratch
    assert torch.allclose(after, fresh, atol=1e-4) and len(lm.fed) == len(tokens) + 1


def test_ahead_of_time_steps_refuse_a_tree_in_one_line(pair):
    target, draft = pair
    with pytest.raises(InputError, match="ahead of time run chains only: token tree needs static or compiled"):
        race(target, draft, PROMPTS[0], "tree", "aot")
