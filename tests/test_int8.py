"""Int8 weight-only linears (the CPU kernel choice ``int8-cpu``): the products are the float ones
within the quantization's bound, every linear is replaced, both sides of a race run the same
model, and where greedy outputs part the divergence explainer accounts for it in bf16 units."""

from __future__ import annotations

import pytest
import torch
from conftest import llama
from torch import nn

from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, run_all
from specdemo.measure.divergence import dtype_name, explain
from specdemo.models import LoadOptions, load_model
from specdemo.models.int8 import Int8WeightOnlyLinear, quantize_int8_weight_only


def bound(x: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
    """|y − x·Wᵀ| per output: rounding each weight moves it ≤ s_o / 2; plus bf16's rounding of
    x and y (2⁻⁸ relative each), generously."""
    scale = linear.weight.abs().amax(dim=1) / 127
    weights = x.abs() @ (scale[:, None] / 2).expand_as(linear.weight).T
    exact = (x @ linear.weight.T).abs() + x.abs() @ linear.weight.abs().T
    return weights + exact * 2 * 2**-8 + 1e-6


def test_int8_products_stay_within_the_quantization_bound():
    torch.manual_seed(0)
    linear = nn.Linear(96, 40, bias=True)
    q = Int8WeightOnlyLinear(linear)
    for rows in (1, 3, 9):
        x = torch.randn(1, rows, 96)
        error = (q(x) - linear(x)).abs()
        assert (error <= bound(x[0], linear)).all()
        assert error.max() > 0  # it is a different arithmetic, not the float product
    assert q.weight.dtype == torch.int8 and q.weight.shape == linear.weight.shape


def test_a_wrong_scale_breaks_the_bound():
    """The control: the bound above is tight enough to catch a mis-scaled kernel."""
    torch.manual_seed(0)
    linear = nn.Linear(96, 40, bias=False)
    q = Int8WeightOnlyLinear(linear)
    q.scale.mul_(1.5)  # a kernel 50% off on every row
    x = torch.randn(1, 4, 96)
    assert not ((q(x) - linear(x)).abs() <= bound(x[0], linear)).all()


def test_every_linear_is_replaced_and_the_model_says_it_rounds_in_bf16():
    model = quantize_int8_weight_only(llama(2, 0))
    assert not [m for m in model.modules() if type(m) is nn.Linear]
    assert isinstance(model.get_output_embeddings(), Int8WeightOnlyLinear)
    assert dtype_name(model) == "bfloat16"
    assert model.get_input_embeddings().weight.dtype == torch.float32  # the table is not quantized


def test_greedy_speculative_with_an_int8_target_matches_or_is_explained():
    target = quantize_int8_weight_only(llama(3, 0))
    draft = llama(1, 1)
    differences = 0
    for seed in range(4):
        prompt = torch.randint(1, 90, (6,), generator=torch.Generator().manual_seed(seed)).tolist()
        config = DecodeConfig(max_new_tokens=40, gamma=3)
        base = run_all(baseline_steps(target, prompt, config))
        spec = run_all(decode_steps(target, draft, prompt, config))
        why = explain(base.steps, spec.steps, dtype_name(target))
        if why is not None:
            differences += 1
            assert why["near_tie"], why["verdict"]
    assert differences <= 2  # near-ties are rare: most runs are token-identical


def test_load_model_applies_int8_cpu(tiny_folders):
    model, _ = load_model(str(tiny_folders["target"]), LoadOptions(quantization="int8-cpu"))
    assert isinstance(model.get_output_embeddings(), Int8WeightOnlyLinear)
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        assert model(input_ids=ids).logits.shape[-1] == model.get_output_embeddings().out_features


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA to check the refusal there")
def test_int8_cpu_is_refused_on_cuda(tiny_folders):
    from specdemo.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="CPU path"):
        load_model(str(tiny_folders["target"]), LoadOptions(quantization="int8-cpu", device="cuda"))


def test_precision_compares_int8_cpu_with_float32(tiny_folders):
    import json
    import subprocess
    import sys

    prompts = tiny_folders["target"].parent / "prompts.txt"
    prompts.write_text("once upon a time\nthe dog and the cat\n")
    args = ["--target", str(tiny_folders["target"]), "--draft", str(tiny_folders["draft"]), "--no-chat-template"]
    command = [sys.executable, "-m", "specdemo", "precision", *args, "--dtypes", "float32,int8-cpu"]
    command += ["--prompts", str(prompts), "--max-new-tokens", "12", "--gamma", "2", "--json"]
    r = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = {row["dtype"]: row for row in json.loads(r.stdout)}
    assert set(rows) == {"float32", "int8-cpu"}
    assert rows["float32"]["identical"] == 2  # fp32: token for token
    int8 = rows["int8-cpu"]
    assert int8["identical"] + int8["near_ties"] == 2  # int8: identical, or parted at a near-tie
    assert all(d["dtype"] == "bfloat16" for d in int8["divergences"])
