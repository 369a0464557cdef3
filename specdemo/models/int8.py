"""Int8 weight-only linears for a CPU target: half the bytes a step reads, bf16 arithmetic.

Each ``nn.Linear`` weight W [out, in] is stored as int8 with one scale per output row,
s_o = max_i |W_oi| / 127 and Q = round(W / s) (so |W − s·Q| ≤ s/2 per weight); the product runs
in aten's ``_weight_int8pack_mm`` (the kernel inductor lowers int8 weight-only matmuls to on CPU):
y = (x · Qᵀ) · s with x and y in bf16, accumulated in fp32 inside the kernel. Everything else
(embeddings, norms, rotary, attention, residuals) stays in the model's dtype.

The same model serves the baseline and the speculative side, so a speedup compares like with
like. Rounding differs from fp32 (int8 weights, bf16 products) and between a 1-row step and a
k-row verify, so greedy speculative output can part from the baseline at a near-tie: the
divergence explainer reports it in bf16 units (``COMPUTE_DTYPE``).
"""

from __future__ import annotations

import torch
from torch import nn

COMPUTE_DTYPE = "bfloat16"  # what the divergence explainer rounds in for such a model


class Int8WeightOnlyLinear(nn.Module):
    def __init__(self, linear: nn.Linear):
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp_min(1e-12) / 127
        self.register_buffer("qweight", torch.round(weight / scale[:, None]).clamp(-128, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(torch.bfloat16))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    @property
    def weight(self) -> torch.Tensor:
        """The int8 matrix [out, in]: what code reading a layer's shape (the vocabulary size) needs."""
        return self.qweight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y = torch._weight_int8pack_mm(rows, self.qweight, self.scale).to(x.dtype)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weight-only"


def quantize_int8_weight_only(model: nn.Module) -> nn.Module:
    """Replace every ``nn.Linear`` (the output layer too) in place; marks the model for the explainer.

    A tied output layer gets int8 weights of its own; the input embedding keeps the float table."""
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, child_name, Int8WeightOnlyLinear(child))
    model.config.tie_word_embeddings = False  # the head is no longer the embedding's table
    model.specdemo_compute_dtype = COMPUTE_DTYPE
    return model
