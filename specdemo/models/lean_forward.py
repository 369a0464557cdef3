"""A lean forward for Llama models: transformers' own numbers, fewer Python steps.

On a 2-core CPU a small model's step is not all matrices. The profile (``python -m specdemo
profile``) of SmolLM2-135M on compact-fp32 splits a 60 ms step into ≈ 29 ms of products and ≈ 23 ms
of small ops and Python; its 4-layer draft spends ≈ 5 of its 8.5 ms outside the products. That
overhead is the draft's cost c, and part of every target step.

This forward runs transformers' Llama modules and functions (their rotary embedding,
``sdpa_attention_forward``, ``Cache.update``, ``create_causal_mask``) in the order
``LlamaModel.forward`` runs them, and where one torch call does the same arithmetic as several, that
call: the RMSNorm as ``F.rms_norm``, the rotation as ``rotate``, a verify's attention on a CPU with
shared key/value heads (``attend``). So its logits are bit for bit transformers' (tested). It
leaves out what a decode step does not need: the decorators that capture outputs and merge
defaults, the keyword plumbing through every module, one ``nn.Module`` call per norm and product;
and on compact weights (``compact_linear.py``) q, k, v are one product and gate, up another: the
kernel sums each output alone, so a joined matrix gives the parts' outputs bit for bit.

A call that asks for more than a plain step (an attention mask, position ids, hidden states:
``generate()``, a tree verify, a feature drafter) runs transformers' forward unchanged.
"""

from __future__ import annotations

import functools
import sys
import types

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from specdemo.decoding.shapes import CACHE_ARG
from specdemo.models.compact_linear import CompactLinear, join_compact

LEAN_MODEL_TYPES = ("llama",)
PLAIN_STEP = {"input_ids", CACHE_ARG, "use_cache", "logits_to_keep"}  # what a decode step passes


class LeanLayer:
    """One decoder layer's modules, with its joined products where its weights are compact."""

    def __init__(self, layer):
        self.layer, attention, mlp = layer, layer.self_attn, layer.mlp
        self.attention, self.mlp = attention, mlp
        self.qkv_parts = (attention.q_proj, attention.k_proj, attention.v_proj)
        self.gate_up_parts = (mlp.gate_proj, mlp.up_proj)
        self.qkv = join_compact(self.qkv_parts)
        self.gate_up = join_compact(self.gate_up_parts)
        q, k, v = self.qkv_parts  # the joined product's columns: q and k side by side (one rotation), then v
        self.qk_v_sizes = [q.out_features + k.out_features, v.out_features]
        self.q_heads = q.out_features // attention.head_dim


def products(x: torch.Tensor, joined: CompactLinear | None, parts) -> list[torch.Tensor]:
    """Each part's product of ``x``: one joined pass over their weights where there is one."""
    if joined is not None and joined.takes(x):  # the joined product has no fp32 weight to fall back on
        return list(joined(x).split([p.out_features for p in parts], dim=-1))
    return [p(x) for p in parts]


def transformers_attend(attention, q, k, v, mask) -> torch.Tensor:
    """transformers' ``sdpa_attention_forward`` (``repeat_kv`` before a masked attention)."""
    return sdpa_attention_forward(attention, q, k, v, mask, dropout=0.0, scaling=attention.scaling)[0]


def attend(attention, q, k, v, mask) -> torch.Tensor:
    """``sdpa_attention_forward``'s output [1, n, heads, head dim]. For a verify on a CPU (several new
    tokens after a cache, so a mask) torch's CPU flash kernel is asked to share each key/value head
    with its query heads (``enable_gqa``) where transformers first copies the cache once per query
    head (``repeat_kv``: CUDA's kernels would fall back to the slow path with a mask and GQA; the CPU's
    does not). The same kernel and sums, so the same bits (tested); faster per layer (docs/design.md)."""
    if mask is None or mask.dtype != torch.bool or q.device.type != "cpu":
        return transformers_attend(attention, q, k, v, mask)
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attention.scaling, enable_gqa=True)
    return a.transpose(1, 2)


def norm(module, x: torch.Tensor) -> torch.Tensor:
    """``LlamaRMSNorm``: x · rsqrt(mean(x²) + ε) · weight, as torch's one ``rms_norm`` call (the same
    operations, one dispatch instead of eight; bit for bit, tested)."""
    return F.rms_norm(x, module.weight.shape, module.weight, module.variance_epsilon)


def rotation(position_embeddings) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin for ``rotate``, once per forward: [1, 1, n, head dim], sin's first half negated."""
    cos, sin = (t.unsqueeze(1) for t in position_embeddings)
    half = sin.shape[-1] // 2
    return cos, torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """``apply_rotary_pos_emb``'s x·cos + rotate_half(x)·sin with rotate_half(x) = (−x₂, x₁): written
    (x₂, x₁)·(−sin₁, sin₂), the same products (a sign flip is exact), in 4 operations instead of 7;
    q and k go through it together where their product is joined."""
    swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)
    return x * cos + swapped * signed_sin


def layer_step(lean: LeanLayer, x, rotary, mask, cache, index: int) -> torch.Tensor:
    """``LlamaDecoderLayer.forward`` (with ``LlamaAttention`` and ``LlamaMLP``), the same operations."""
    layer, attention, mlp = lean.layer, lean.attention, lean.mlp
    shape = (*x.shape[:-1], -1, attention.head_dim)
    h = norm(layer.input_layernorm, x)
    if lean.qkv is not None and lean.qkv.takes(h):  # q and k side by side: one rotation
        qk, v = lean.qkv(h).split(lean.qk_v_sizes, -1)
        qk = rotate(qk.view(shape).transpose(1, 2), *rotary)
        q, k, v = qk[:, : lean.q_heads], qk[:, lean.q_heads :], v.view(shape).transpose(1, 2)
    else:
        q, k, v = (t.view(shape).transpose(1, 2) for t in products(h, None, lean.qkv_parts))
        q, k = rotate(q, *rotary), rotate(k, *rotary)
    k, v = cache.update(k, v, index)
    a = attend(attention, q, k, v, mask)
    x = x + attention.o_proj(a.reshape(*x.shape[:-1], -1).contiguous())
    h = norm(layer.post_attention_layernorm, x)
    gate, up = products(h, lean.gate_up, lean.gate_up_parts)
    return x + mlp.down_proj(mlp.act_fn(gate) * up)


def body_step(body, lean_layers: list[LeanLayer], input_ids: torch.Tensor, cache) -> torch.Tensor:
    """``LlamaModel.forward`` for new tokens after a cache: the last hidden states [1, n, H]."""
    x = body.embed_tokens(input_ids)
    n = input_ids.shape[1]
    positions = (torch.arange(n, device=x.device) + cache.get_seq_length()).unsqueeze(0)
    modeling = sys.modules[type(body).__module__]  # where the model looks its functions up (profile times them)
    mask = modeling.create_causal_mask(
        config=body.config, inputs_embeds=x, attention_mask=None, position_ids=positions, **{CACHE_ARG: cache}
    )
    rotary = rotation(body.rotary_emb(x, position_ids=positions))
    for index, lean in enumerate(lean_layers):
        x = layer_step(lean, x, rotary, mask, cache, index)
    return norm(body.norm, x)


def is_plain_step(kwargs: dict) -> bool:
    """A decode step: new ids after a cache, nothing else asked for; and not being compiled (torch.compile
    traces transformers' forward and fuses its small ops itself: the lean forward saves Python, which a
    compiled step does not run; an exported one neither)."""
    if torch.compiler.is_compiling() or torch.compiler.is_exporting():
        return False
    return kwargs.get(CACHE_ARG) is not None and kwargs.get("input_ids") is not None and set(kwargs) <= PLAIN_STEP


def use_lean_forward(model) -> bool:
    """Give a Llama model (and its body) the lean forward for plain steps; → whether it took."""
    if model.config.model_type not in LEAN_MODEL_TYPES or model.config._attn_implementation != "sdpa":
        return False
    body = model.base_model
    lean_layers = [LeanLayer(layer) for layer in body.layers[: model.config.num_hidden_layers]]
    full_body, full_model = body.forward, model.forward

    # wraps: generate() reads the forward's signature (logits_to_keep, …): it stays transformers'
    @functools.wraps(type(body).forward)
    def lean_body(self, *args, **kwargs):
        if args or not is_plain_step(kwargs) or "logits_to_keep" in kwargs:
            return full_body(*args, **kwargs)
        hidden = body_step(self, lean_layers, kwargs["input_ids"], kwargs[CACHE_ARG])
        return BaseModelOutputWithPast(last_hidden_state=hidden)

    @functools.wraps(type(model).forward)
    def lean_model(self, *args, **kwargs):
        if args or not is_plain_step(kwargs):
            return full_model(*args, **kwargs)
        hidden = body_step(body, lean_layers, kwargs["input_ids"], kwargs[CACHE_ARG])
        keep = kwargs.get("logits_to_keep", 0)
        return CausalLMOutputWithPast(logits=self.lm_head(hidden[:, -keep:] if keep else hidden))

    body.forward = types.MethodType(lean_body, body)
    model.forward = types.MethodType(lean_model, model)
    return True
