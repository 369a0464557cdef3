"""Compact fp32 weights (quantization ``compact-fp32``, models/compact_linear.py): a tiny Llama whose
weights are Q4_1 / Q8_0 blocks, written to a real GGUF file with gguf-py, and drafts whose weights
are exactly fp16 or bf16. The kernels must expand them to the model's fp32 weights bit for bit, give
each row of a k-row product exactly the 1-row product, and keep greedy speculative decoding
token-identical to the baseline and to ``generate()``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import llama, perturbed
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize
from torch import nn

from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, eos_ids, run_all
from specdemo.models import LoadOptions, compact_linear, load_model, quantization_config, resolve_device
from specdemo.models.compact_linear import GGUF_MODULES, CompactLinear, expand, use_compact_weights

pytestmark = pytest.mark.skipif(compact_linear.kernels() is None, reason="no C compiler for the kernels")


def gguf_llama(tmp_path, layers: int = 2, seed: int = 0, skew=None):
    """A tiny Llama whose linears hold what their GGUF blocks describe, and that GGUF (q's rows
    stored in another order, as llama.cpp's converter stores them for rotary)."""
    model = llama(layers, seed)
    writer = GGUFWriter(str(tmp_path / "tiny.gguf"), "llama")
    entries = [
        (f"blk.{i}.{part}.weight", layer.get_submodule(path))
        for i, layer in enumerate(model.model.layers)
        for part, path in GGUF_MODULES.items()
    ]
    entries.append(("output.weight", model.lm_head))
    for name, linear in entries:
        kind = GGMLQuantizationType.Q8_0 if name == "output.weight" else GGMLQuantizationType.Q4_1
        blocks = quantize(linear.weight.detach().numpy(), kind)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(gguf_dequantize(blocks, kind)))
        if "attn_q" in name:  # the file's row order differs from the model's
            blocks = blocks[np.random.default_rng(seed).permutation(blocks.shape[0])]
        writer.add_tensor(name, blocks, raw_dtype=kind)
    if skew is not None:  # one weight one ulp off: that matrix is not the GGUF's any more
        with torch.no_grad():
            w = model.get_submodule(skew).weight
            w[0, 0] = torch.nextafter(w[0, 0], torch.tensor(1.0))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model, tmp_path / "tiny.gguf"


def compacts(model) -> list[CompactLinear]:
    return [m for m in model.modules() if isinstance(m, CompactLinear)]


def test_the_gguf_blocks_expand_to_the_models_fp32_weights_bit_for_bit(tmp_path):
    model, path = gguf_llama(tmp_path)
    assert use_compact_weights(model, path) == 2 * 7 + 1
    assert model.specdemo_kernels == "14 Q4_1, 1 Q8_0"
    for linear in compacts(model):
        assert torch.equal(expand(linear.kind, linear.codes, linear.scales), linear.weight)
        stored = linear.codes.numel() + 2 * linear.scales.numel()
        assert stored <= 1.07 * linear.weight.numel()  # about a byte a weight (Q8_0) or less, not four


def test_fp16_and_bf16_weights_are_kept_in_16_bits(tmp_path):
    half, brain = llama(1, 0).half().float(), llama(1, 1).bfloat16().float()
    assert use_compact_weights(half) == 7 + 1 and {m.kind for m in compacts(half)} == {"F16"}
    assert use_compact_weights(brain) == 7 + 1 and "BF16" in {m.kind for m in compacts(brain)}  # F16 where exact too
    for model in (half, brain):
        for linear in compacts(model):
            assert torch.equal(expand(linear.kind, linear.codes, linear.scales), linear.weight)
    assert use_compact_weights(llama(1, 2)) == 0  # fp32 weights with 32 bits of their own: untouched


@pytest.mark.parametrize("kind", ["gguf", "F16", "BF16"])
def test_each_row_of_a_k_row_product_is_the_one_row_product_exactly(tmp_path, kind):
    if kind == "gguf":
        model, path = gguf_llama(tmp_path)
        use_compact_weights(model, path)
    else:
        model = llama(2, 0).to(getattr(torch, {"F16": "float16", "BF16": "bfloat16"}[kind])).float()
        use_compact_weights(model)
    torch.manual_seed(1)
    for linear in compacts(model):
        x = torch.randn(16, linear.in_features)
        alone = torch.cat([linear(x[i : i + 1]) for i in range(16)])
        for k in (2, 3, 5, 9, 12, 16):  # 16 takes two passes of the kernel (12 rows, then 4)
            assert torch.equal(linear(x[:k]), alone[:k])
        exact = x.double() @ linear.weight.double().T
        assert torch.allclose(alone.double(), exact, atol=1e-5, rtol=1e-5)
        long = torch.randn(compact_linear.MAX_ROWS + 1, linear.in_features)  # a prompt: torch's product
        assert torch.equal(linear(long), F.linear(long, linear.weight))


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_a_wide_matrix_whose_scales_span_several_chunks_multiplies_exactly(kind):
    """4,160 inputs: 130 blocks a row, past the AVX-512 kernel's 64-block chunk of widened scales and
    not a multiple of its 16 at a time (SmolLM2's widest matrix has 48 blocks a row)."""
    rng = np.random.default_rng(3)
    quant = getattr(GGMLQuantizationType, kind)
    blocks = quantize(rng.standard_normal((40, 4160)).astype(np.float32), quant)
    codes, scales = compact_linear.split_gguf_blocks(kind, blocks, 40)
    weight = expand(kind, codes, scales)
    assert torch.equal(weight, torch.from_numpy(gguf_dequantize(blocks, quant)))
    linear = nn.Linear(4160, 40, bias=False)
    with torch.no_grad():
        linear.weight.copy_(weight)
    compact = CompactLinear(linear, kind, codes, scales)
    x = torch.randn(5, 4160)
    alone = torch.cat([compact(x[i : i + 1]) for i in range(5)])
    assert torch.equal(compact(x), alone)
    assert torch.allclose(alone.double(), x.double() @ weight.double().T, atol=1e-4, rtol=1e-5)


def test_the_files_row_order_is_not_the_models_and_is_found(tmp_path):
    """The control for the row matching: q's blocks in the file's order do not give q's weight (so a
    loader that skipped the matching would be caught by the bitwise check), in the model's they do."""
    import gguf

    model, path = gguf_llama(tmp_path)
    tensor = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.0.attn_q.weight")
    q_proj = model.model.layers[0].self_attn.q_proj
    codes, scales = compact_linear.split_gguf_blocks("Q4_1", np.asarray(tensor.data), q_proj.weight.shape[0])
    assert not torch.equal(expand("Q4_1", codes, scales), q_proj.weight)
    found = compact_linear.from_gguf(tensor, q_proj)
    assert torch.equal(expand("Q4_1", found.codes, found.scales), q_proj.weight)


def test_a_matrix_that_is_not_the_ggufs_keeps_torchs_product(tmp_path):
    model, path = gguf_llama(tmp_path, skew="model.layers.1.mlp.up_proj")
    assert use_compact_weights(model, path) == 2 * 7
    assert type(model.model.layers[1].mlp.up_proj) is torch.nn.Linear
    assert isinstance(model.model.layers[0].mlp.up_proj, CompactLinear)


def test_greedy_speculative_equals_the_baseline_and_generate_on_the_kernels(tmp_path):
    target, path = gguf_llama(tmp_path, layers=3)
    use_compact_weights(target, path)
    draft = perturbed(llama(3, 0), 0.3, 5).half().float()
    assert use_compact_weights(draft) == 3 * 7 + 1
    rejected = 0
    for prompt in ([1, 2, 3], [5, 9, 11, 40, 2], [7] * 20):
        out = target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=30, pad_token_id=0)
        expected = out[0, len(prompt) :].tolist()
        cfg = DecodeConfig(max_new_tokens=30, gamma=4)
        base = run_all(baseline_steps(target, prompt, cfg, eos=eos_ids(target)))
        spec = run_all(decode_steps(target, draft, prompt, cfg, eos=eos_ids(target)))
        assert base.token_ids == expected and spec.token_ids == expected
        rejected += sum(len(s.drafted) - s.accepted for s in spec.steps)
    assert rejected > 0  # the verify's rows were cropped and re-run, not all accepted


def test_without_a_compiler_the_model_keeps_torchs_products(tmp_path, monkeypatch):
    model, path = gguf_llama(tmp_path)
    monkeypatch.setattr(compact_linear, "kernels", lambda: None)
    assert use_compact_weights(model, path) == 0
    assert model.specdemo_kernels == "torch" and not compacts(model)


def test_compact_fp32_leaves_weights_that_are_not_fp32_alone(tiny_folders):
    """The preset's default meets a dtype chosen under Advanced: bf16 weights have no fp32 to keep."""
    model, _ = load_model(str(tiny_folders["target"]), LoadOptions(dtype="bfloat16", quantization="compact-fp32"))
    assert model.specdemo_kernels == "torch" and not compacts(model)
    assert quantization_config(LoadOptions(quantization="compact-fp32"), resolve_device("cpu")) is None


@pytest.fixture
def fresh_build(tmp_path, monkeypatch, caplog):
    """The kernels built again, into an empty cache folder, with this test's compiler and CPU."""
    monkeypatch.setenv("SPECDEMO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(compact_linear, "_kernels", {})
    caplog.set_level("WARNING", logger=compact_linear.__name__)
    return lambda: [r.getMessage() for r in caplog.records if r.name == compact_linear.__name__]


def fake_compiler(tmp_path, script: str) -> str:
    path = tmp_path / "cc"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


def test_a_compiler_without_openmp_leaves_torchs_products_and_says_why_in_one_line(tmp_path, monkeypatch, fresh_build):
    """macOS's clang rejects -fopenmp: one log line, the model keeps torch's products, nothing breaks."""
    rejects = 'for a in "$@"; do [ "$a" = -fopenmp ] && echo "clang: error: unsupported option \'-fopenmp\'" >&2 '
    rejects += '&& exit 1; done; exec cc "$@"\n'
    monkeypatch.setenv("CC", fake_compiler(tmp_path, rejects))
    model, path = gguf_llama(tmp_path)
    assert use_compact_weights(model, path) == 0 and model.specdemo_kernels == "torch"
    assert fresh_build() == [
        "the compact-weight kernels could not be built (clang: error: unsupported option '-fopenmp'): "
        "torch's products stay"
    ]
    out = model.generate(torch.tensor([[1, 2, 3]]), do_sample=False, max_new_tokens=8, pad_token_id=0)
    run = run_all(baseline_steps(model, [1, 2, 3], DecodeConfig(max_new_tokens=8), eos=eos_ids(model)))
    assert run.token_ids == out[0, 3:].tolist()


def test_no_compiler_at_all_leaves_torchs_products(tmp_path, monkeypatch, fresh_build):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert compact_linear.kernels() is None
    assert len(fresh_build()) == 1 and "No such file" in fresh_build()[0]


def test_a_cpu_without_avx_builds_the_portable_kernel_and_stays_exact(tmp_path, monkeypatch, fresh_build):
    """An arm64 laptop (torch reports no x86 capability): no -m flags, the C file's plain loop. Its sums
    differ from the vector builds' in the last bits (as two BLAS libraries' do), but a k-row product's
    rows are still the 1-row products bit for bit, so greedy speculative decoding stays identical."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert not [f for f in compact_linear.compiler_flags() if f.startswith("-m")]
    assert compact_linear.kernels() is not None and fresh_build() == []
    assert compact_linear.kernels().vectorized() == 0  # the control: this build is the plain loop
    target, path = gguf_llama(tmp_path, layers=3)
    use_compact_weights(target, path)
    layer = compacts(target)[0]
    x = torch.randn(3, target.config.hidden_size)
    rows = torch.cat([layer(x[i : i + 1]) for i in range(3)])
    assert torch.equal(layer(x), rows)
    assert torch.allclose(layer(x), F.linear(x, layer.weight), atol=1e-4)
    draft = perturbed(llama(3, 0), 0.3, 5).half().float()
    use_compact_weights(draft)
    prompt = [5, 9, 11, 40, 2]
    out = target.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=20, pad_token_id=0)
    spec = run_all(decode_steps(target, draft, prompt, DecodeConfig(max_new_tokens=20, gamma=4), eos=eos_ids(target)))
    assert spec.token_ids == out[0, len(prompt) :].tolist()
