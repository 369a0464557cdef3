"""Verify-cost profile: what one forward of k new tokens over a warm KV cache costs, and where it goes.

Speculative decoding pays because scoring γ + 1 tokens in one forward should cost about one step
(t_v ≈ t_t). This measures t(k) for k = 1, 2, 3, … over a cache of a given length, as the engine
runs it (``CachedLM.forward``: feed k ids, keep k rows of logits, crop back), and splits it into

- ``layers``:  the decoder body's matrix products (aten mm / addmm / linear / bmm, or the
               compact-fp32 kernels),
- ``attention``: scaled-dot-product attention,
- ``other ops``: norms, rotary, activations, casts, cache concatenation (every other aten op),
- ``mask``:    building the attention mask (transformers' ``create_causal_mask``),
- ``lm_head``: the output layer over k rows (timed alone),
- ``sampling``: turning k rows of logits into probabilities and an argmax,
- ``python``:  what is left of the wall time (dispatch, module calls, the cache's bookkeeping).

Each figure is a median over ``repeats`` forwards, the ks taking turns (the machine's speed drifts:
timed one k after another, the drift would show as a curve); the op split comes from one ``torch.profiler``
pass per k (op self times; the profiler adds a little to each, so the parts can add up to slightly
more than the unprofiled wall time, and ``python`` is then the smaller for it).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field

import torch

from specdemo.decoding.kv import CachedLM, synchronize
from specdemo.decoding.sampling import SamplingConfig, to_probs
from specdemo.models import compact_linear

KS = (1, 2, 3, 4, 5, 7, 9)
PARTS = ("layers", "attention", "other ops", "mask", "lm_head", "sampling", "python")
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::_mkl_linear"}
MATMUL_OPS |= {compact_linear.RECORD_NAME}  # the compact-fp32 kernels (models/compact_linear.py)
ATTENTION_OPS = {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu"}


@dataclass
class ProfileRow:
    k: int
    context: int
    ms: float  # median wall time of one forward of k new tokens (logits for all k rows)
    parts: dict[str, float] = field(default_factory=dict)  # ms per part, adding up to about ``ms``


def warm_cache(model, context: int, seed: int = 0) -> tuple[CachedLM, list[int]]:
    """A CachedLM holding ``context`` ids (their values do not change the cost)."""
    generator = torch.Generator().manual_seed(seed)
    vocab = model.get_output_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (context,), generator=generator).tolist()
    lm = CachedLM(model)
    lm.forward(ids, keep=1)
    return lm, ids


def time_forward(lm: CachedLM, prefix: list[int], new: list[int]) -> float:
    """One engine-shaped forward of ``new`` after ``prefix`` (synced), then crop back; seconds."""
    synchronize(lm.device)
    start = time.perf_counter()
    lm.forward(new, keep=len(new))
    synchronize(lm.device)
    seconds = time.perf_counter() - start
    lm.rollback_to(len(prefix))
    return seconds


@contextlib.contextmanager
def timed_mask(seconds: list[float]):
    """Time transformers' causal-mask building where the model's module looks it up."""
    import sys

    patched = []
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name.startswith("transformers.models.") and hasattr(module, "create_causal_mask"):
            original = module.create_causal_mask

            def wrapper(*args, _original=original, **kwargs):
                start = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    seconds.append(time.perf_counter() - start)

            module.create_causal_mask = wrapper
            patched.append((module, original))
    try:
        yield
    finally:
        for module, original in patched:
            module.create_causal_mask = original


@contextlib.contextmanager
def quiet_stderr():
    """The profiler's C++ side prints two trace lines per pass on fd 2; keep the report readable."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def op_split(lm: CachedLM, prefix: list[int], new: list[int], repeats: int) -> dict[str, float]:
    """Self CPU time per op group over ``repeats`` forwards, in ms per forward (profiler clock)."""
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr(), compact_linear.recorded(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            time_forward(lm, prefix, new)
    groups = {"layers": 0.0, "attention": 0.0, "other ops": 0.0, "all": 0.0}
    for event in prof.key_averages():
        if not event.key.startswith("aten::") and event.key != compact_linear.RECORD_NAME:
            continue
        ms = event.self_cpu_time_total / 1000 / repeats
        groups["all"] += ms
        if event.key in MATMUL_OPS:
            groups["layers"] += ms
        elif event.key in ATTENTION_OPS:
            groups["attention"] += ms
        else:
            groups["other ops"] += ms
    return groups


def output_layer(model) -> torch.nn.Module:
    """The output layer as the forward runs it (a reduced-vocabulary draft: its head of N rows)."""
    head = getattr(model, "head", None)  # ReducedVocabLM keeps its N rows there
    return head if isinstance(head, torch.nn.Module) else model.get_output_embeddings()


@torch.inference_mode()
def lm_head_ms(model, k: int, repeats: int) -> float:
    head = output_layer(model)
    hidden = torch.randn(1, k, head.in_features, dtype=head.weight.dtype, device=head.weight.device)
    times = []
    for _ in range(repeats):
        synchronize(hidden.device)
        start = time.perf_counter()
        head(hidden)
        synchronize(hidden.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def sampling_ms(model, k: int, repeats: int) -> float:
    """The engine's per-step work on k rows of logits: probabilities (greedy: one-hot) and argmax."""
    vocab = model.get_output_embeddings().weight.shape[0]
    logits = torch.randn(k, vocab, device=model.device)
    greedy = SamplingConfig()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        to_probs(logits, greedy).argmax(-1).tolist()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def interleaved_walls(lm: CachedLM, prefix: list[int], ks, repeats: int) -> tuple[dict, dict]:
    """``repeats`` forwards of each k, the ks taking turns (in reverse order every second round),
    so a machine whose speed drifts slows every k alike: {k: seconds}, {k: mask-building seconds}."""
    walls: dict[int, list[float]] = {k: [] for k in ks}
    masks: dict[int, list[float]] = {k: [] for k in ks}
    for k in ks:
        for _ in range(3):  # warm-up: first calls at a new shape pay allocation
            time_forward(lm, prefix, prefix[:k])  # any ids: the cost depends on the shape only
    seconds: list[float] = []
    with timed_mask(seconds):
        for round_ in range(repeats):
            for k in ks if round_ % 2 == 0 else ks[::-1]:
                seconds.clear()
                walls[k].append(time_forward(lm, prefix, prefix[:k]))
                masks[k].extend(seconds)
    return walls, masks


def profile_model(model, contexts=(100, 400), ks=KS, repeats: int = 15, split: bool = True) -> list[ProfileRow]:
    """t(k) at each context length, with its split into PARTS (``split=False``: wall times only)."""
    rows = []
    for context in contexts:
        lm, prefix = warm_cache(model, context)
        walls, masks = interleaved_walls(lm, prefix, tuple(ks), repeats)
        for k in ks:
            new, mask = prefix[:k], masks[k]
            row = ProfileRow(k, context, statistics.median(walls[k]) * 1000)
            if split:
                ops = op_split(lm, prefix, new, max(3, repeats // 3))
                head = lm_head_ms(model, k, repeats)
                mask_ms = statistics.median(mask) * 1000 if mask else 0.0
                sample = sampling_ms(model, k, repeats)
                parts = {
                    "layers": max(0.0, ops["layers"] - head),  # the head's product is timed alone
                    "attention": ops["attention"],
                    "other ops": ops["other ops"],
                    "mask": mask_ms,
                    "lm_head": head,
                    "sampling": sample,  # after the forward: not part of t(k)
                }
                # What no aten op accounts for: Python, module calls, dispatch, the cache's bookkeeping.
                parts["python"] = max(0.0, row.ms - ops["all"] - mask_ms)
                row.parts = parts
            rows.append(row)
    return rows


def ratio_curve(rows: list[ProfileRow]) -> dict[int, dict[int, float]]:
    """{context: {k: t(k) / t(1)}}: the verify's cost relative to one step."""
    out: dict[int, dict[int, float]] = {}
    for row in rows:
        base = next(r.ms for r in rows if r.context == row.context and r.k == 1)
        out.setdefault(row.context, {})[row.k] = row.ms / base
    return out


def format_profile(name: str, rows: list[ProfileRow]) -> str:
    lines = [f"{name}"]
    header = f"{'context':>7} {'k':>2} {'t(k) ms':>8} {'t(k)/t(1)':>9}  " + " ".join(f"{p:>9}" for p in PARTS)
    lines.append(header)
    curve = ratio_curve(rows)
    for row in rows:
        parts = " ".join(f"{row.parts.get(p, float('nan')):9.2f}" for p in PARTS)
        lines.append(f"{row.context:>7} {row.k:>2} {row.ms:8.2f} {curve[row.context][row.k]:9.2f}  {parts}")
    for context, ratios in curve.items():
        t1 = next(r.ms for r in rows if r.context == context and r.k == 1)
        shown = ", ".join(f"k={k}: {v:.2f}" for k, v in ratios.items() if k > 1)
        lines.append(f"t_t = {t1:.1f} ms at a {context}-token cache; t_v(k)/t_t: {shown}")
    return "\n".join(lines)


def to_record(rows: list[ProfileRow]) -> list[dict]:
    return [{"k": r.k, "context": r.context, "ms": r.ms, "parts": r.parts} for r in rows]
