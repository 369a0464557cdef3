"""Small random-initialised model pairs, built in the test (no download, no bundled files)."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

VOCAB = 96
torch.set_num_threads(2)
# The app's tests run on the fast bundled pair unless they name another; SmolLM2 has its own tests.
os.environ.setdefault("SPECDEMO_PRESET", "bundled-tinystories")


@pytest.fixture(autouse=True)
def two_threads():
    """The app picks its own thread count (configure_cpu_threads); give every test the same two."""
    yield
    torch.set_num_threads(2)


@pytest.fixture(autouse=True)
def no_counts_from_earlier_tests():
    """A process's requests share auto's counts; a test starts from the prior, whatever ran before it."""
    from specdemo.decoding import auto

    auto.forget()


def perturbed(model, scale: float, seed: int):
    """A draft that agrees with the target often but not always: the target, plus noise."""
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale * p.std().clamp_min(1e-3))
    return draft.eval()


def llama(layers: int, seed: int, vocab: int = VOCAB):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.3,
        eos_token_id=vocab - 1,
        bos_token_id=0,
        pad_token_id=0,
    )
    return LlamaForCausalLM(config).eval()


def gpt2(layers: int, seed: int):
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_embd=64,
        n_layer=layers,
        n_head=4,
        n_positions=256,
        initializer_range=0.3,
        eos_token_id=VOCAB - 1,
        bos_token_id=0,
    )
    return GPT2LMHeadModel(config).eval()


PAIRS = {
    # (target, draft): an unrelated small draft, and a noisy copy that agrees often
    "llama-unrelated": lambda: (llama(3, 0), llama(1, 1)),
    "llama-noisy": lambda: (lambda t: (t, perturbed(t, 0.02, 5)))(llama(3, 0)),
    "gpt2-noisy": lambda: (lambda t: (t, perturbed(t, 0.05, 6)))(gpt2(2, 2)),
}


@pytest.fixture(scope="session", params=sorted(PAIRS))
def tiny_pair(request):
    return PAIRS[request.param]()


@pytest.fixture(scope="session")
def llama_pair():
    return PAIRS["llama-noisy"]()


TEXT = [
    "once upon a time there was a little cat. the cat liked to play in the sun.",
    "one day a boy named tom found a red ball. he was very happy and played all day.",
    "the dog and the cat were friends. they ran in the park and had fun together.",
] * 4


@pytest.fixture(scope="session")
def tiny_folders(tmp_path_factory):
    """A target and a draft folder, loadable with Auto* classes, sharing a small BPE tokenizer."""
    from specdemo.recipes.train import train_tokenizer

    root = tmp_path_factory.mktemp("tiny")
    tokenizer = train_tokenizer(TEXT, 320, root / "tok")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        initializer_range=0.3,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
    )
    target = LlamaForCausalLM(config).eval()
    folders = {"target": root / "target", "draft": root / "draft"}
    for name, model in (("target", target), ("draft", perturbed(target, 0.02, 3))):
        model.save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server():
    """The app, launched on localhost for the whole session."""
    import app

    _, url, _ = app.launch(prevent_thread_lock=True, server_port=free_port(), quiet=True)
    yield url
    app.demo.close()
