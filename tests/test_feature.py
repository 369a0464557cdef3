"""The feature drafter (EAGLE-3 style) on tiny random targets: lossless (greedy identity, χ² with
sampling), the hidden-state bookkeeping across rejections (a control with stale features fails),
loading and refusal."""

from __future__ import annotations

import pytest
import torch
from conftest import llama
from test_sampling import PROMPT, SAMPLES, TARGET, chi2_pvalue, exact_joint

from specdemo.decoding import feature, methods, suffix
from specdemo.decoding.engine import DecodeConfig, decode_steps, run_all, sample_many
from specdemo.decoding.feature import FeatureDrafter, FeatureHead, config_for, save_feature_head
from specdemo.decoding.kv import CachedLM
from specdemo.decoding.sampling import SamplingConfig
from specdemo.errors import InputError, ModelLoadError


def random_head(target, seed: int = 0, layers=(0, 1, 2), draft_ids=None, depth: int = 1) -> FeatureHead:
    torch.manual_seed(seed)
    vocab = target.config.vocab_size
    head = FeatureHead(config_for(target, layers, draft_ids or list(range(vocab)), depth))
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, 0.3)
    return head.eval()


@pytest.fixture(scope="module")
def target():
    return llama(3, 0)


@pytest.mark.parametrize(
    "gamma, draft_vocab, depth",
    [(1, None, 1), (2, None, 1), (4, None, 1), (1, 40, 1), (2, 40, 1), (4, 40, 1), (3, 40, 2)],
)
def test_greedy_output_is_the_targets_generate(target, gamma, draft_vocab, depth):
    head = random_head(target, seed=gamma, draft_ids=list(range(draft_vocab)) if draft_vocab else None, depth=depth)
    for prompt in ([1, 5, 9, 13], [3, 3, 7, 2, 8, 20, 4]):
        expected = target.generate(
            torch.tensor([prompt]), max_new_tokens=40, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, len(prompt) :].tolist()
        run = run_all(
            decode_steps(target, head, prompt, DecodeConfig(max_new_tokens=40, gamma=gamma, method="feature"))
        )
        assert run.token_ids == expected
        assert run.steps[0].drafted == []  # the first step only lets the target read the prompt
        assert any(s.accepted < len(s.drafted) for s in run.steps)  # rejections happened


def test_the_feature_kept_at_position_t_is_what_the_target_predicted_token_t_plus_1_from(target):
    """The pairing every port must get right: f_t (here the last hidden state) → the target's head
    → exactly the target's logits for token t+1."""
    lm = CachedLM(target, feature_layers=(3,))
    logits = lm.logits_after([1, 5, 9, 13], [7, 2])  # predicting 7, 2 and the token after them
    with torch.no_grad():
        assert torch.allclose(target.lm_head(lm.features[-3:]), logits, atol=1e-5)


def test_target_features_follow_the_cache_across_rejections(target):
    lm = CachedLM(target, feature_layers=(0, 3))
    lm.forward([1, 2, 3, 4, 5], keep=1)
    assert lm.features.shape == (5, 2 * target.config.hidden_size)
    before = lm.features[:3].clone()
    lm.rollback_to(3)
    assert lm.features.shape[0] == 3 == len(lm.fed) and torch.equal(lm.features, before)
    lm.forward([9, 9], keep=2)
    fresh = CachedLM(target, feature_layers=(0, 3))
    fresh.forward([1, 2, 3, 9, 9], keep=1)
    assert torch.allclose(lm.features, fresh.features, atol=1e-5)


def drafts_match_a_fresh_drafter(target, head, prompt, steps: int = 12, gamma: int = 3, method="feature", store=None):
    """Run the chain; before every step compare the live drafter's draft and q with a drafter
    built from scratch on the same verified tokens (fresh caches, features recomputed)."""
    seen = []
    original = FeatureDrafter.propose

    def checked(self, tokens, n, sampling, generator):
        draft = original(self, tokens, n, sampling, generator)
        if not len(self.target.features):
            return draft  # the first step: nothing to draft from yet
        lm = CachedLM(target, head.cfg.layers)
        lm.forward(tokens[:-1], keep=1)
        fresh = original(FeatureDrafter(head, lm, lm.vocab_size), tokens, n, sampling, generator)
        seen.append(
            draft.ids == fresh.ids and (draft.probs is None or torch.allclose(draft.probs, fresh.probs, atol=1e-5))
        )
        return draft

    FeatureDrafter.propose = checked
    try:
        cfg = DecodeConfig(max_new_tokens=steps * 2, gamma=gamma, method=method)
        run_all(decode_steps(target, head, prompt, cfg, store=store))
    finally:
        FeatureDrafter.propose = original
    return all(seen) and len(seen) > 3


@pytest.mark.parametrize("depth", [1, 2])
def test_the_heads_cache_is_cropped_to_target_verified_positions(target, depth):
    assert drafts_match_a_fresh_drafter(target, random_head(target, 3, depth=depth), [1, 5, 9, 13])


@pytest.mark.parametrize("depth", [1, 2])
def test_control_stale_features_are_caught(target, monkeypatch, depth):
    """Keeping the head's entries built on its own h (instead of cropping them) must be caught."""
    monkeypatch.setattr(FeatureDrafter, "rollback_to", lambda self, positions: None)
    assert not drafts_match_a_fresh_drafter(target, random_head(target, 3, depth=depth), [1, 5, 9, 13])


@pytest.mark.slow
def test_first_tokens_follow_the_target_distribution():
    """γ = 1, 3 tokens: step 1 reads the prompt, step 2 drafts one token from the target's features
    and tests it by the rule (then a correction or a bonus): the 3-token joint must be the target's."""
    sampling = SamplingConfig(temperature=1.0, seed=11)
    head = random_head(TARGET, seed=5)
    samples = sample_many(
        TARGET, head, PROMPT, DecodeConfig(max_new_tokens=3, gamma=1, sampling=sampling, method="feature"), SAMPLES
    )
    assert chi2_pvalue(samples, exact_joint(TARGET, PROMPT, sampling, length=3)) > 1e-3


@pytest.mark.slow
def test_second_drafted_position_follows_the_target_distribution():
    """γ = 2, 4 tokens: tokens 3 and 4 come from step 2's two drafts (the second drafted from the
    head's own h): their joint, summed over tokens 1 and 2, must be the target's."""
    sampling = SamplingConfig(temperature=0.9, top_k=6, seed=12)
    head = random_head(TARGET, seed=6)
    samples = sample_many(
        TARGET, head, PROMPT, DecodeConfig(max_new_tokens=4, gamma=2, sampling=sampling, method="feature"), SAMPLES
    )
    joint = exact_joint(TARGET, PROMPT, sampling, length=4).sum(dim=(0, 1))
    assert chi2_pvalue([s[2:4] for s in samples], joint) > 1e-3


def test_save_load_and_refuse_another_target(tmp_path, tiny_folders, monkeypatch):
    from specdemo.models import load_model, load_pair

    target_model, _ = load_model(str(tiny_folders["target"]))
    head = random_head(target_model, layers=(0, 1, 2), draft_ids=list(range(0, 200, 2)))
    save_feature_head(head, tmp_path / "feature")
    pair = load_pair(str(tiny_folders["target"]), str(tmp_path / "feature"))
    assert isinstance(pair.draft, FeatureHead) and pair.draft.cfg.layers == (0, 1, 2)
    assert torch.allclose(pair.draft.head.weight, head.head.weight.half().float())
    run = run_all(
        decode_steps(pair.target, pair.draft, [5, 6, 7], DecodeConfig(max_new_tokens=12, gamma=2, method="feature"))
    )
    assert len(run.token_ids) == 12
    other = llama(2, 1)
    other.save_pretrained(tmp_path / "other")
    import shutil

    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (tiny_folders["target"] / name).exists():
            shutil.copy(tiny_folders["target"] / name, tmp_path / "other" / name)
    with pytest.raises(
        ModelLoadError, match="feature drafter .* reads the hidden states of the target it was trained on"
    ):
        load_pair(str(tmp_path / "other"), str(tmp_path / "feature"))
    with pytest.raises(InputError, match="feature drafter"):
        run_all(decode_steps(pair.target, pair.draft, [5, 6], DecodeConfig(max_new_tokens=4, method="tree")))
    assert feature.is_feature_drafter(str(tmp_path / "feature")) and not feature.is_feature_drafter(str(tmp_path))
    # by its folder, before anything loads (the app's line beside Run): the same rule
    methods.check_draft(methods.FEATURE, str(tmp_path / "feature"))
    monkeypatch.setenv("HOME", str(tmp_path))  # a folder as typed, ~ too, as the loader reads it
    assert methods.reads_features("~/feature") and not methods.reads_features("~")
    with pytest.raises(InputError, match="feature drafter .* cannot use: pick feature drafter"):
        methods.check_draft(methods.DRAFT, str(tmp_path / "feature"))


def test_each_method_takes_only_the_draft_it_can_run(target):
    """The feature drafter is its own method: the draft model's method refuses a feature head, the
    feature drafter's refuses a plain model, in one line each; the hybrid takes either."""
    head, plain = random_head(target), llama(1, 3)
    with pytest.raises(InputError, match="feature drafter .* cannot use: pick feature drafter, suffix \\+ draft"):
        run_all(decode_steps(target, head, [5, 6], DecodeConfig(max_new_tokens=4, method="draft")))
    with pytest.raises(InputError, match="needs a feature drafter as the draft"):
        run_all(decode_steps(target, plain, [5, 6], DecodeConfig(max_new_tokens=4, method="feature")))
    for draft in (head, plain):  # the controls: each method with its own kind, and the hybrid with both
        method = "feature" if draft is head else "draft"
        assert len(
            run_all(decode_steps(target, draft, [5, 6], DecodeConfig(max_new_tokens=4, method=method))).token_ids
        )
        assert len(
            run_all(decode_steps(target, draft, [5, 6], DecodeConfig(max_new_tokens=4, method="hybrid"))).token_ids
        )


def test_a_head_saved_before_the_depth_option_loads_as_depth_one(tmp_path, target):
    """Heads trained before ``depth`` existed stored their layer as ``layer.*`` and no depth."""
    import json

    head = random_head(target, seed=2)
    save_feature_head(head, tmp_path)
    state = torch.load(tmp_path / feature.WEIGHTS_FILE)
    torch.save({k.replace("blocks.0.", "layer.", 1): v for k, v in state.items()}, tmp_path / feature.WEIGHTS_FILE)
    cfg = json.loads((tmp_path / feature.CONFIG_FILE).read_text())
    del cfg["depth"]
    (tmp_path / feature.CONFIG_FILE).write_text(json.dumps(cfg))
    loaded = feature.load_feature_head(str(tmp_path))
    assert loaded.cfg.depth == 1
    assert torch.equal(loaded.blocks[0].q.weight, head.blocks[0].q.weight.half().float())


@pytest.mark.parametrize("depth", [1, 2])
def test_training_sees_the_logits_drafting_computes(target, depth):
    """The recipe scores every position at once; drafting builds them one at a time with the head's
    cache. Position 1 (target features) and the second draft (the head's own h in place of the
    feature) must agree, or the head is trained for a computation it never runs."""
    from specdemo.recipes.feature import parallel_logits

    head = random_head(target, seed=4, depth=depth)
    width, hidden = 9, head.cfg.hidden
    torch.manual_seed(1)
    embeds, feats = torch.randn(1, width, hidden), torch.randn(1, width, 3 * hidden)
    with torch.no_grad():
        first, second = parallel_logits(head, embeds, feats)
        for j in range(2, width + 1):  # the target has verified positions 1..j−1; draft twice from there
            caches = feature.new_caches(head)
            h, reduced = head(embeds[:, : j - 1], feats[:, : j - 1], torch.arange(1, j), caches)
            assert torch.allclose(reduced[0, -1], first[0, j - 2], atol=1e-4)
            _, reduced = head(embeds[:, j - 1 : j], h[:, -1:], torch.tensor([j]), caches, fused=True)
            assert torch.allclose(reduced[0, -1], second[0, j - 1], atol=1e-4)


def test_a_deepened_head_starts_as_the_head_it_grew_from(target):
    from specdemo.recipes.feature import deepen, parallel_logits

    small = random_head(target, seed=7)
    deep = FeatureHead(config_for(target, small.cfg.layers, small.cfg.draft_ids, depth=2))
    deepen(deep, small, target)
    torch.manual_seed(2)
    embeds, feats = torch.randn(1, 6, small.cfg.hidden), torch.randn(1, 6, 3 * small.cfg.hidden)
    with torch.no_grad():
        before, after = parallel_logits(small, embeds, feats), parallel_logits(deep.eval(), embeds, feats)
        for a, b in zip(before, after, strict=True):
            assert torch.allclose(a, b, atol=1e-5)
        assert deep.blocks[1].q.weight.abs().sum() > 0  # the new layer is a real layer, only its outputs start at 0


def test_the_hybrid_mixes_suffix_proposals_and_the_feature_head_and_stays_exact(target):
    """Where suffix decoding has seen the context go on it drafts, the head everywhere else; the
    head catches up on the target features of the steps it sat out (its drafts equal a fresh one's)."""
    head = random_head(target, seed=4)
    prompt = [1, 5, 9, 13]
    expected = target.generate(
        torch.tensor([prompt]), max_new_tokens=40, do_sample=False, eos_token_id=None, pad_token_id=0
    )[0, len(prompt) :].tolist()

    def store_of_an_earlier_answer():  # it shares the first 12 tokens of this answer, then parts
        store = suffix.SuffixStore()
        earlier = suffix.SuffixDrafter(store)
        earlier.follow(prompt)
        earlier.follow(prompt + expected[:12] + [(t + 1) % 90 for t in expected[12:]])
        earlier.close()
        return store

    cfg = DecodeConfig(max_new_tokens=40, gamma=4, method="hybrid")
    run = run_all(decode_steps(target, head, prompt, cfg, store=store_of_an_earlier_answer()))
    assert run.token_ids == expected
    from_suffix = [s for s in run.steps if s.draft_source]
    from_head = [s for s in run.steps[1:] if s.drafted and not s.draft_source]
    assert from_suffix and from_head and max(s.accepted for s in from_suffix) >= 3
    assert drafts_match_a_fresh_drafter(
        target, head, prompt, gamma=4, method="hybrid", store=store_of_an_earlier_answer()
    )
