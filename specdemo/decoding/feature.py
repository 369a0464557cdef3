"""A drafter the target's own features drive (EAGLE-3 style: Li et al. 2024, 2025).

An independent small draft must guess the target's next token from the text alone. This one reads
what the target already computed: its hidden states at a low, a middle and a high layer for every
verified position, which the verify forward returns at no extra cost. Pairing (the pitfall every
port meets): the target's feature f_t at position t is what the target used to predict token t+1,
so the head's input at position t+1 is (f_t, token t+1), and its output there predicts token t+2.

    g_t   = fuse(cat(f_t^low, f_t^mid, f_t^high))            3H → H
    x_t+1 = mix(cat(embed(token t+1), g_t))                  2H → H   (embed: the target's, frozen)
    h_t+1 = decoder layer(s)(x_t+1 | their own KV cache)    attention over earlier positions (depth 1 or 2)
    q     = softmax(head(norm(h_t+1)))                       over the draft's N most frequent tokens

Drafting γ tokens: the first uses the target's features; each next one feeds the head's own h in
place of a target feature it does not have yet (what "training-time test" trains the head for).
Once the target has verified those positions, its real features replace them: the head's cache
is cropped back to the positions built on target features. q is the head's distribution (zero
outside its N tokens), so the acceptance rule, the residual and the bonus are unchanged.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from specdemo.decoding.drafters import Draft
from specdemo.decoding.sampling import SamplingConfig, draw, to_probs
from specdemo.errors import ModelLoadError

CONFIG_FILE = "feature_drafter.json"
WEIGHTS_FILE = "feature_drafter.pt"


@dataclass
class FeatureConfig:
    hidden: int  # the target's hidden size H
    layers: tuple[int, ...]  # which of the target's hidden_states (0 = embeddings) feed the head
    heads: int
    kv_heads: int
    intermediate: int
    rope_theta: float
    rms_eps: float
    vocab_size: int  # the target's
    draft_ids: list[int] = field(default_factory=list)  # the N target ids the head scores
    target: dict = field(default_factory=dict)  # what identifies the target (see target_fingerprint)
    depth: int = 1  # decoder layers in the head (EAGLE: 1)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def target_fingerprint(model) -> dict:
    """Shape and a checksum of the embedding: a head trained on another target is refused."""
    c = model.config
    embed = model.get_input_embeddings().weight.detach()
    return {
        "layers": c.num_hidden_layers,
        "hidden": c.hidden_size,
        "vocab": embed.shape[0],
        "embed_checksum": round(float(embed[:256].double().abs().sum()), 2),
    }


def config_for(target, layers: tuple[int, ...], draft_ids: list[int], depth: int = 1) -> FeatureConfig:
    c = target.config
    theta = (getattr(c, "rope_parameters", None) or {}).get("rope_theta", getattr(c, "rope_theta", 10000.0))
    return FeatureConfig(
        hidden=c.hidden_size,
        layers=tuple(layers),
        heads=c.num_attention_heads,
        kv_heads=c.num_key_value_heads,
        intermediate=c.intermediate_size,
        rope_theta=float(theta),
        rms_eps=c.rms_norm_eps,
        vocab_size=target.get_output_embeddings().weight.shape[0],
        draft_ids=list(draft_ids),
        target=target_fingerprint(target),
        depth=depth,
    )


def default_layers(num_layers: int) -> tuple[int, int, int]:
    """Low, middle and high (EAGLE-3 takes e.g. 2, 15, 27 of 30); indices into hidden_states."""
    return (2, num_layers // 2, num_layers - 1)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate(x, positions, theta: float):
    """Rotary position embedding of [B, heads, n, d] at ``positions`` [n] (Llama's rotate-half form)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    angles = positions.float()[:, None] * inv[None]
    cos, sin = torch.cat([angles, angles], -1).cos().to(x.dtype), torch.cat([angles, angles], -1).sin().to(x.dtype)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


@dataclass
class LayerCache:
    """The head's own keys and values, [1, kv_heads, positions, d]; cropped by slicing."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def crop(self, length: int) -> None:
        if self.k is not None:
            self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]


class DecoderLayer(nn.Module):
    """One Llama decoder layer (pre-norm attention with RoPE and GQA, then a SwiGLU MLP)."""

    def __init__(self, cfg: FeatureConfig):
        super().__init__()
        h, d = cfg.hidden, cfg.head_dim
        self.cfg = cfg
        self.attn_norm = RMSNorm(h, cfg.rms_eps)
        self.q = nn.Linear(h, cfg.heads * d, bias=False)
        self.k = nn.Linear(h, cfg.kv_heads * d, bias=False)
        self.v = nn.Linear(h, cfg.kv_heads * d, bias=False)
        self.o = nn.Linear(cfg.heads * d, h, bias=False)
        self.mlp_norm = RMSNorm(h, cfg.rms_eps)
        self.gate = nn.Linear(h, cfg.intermediate, bias=False)
        self.up = nn.Linear(h, cfg.intermediate, bias=False)
        self.down = nn.Linear(cfg.intermediate, h, bias=False)

    def project(self, x, positions):
        """Queries, keys and values of ``x`` [B, n, H] at ``positions``, rotated: [B, heads, n, d]."""
        cfg, (b, n, _) = self.cfg, x.shape
        y = self.attn_norm(x)
        q = self.q(y).view(b, n, cfg.heads, cfg.head_dim).transpose(1, 2)
        k = self.k(y).view(b, n, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v(y).view(b, n, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        return rotate(q, positions, cfg.rope_theta), rotate(k, positions, cfg.rope_theta), v

    def finish(self, x, q, k, v, mask):
        """Attention of q over (k, v) under ``mask`` [n, keys], then the residual and the MLP."""
        b, n, _ = x.shape
        repeat = self.cfg.heads // self.cfg.kv_heads
        k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, n, -1))
        y = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))

    def forward(self, x, positions, cache: LayerCache | None = None):
        q, k, v = self.project(x, positions)
        past = 0
        if cache is not None:
            past = cache.length
            if past:
                k, v = torch.cat([cache.k, k], 2), torch.cat([cache.v, v], 2)
            cache.k, cache.v = k, v
        # causal over the new positions, everything cached before them visible
        n = x.shape[1]
        mask = torch.ones(n, past + n, dtype=torch.bool, device=x.device).tril(past)
        return self.finish(x, q, k, v, mask)


def new_caches(head: FeatureHead) -> list[LayerCache]:
    return [LayerCache() for _ in head.blocks]


class FeatureHead(nn.Module):
    """The drafter's weights: fuse, mix, decoder layer(s), norm, head over N tokens (see top)."""

    def __init__(self, cfg: FeatureConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.fuse = nn.Linear(len(cfg.layers) * h, h, bias=False)
        self.mix = nn.Linear(2 * h, h, bias=False)
        self.blocks = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.depth))
        self.norm = RMSNorm(h, cfg.rms_eps)
        ids = cfg.draft_ids or list(range(cfg.vocab_size))
        self.head = nn.Linear(h, len(ids), bias=False)
        self.register_buffer("draft_ids", torch.tensor(ids, dtype=torch.long), persistent=False)

    def forward(self, embeds, features, positions, caches: list[LayerCache] | None = None, fused: bool = False):
        """embeds [B, n, H] of tokens t+1; features [B, n, 3H] target features f_t (or [B, n, H] own
        hidden states with ``fused``) → (hidden h [B, n, H], logits over the N draft ids [B, n, N])."""
        g = features if fused else self.fuse(features)
        h = self.mix(torch.cat([embeds, g], -1))
        for i, block in enumerate(self.blocks):
            h = block(h, positions, caches[i] if caches else None)
        return h, self.head(self.norm(h))

    def full_logits(self, reduced: torch.Tensor) -> torch.Tensor:
        """[n, N] → [n, V] with −inf outside the draft ids (q = 0 there)."""
        out = reduced.new_full((*reduced.shape[:-1], self.cfg.vocab_size), float("-inf"))
        out[..., self.draft_ids] = reduced
        return out

    def get_memory_footprint(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.parameters())

    @property
    def device(self):
        return self.head.weight.device

    def check_target(self, target, name: str = "this feature drafter") -> None:
        """Refuse a target other than the one the head was trained on."""
        found = target_fingerprint(target)
        expected = self.cfg.target
        if (
            expected
            and any(found[k] != expected.get(k) for k in ("layers", "hidden", "vocab"))
            or (expected and not math.isclose(found["embed_checksum"], expected.get("embed_checksum", 0), rel_tol=1e-4))
        ):
            raise ModelLoadError(
                f"{name} reads the hidden states of the target it was trained on ({expected['layers']} layers, "
                f"hidden {expected['hidden']}, vocabulary {expected['vocab']}), and this target is another model "
                f"({found['layers']} layers, hidden {found['hidden']}, vocabulary {found['vocab']}): "
                "use it with its own target, or pick a draft model"
            )


def is_feature_drafter(folder: str) -> bool:
    return Path(folder, CONFIG_FILE).expanduser().is_file()  # a folder as typed (~ too)


def save_feature_head(head: FeatureHead, folder: Path, card: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(asdict(head.cfg), indent=1))
    torch.save({k: v.half() for k, v in head.state_dict().items()}, folder / WEIGHTS_FILE)
    if card:
        (folder / "README.md").write_text(card)


def load_feature_head(folder: str, dtype: torch.dtype = torch.float32) -> FeatureHead:
    cfg_dict = json.loads(Path(folder, CONFIG_FILE).read_text())
    cfg_dict["layers"] = tuple(cfg_dict["layers"])
    head = FeatureHead(FeatureConfig(**cfg_dict))
    state = torch.load(Path(folder, WEIGHTS_FILE), map_location="cpu")
    # heads saved before the depth option kept their one layer as "layer."
    state = {k.replace("layer.", "blocks.0.", 1) if k.startswith("layer.") else k: v for k, v in state.items()}
    head.load_state_dict({k: v.to(dtype) for k, v in state.items()})
    return head.to(dtype).eval()


class FeatureDrafter:
    """Drafts γ tokens with a FeatureHead from the target's features (``target.features``, kept
    per position by the target's CachedLM in step with its KV cache)."""

    def __init__(self, head: FeatureHead, target, vocab_size: int):
        self.head = head
        self.target = target  # the CachedLM of the target, which keeps the head's layers from its first feed on
        target.feature_layers = head.cfg.layers
        self.embed = target.model.get_input_embeddings()
        self.vocab_size = vocab_size
        self.caches = new_caches(head)
        self.based = 0  # the head's cache holds positions 1..based built on target features

    def rollback_to(self, positions: int) -> None:
        """Keep the head's entries for positions 1..``positions``."""
        for cache in self.caches:
            cache.crop(positions)
        self.based = min(self.based, positions)

    @torch.inference_mode()
    def propose(self, tokens: list[int], n: int, sampling: SamplingConfig, generator) -> Draft:
        # The target has run over tokens[:-1] (its last emitted token is not fed yet): features
        # f_0..f_{L−2}. Head position j consumes (f_{j−1}, token j) for j = 1..L−1.
        usable = min(len(self.target.features), len(tokens) - 1)
        if n <= 0 or usable < 1:
            return Draft()  # the first step: the target has not seen the prompt yet
        # Entries past the target-verified part were built on the head's own h: drop them.
        self.rollback_to(min(self.based, usable))
        if self.based == usable:  # nothing new: recompute the last position for its output
            self.rollback_to(usable - 1)
        start = self.based + 1
        ids = torch.tensor([tokens[start : usable + 1]], device=self.head.device)
        feats = self.target.features[start - 1 : usable][None].to(self.head.head.weight.dtype)
        positions = torch.arange(start, usable + 1, device=self.head.device)
        h, reduced = self.head(self.embed(ids), feats, positions, self.caches)
        self.based = usable
        drafted, prob_rows = [], []
        for i in range(n):
            probs = to_probs(self.head.full_logits(reduced[0, -1:].float()), sampling)[0]
            x = int(probs.argmax()) if sampling.greedy else draw(probs, generator)
            drafted.append(x)
            prob_rows.append(probs)
            if i == n - 1:
                break
            # the next position has no target feature yet: the head's own h stands in for it
            position = torch.tensor([usable + 1 + i], device=self.head.device)
            h, reduced = self.head(
                self.embed(torch.tensor([[x]], device=self.head.device)), h[:, -1:], position, self.caches, fused=True
            )
        return Draft(drafted, torch.stack(prob_rows))
