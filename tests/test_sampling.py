"""Speculative sampling is lossless: the first two tokens follow the target's exact joint law."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare
from transformers import LlamaConfig, LlamaForCausalLM

from specdemo import engine
from specdemo.engine import DecodeConfig, sample_many
from specdemo.sampling import SamplingConfig

V = 8
PROMPT = [1, 2, 3, 1, 2]
SAMPLES = 5000


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


def exact_joint(target, prompt: list[int], s: SamplingConfig) -> torch.Tensor:
    """P(x1, x2) by enumeration: p(x1 | prompt) · p(x2 | prompt, x1) for all V² pairs."""
    vocab = target.config.vocab_size
    with torch.no_grad():
        first = reference_probs(target(torch.tensor([prompt])).logits[0, -1], s)
        batch = torch.tensor([prompt + [x] for x in range(vocab)])
        second = reference_probs(target(batch).logits[:, -1], s)
    return first[:, None] * second


def chi2_pvalue(samples: list[list[int]], joint: torch.Tensor) -> float:
    vocab = joint.shape[0]
    observed = torch.zeros(vocab * vocab, dtype=torch.float64)
    for tokens in samples:
        assert len(tokens) >= 2, "an end-of-sequence among the first two tokens: pick another prompt"
        observed[tokens[0] * vocab + tokens[1]] += 1
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
DRAFTS = {"near": lambda: small_llama(0, 0.4) if False else _noisy_target(), "far": lambda: small_llama(7, 1.0)}


def _noisy_target():
    draft = small_llama(0, 0.4)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return draft


CASES = [
    ("near", "draft", SamplingConfig(temperature=1.0, seed=1)),
    ("far", "draft", SamplingConfig(temperature=1.0, seed=2)),
    ("far", "draft", SamplingConfig(temperature=0.8, top_k=5, top_p=0.9, seed=3)),
    ("near", "prompt-lookup", SamplingConfig(temperature=1.0, top_p=0.95, seed=4)),
    ("far", "tree", SamplingConfig(temperature=1.0, seed=6)),
    ("near", "tree", SamplingConfig(temperature=0.9, top_k=6, seed=7)),
]


@pytest.mark.parametrize("draft_name, method, sampling", CASES, ids=lambda c: str(c))
def test_first_two_tokens_follow_the_target_distribution(draft_name, method, sampling):
    draft = DRAFTS[draft_name]()
    # Budget 3 with γ = 4: two drafted tokens are tested by the rule in the first step.
    cfg = DecodeConfig(max_new_tokens=3, gamma=4, method=method, sampling=sampling)
    samples = sample_many(TARGET, draft, PROMPT, cfg, SAMPLES)
    pvalue = chi2_pvalue(samples, exact_joint(TARGET, PROMPT, sampling))
    print(f"chi2 p-value {pvalue:.4f}")
    assert pvalue > 1e-3


def test_the_chi2_check_catches_a_sampler_that_skips_the_rule(monkeypatch):
    """Accepting every draft (the "let the draft write" shortcut) must fail the same check."""
    monkeypatch.setattr(engine, "draw_uniform", lambda generator: 0.0)
    sampling = SamplingConfig(temperature=1.0, seed=5)
    cfg = DecodeConfig(max_new_tokens=3, gamma=4, sampling=sampling)
    samples = sample_many(TARGET, DRAFTS["far"](), PROMPT, cfg, 1000)
    joint = exact_joint(TARGET, PROMPT, sampling)
    with pytest.raises(AssertionError):  # a pair the target never produces, or a tiny p-value
        assert chi2_pvalue(samples, joint) > 1e-3
