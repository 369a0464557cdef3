"""Speculative sampling is lossless: the first two tokens follow the target's exact joint law."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from scipy.stats import chisquare
from transformers import LlamaConfig, LlamaForCausalLM

from specdemo.decoding import engine
from specdemo.decoding.engine import DecodeConfig, sample_many
from specdemo.decoding.sampling import SamplingConfig
from specdemo.decoding.suffix import shared_store, vocabulary_of

V = 8
PROMPT = [1, 2, 3, 1, 2]
SAMPLES = 2000  # 64 cells of a two-token joint: ≈ 30 per cell; the controls below fail with 1000


def small_llama(seed: int, init: float):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=init,
        eos_token_id=None,
    )
    return LlamaForCausalLM(config).eval()


def reference_probs(logits: torch.Tensor, s: SamplingConfig) -> torch.Tensor:
    """Temperature, then top-k, then top-p (nucleus: the smallest head with mass ≥ top_p)."""
    logits = logits.double() / s.temperature
    if s.top_k:
        kth = logits.topk(s.top_k).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1)
    if s.top_p < 1:
        sorted_p, order = probs.sort(descending=True)
        before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
        keep_sorted = before < s.top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = torch.where(keep, probs, 0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def exact_joint(target, prompt: list[int], s: SamplingConfig, length: int = 2) -> torch.Tensor:
    """P(x1, …, x_length) by enumeration, chaining p(x_i | prompt, x_<i): a [V] * length tensor."""
    import itertools

    vocab = target.config.vocab_size
    joint = torch.ones((), dtype=torch.float64)
    with torch.no_grad():
        for n in range(length):
            prefixes = [list(p) for p in itertools.product(range(vocab), repeat=n)]
            batch = torch.tensor([prompt + p for p in prefixes])
            probs = reference_probs(target(batch).logits[:, -1], s)  # [V^n, V]
            joint = joint[..., None] * probs.reshape(*([vocab] * n), vocab)
    return joint


def chi2_pvalue(samples: list[list[int]], joint: torch.Tensor) -> float:
    """χ² goodness of fit of the first ``joint.ndim`` tokens of each sample to ``joint``."""
    vocab, k = joint.shape[0], joint.ndim
    observed = torch.zeros(vocab**k, dtype=torch.float64)
    for tokens in samples:
        assert len(tokens) >= k, f"an end-of-sequence among the first {k} tokens: pick another prompt"
        observed[sum(t * vocab ** (k - 1 - i) for i, t in enumerate(tokens[:k]))] += 1
    expected = joint.flatten() * len(samples)
    assert observed[expected == 0].sum() == 0, "a pair the target can never produce was sampled"
    small = expected < 5  # pool the rare cells so the χ² approximation holds
    obs = torch.cat([observed[~small], observed[small].sum(0, keepdim=True)])
    exp = torch.cat([expected[~small], expected[small].sum(0, keepdim=True)])
    keep = exp > 0
    return float(chisquare(obs[keep].numpy(), exp[keep].numpy() * obs.sum().item() / exp[keep].sum().item()).pvalue)


def chi2_pvalue_for(target, prompt, samples, sampling) -> float:
    return chi2_pvalue(samples, exact_joint(target, prompt, sampling))


TARGET = small_llama(0, 0.4)


def _noisy_target():
    draft = small_llama(0, 0.4)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return draft


DRAFTS = {"near": _noisy_target, "far": lambda: small_llama(7, 1.0)}


CASES = [
    ("near", "draft", SamplingConfig(temperature=1.0, seed=1)),
    ("far", "draft", SamplingConfig(temperature=1.0, seed=2)),
    ("far", "draft", SamplingConfig(temperature=0.8, top_k=5, top_p=0.9, seed=3)),
    ("near", "prompt-lookup", SamplingConfig(temperature=1.0, top_p=0.95, seed=4)),
    # suffix decoding: proposals from the prompt and, sample after sample, from earlier answers
    ("near", "suffix", SamplingConfig(temperature=1.0, seed=10)),
    ("far", "hybrid", SamplingConfig(temperature=1.0, seed=12)),  # suffix proposals and the model's, mixed
    ("far", "tree", SamplingConfig(temperature=1.0, seed=6)),
    ("near", "tree", SamplingConfig(temperature=0.9, top_k=6, seed=7)),
]


@pytest.mark.slow
@pytest.mark.parametrize("draft_name, method, sampling", CASES, ids=lambda c: str(c))
def test_first_two_tokens_follow_the_target_distribution(draft_name, method, sampling):
    draft = DRAFTS[draft_name]()
    # Budget 3 with γ = 4: two drafted tokens are tested by the rule in the first step.
    cfg = DecodeConfig(max_new_tokens=3, gamma=4, method=method, sampling=sampling)
    samples = sample_many(TARGET, draft, PROMPT, cfg, SAMPLES)
    pvalue = chi2_pvalue(samples, exact_joint(TARGET, PROMPT, sampling))
    print(f"chi2 p-value {pvalue:.4f}")
    assert pvalue > 1e-3


@pytest.mark.slow
def test_suffix_decodings_tree_follows_the_target_distribution():
    """A prompt where "1 2" went on two ways: the suffix tree proposes both branches at once
    (one-hot candidates, tested in turn by the multi-round rule)."""
    prompt = [1, 2, 3, 1, 2, 4, 1, 2]
    sampling = SamplingConfig(temperature=1.0, seed=11)
    cfg = DecodeConfig(max_new_tokens=3, gamma=4, method="suffix-tree", sampling=sampling)
    # the process's store starts empty here: the earlier cases' samples (same vocabulary) would
    # otherwise offer their own continuations of "1 2", and the test would depend on their order
    shared_store(vocabulary_of(TARGET)).reset()
    first = next(engine.decode_steps(TARGET, None, prompt, cfg))
    assert len(set(first.tree_parents)) < len(first.tree_parents)  # a node with two children
    samples = sample_many(TARGET, None, prompt, cfg, SAMPLES)
    pvalue = chi2_pvalue(samples, exact_joint(TARGET, prompt, sampling))
    print(f"chi2 p-value {pvalue:.4f}")
    assert pvalue > 1e-3


def test_the_bonus_token_follows_the_target_distribution():
    """γ = 1: every fully accepted step's second token is the bonus, drawn from p_2 (the verify's
    last row). A three-token joint also covers the step after it."""
    sampling = SamplingConfig(temperature=1.0, seed=8)
    cfg = DecodeConfig(max_new_tokens=3, gamma=1, sampling=sampling)
    draft = DRAFTS["near"]()
    samples = sample_many(TARGET, draft, PROMPT, cfg, SAMPLES)
    pvalue = chi2_pvalue(samples, exact_joint(TARGET, PROMPT, sampling, length=3))
    print(f"chi2 p-value {pvalue:.4f}")
    assert pvalue > 1e-3
    firsts = [next(engine.speculative_steps(TARGET, draft, PROMPT, seeded(cfg, seed))) for seed in range(20)]
    assert any(s.bonus is not None and len(s.emitted) == 2 for s in firsts)  # the bonus path is taken


def seeded(cfg: DecodeConfig, seed: int) -> DecodeConfig:
    return replace(cfg, sampling=replace(cfg.sampling, seed=seed))


def test_the_chi2_check_catches_a_bonus_drawn_from_the_wrong_row(monkeypatch):
    """The control for the test above: a bonus from p_1 instead of p_2 must fail it."""
    real = engine.verify_draft

    def wrong_row(logits, draft, sampling, generator, step):
        if len(draft):
            logits = logits.clone()
            logits[len(draft)] = logits[len(draft) - 1]
        return real(logits, draft, sampling, generator, step)

    monkeypatch.setattr(engine, "verify_draft", wrong_row)
    sampling = SamplingConfig(temperature=1.0, seed=8)
    cfg = DecodeConfig(max_new_tokens=3, gamma=1, sampling=sampling)
    samples = sample_many(TARGET, DRAFTS["near"](), PROMPT, cfg, SAMPLES)
    with pytest.raises(AssertionError):
        assert chi2_pvalue(samples, exact_joint(TARGET, PROMPT, sampling, length=3)) > 1e-3


def test_the_chi2_check_catches_a_tree_that_skips_the_rule(monkeypatch):
    """Accepting the first candidate at every node must fail the same check."""
    from specdemo.decoding import tree

    monkeypatch.setattr(tree, "draw_uniform", lambda generator: 0.0)
    sampling = SamplingConfig(temperature=1.0, seed=9)
    cfg = DecodeConfig(max_new_tokens=3, gamma=4, method="tree", sampling=sampling)
    samples = sample_many(TARGET, DRAFTS["far"](), PROMPT, cfg, 1000)
    with pytest.raises(AssertionError):
        assert chi2_pvalue(samples, exact_joint(TARGET, PROMPT, sampling)) > 1e-3


def test_the_chi2_check_catches_a_sampler_that_skips_the_rule(monkeypatch):
    """Accepting every draft (the "let the draft write" shortcut) must fail the same check."""
    monkeypatch.setattr(engine, "draw_uniform", lambda generator: 0.0)
    sampling = SamplingConfig(temperature=1.0, seed=5)
    cfg = DecodeConfig(max_new_tokens=3, gamma=4, sampling=sampling)
    samples = sample_many(TARGET, DRAFTS["far"](), PROMPT, cfg, 1000)
    joint = exact_joint(TARGET, PROMPT, sampling)
    with pytest.raises(AssertionError):  # a pair the target never produces, or a tiny p-value
        assert chi2_pvalue(samples, joint) > 1e-3
