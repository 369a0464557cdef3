"""Turning logits into the distributions that decoding samples from, and seeded draws.

The same warping (temperature, top-k, top-p, through transformers' own logits warpers) is
applied to the target's p and to the draft's q, so that speculative sampling reproduces
exactly the distribution that baseline sampling draws from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


@dataclass(frozen=True)
class SamplingConfig:
    """temperature 0 means greedy decoding; top_k 0 and top_p 1.0 mean "off"."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def warpers(self) -> LogitsProcessorList:
        warpers = LogitsProcessorList()
        if self.greedy:
            return warpers
        if self.temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k > 0:
            warpers.append(TopKLogitsWarper(self.top_k))
        if self.top_p < 1.0:
            warpers.append(TopPLogitsWarper(self.top_p))
        return warpers


def validate_sampling(config: SamplingConfig) -> None:
    from specdemo.errors import InputError

    t = config.temperature
    if t is None or (isinstance(t, float) and math.isnan(t)) or t < 0:
        raise InputError(f"temperature must be a number ≥ 0 (0 = greedy), got {t}", field="temperature")
    if not 0 < config.top_p <= 1:
        raise InputError(f"top_p must be in (0, 1], got {config.top_p}", field="top_p")
    if config.top_k < 0:
        raise InputError(f"top_k must be ≥ 0 (0 = off), got {config.top_k}", field="top_k")


def to_probs(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Rows of logits [n, V] → rows of probabilities [n, V] in float32.

    In greedy mode these are the plain softmax probabilities (used for display only: the
    greedy rule compares argmaxes)."""
    logits = logits.float()
    scores = config.warpers()(None, logits)
    return torch.softmax(scores, dim=-1)


def align_vocab(logits: torch.Tensor, size: int) -> torch.Tensor:
    """Make the draft's logits cover exactly the target's vocabulary size.

    Models of one family sometimes pad their embedding matrices to different sizes while
    sharing the tokenizer; padding ids the draft lacks with -inf gives them q = 0."""
    width = logits.shape[-1]
    if width == size:
        return logits
    if width > size:
        return logits[..., :size]
    pad = logits.new_full((*logits.shape[:-1], size - width), float("-inf"))
    return torch.cat([logits, pad], dim=-1)


def draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token from a probability vector [V], reproducible through ``generator``."""
    return int(torch.multinomial(probs.to(generator.device), 1, generator=generator).item())


def draw_uniform(generator: torch.Generator) -> float:
    return float(torch.rand((), generator=generator, device=generator.device).item())


def make_generator(seed: int) -> torch.Generator:
    """Draws happen on the CPU so a seed gives the same run on every device."""
    return torch.Generator(device="cpu").manual_seed(int(seed))
