"""The bundled TinyStories pair: loads through Auto classes, greedy identity, lossless sampling."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_sampling import chi2_pvalue_for
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdemo.decoding.engine import DecodeConfig, decode_steps, run_all, sample_many
from specdemo.decoding.sampling import SamplingConfig
from specdemo.decoding.tree import TreeConfig
from specdemo.models import ASSETS, BUNDLED_DRAFT, BUNDLED_TARGET, SMOLLM2_DRAFT, encode_prompt, load_pair


@pytest.fixture(scope="module")
def pair():
    return load_pair(BUNDLED_TARGET, BUNDLED_DRAFT)


def folder_size(folder) -> int:
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())


def test_folders_load_through_auto_classes_and_fit_the_budget():
    for folder in (BUNDLED_TARGET, BUNDLED_DRAFT):
        assert AutoTokenizer.from_pretrained(folder).eos_token == "<|endoftext|>"
        assert AutoModelForCausalLM.from_pretrained(folder).config.model_type == "llama"
    assert folder_size(BUNDLED_TARGET) + folder_size(BUNDLED_DRAFT) <= 40 * 2**20
    assert folder_size(SMOLLM2_DRAFT) <= 40 * 2**20  # the distilled SmolLM2 draft
    assert folder_size(Path(ASSETS).parent) <= 80 * 2**20  # all of assets/
    assert (Path(ASSETS) / "MODEL_CARD.md").read_text().count("CDLA-Sharing-1.0") >= 1


@pytest.mark.parametrize(
    "config",
    [
        DecodeConfig(max_new_tokens=48, gamma=1),
        DecodeConfig(max_new_tokens=48, gamma=4),
        DecodeConfig(max_new_tokens=48, gamma=8, schedule="heuristic"),
        DecodeConfig(max_new_tokens=48, gamma=4, method="prompt-lookup"),
        DecodeConfig(max_new_tokens=48, method="tree", tree=TreeConfig(2, 4, 12)),
    ],
    ids=["g1", "g4", "g8-heuristic", "prompt-lookup", "tree"],
)
def test_greedy_identity_on_the_bundled_pair(pair, config):
    for prompt in ("once upon a time, there was a little", "tom had a red ball. he liked to"):
        ids = encode_prompt(pair.tokenizer, prompt, chat_template=False)
        expected = pair.target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=48)[0, len(ids) :]
        run = run_all(decode_steps(pair.target, pair.draft, ids, config, pair.eos))
        assert run.token_ids == expected.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("method", ["draft", "tree"])
def test_sampling_is_lossless_on_the_bundled_pair(pair, method):
    ids = encode_prompt(pair.tokenizer, "one day, a little", chat_template=False)
    sampling = SamplingConfig(temperature=1.0, top_k=8, seed=11)
    cfg = DecodeConfig(max_new_tokens=3, gamma=3, method=method, sampling=sampling, tree=TreeConfig(2, 2, 6))
    samples = sample_many(pair.target, pair.draft, ids, cfg, 1500, pair.eos)  # the rule itself: test_sampling
    pvalue = chi2_pvalue_for(pair.target, ids, samples, sampling)
    print(f"chi2 p-value {pvalue:.4f}")
    assert pvalue > 1e-3
