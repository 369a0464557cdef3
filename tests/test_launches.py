"""The GPU cost model's parts (measure/launches.py): what it measures here and how it combines them."""

from __future__ import annotations

import pytest

from specdemo.measure.launches import (
    BANDWIDTH,
    StepCost,
    config_of,
    gpu_step_s,
    narrow,
    step_cost,
    tau,
    weight_bytes,
)
from specdemo.models import BUNDLED_TARGET, PRESETS


def test_every_gpu_preset_has_its_architecture_here():
    for preset in (p for p in PRESETS.values() if p.needs_cuda):
        for model_id in (preset.target, preset.draft):
            assert config_of(model_id).num_hidden_layers > 0, model_id
    with pytest.raises(FileNotFoundError, match="no config.json"):
        config_of("someone/unknown-model")


def test_a_narrow_copy_keeps_the_layers_and_heads_and_so_the_ops():
    config = config_of("Qwen/Qwen2.5-0.5B-Instruct")
    small = narrow(config)
    assert (small.num_hidden_layers, small.num_attention_heads, small.num_key_value_heads) == (24, 14, 2)
    assert small.hidden_size == 8 * 14 and config.hidden_size == 896  # the real config is left alone
    layers = config_of(BUNDLED_TARGET).num_hidden_layers
    base = step_cost(config_of(BUNDLED_TARGET), 1)
    deeper = config_of(BUNDLED_TARGET)
    deeper.num_hidden_layers *= 2
    twice = step_cost(deeper, 1)
    per_layer = (twice.ops - base.ops) / layers  # the ops grow with the layers, one layer's worth each
    assert per_layer == int(per_layer) > 10 and 0 < base.ops - layers * per_layer < 3 * per_layer
    assert 0 < twice.library_ops < twice.ops and twice.host_s > 0  # a time: measured, never compared in a test


def test_bytes_count_a_tied_matrix_once_and_skip_an_untied_input_embedding():
    tied, untied = config_of("Qwen/Qwen2.5-3B-Instruct"), config_of("Qwen/Qwen2.5-7B-Instruct")
    assert 3.0e9 < weight_bytes(tied, "bfloat16") / 2 < 3.2e9  # 3.09B parameters, the embedding is the head
    assert 6.4e9 < weight_bytes(untied, "bfloat16") / 2 < 7.1e9  # 7.6B less the 0.54B input embedding
    assert weight_bytes(tied, "4bit") < weight_bytes(tied, "bfloat16") / 3


def test_eager_steps_are_bound_by_the_host_and_captured_ones_by_the_bytes():
    cost = StepCost(ops=1000, host_s=0.010, library_ops=300)
    small = 1e9  # 1 GB: 0.2 ms at an H200's bandwidth
    eager = gpu_step_s(cost, small, BANDWIDTH["H200"])
    captured = gpu_step_s(cost, small, BANDWIDTH["H200"], kernels=400)
    assert eager == pytest.approx(0.010 + 1000 * 5e-6)  # the host's issue time
    assert captured == pytest.approx(small / BANDWIDTH["H200"] + 400 * 2e-6) and captured < eager / 10
    ahead = gpu_step_s(cost, small, BANDWIDTH["H200"], kernels=400, graph=False)  # launched from C++, no graph
    assert ahead == pytest.approx(max(small / BANDWIDTH["H200"] + 400 * 2e-6, 400 * 5e-6)) and captured <= ahead
    huge = 1e12  # the control: weights so large the device is slower than the host either way
    assert gpu_step_s(cost, huge, BANDWIDTH["H200"]) == pytest.approx(huge / BANDWIDTH["H200"] + 1000 * 2e-6)


def test_tokens_per_forward_follow_the_acceptance_rate():
    assert tau(0.0, 4) == 1.0 and tau(0.5, 1) == 1.5
    assert tau(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096)
