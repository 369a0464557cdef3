"""What a preset's steps would cost on a GPU, eager against captured: a cost model fed by what runs here.

At batch 1 an eager GPU step is bound by the host: Python and the dispatcher issue a step's kernels
one by one, so it costs about (host time per op + a launch) × its ops, which grows with the number of
*layers*, not the weights. Captured (CUDA graphs: gpt-fast's recipe) the host issues the whole step at
once and the step is bound by the device: reading the weights once (bytes / memory bandwidth), plus a
floor per kernel. So a draft's cost c eager is about its ops' share of the target's (≈ its layer ratio),
captured about its bytes' share (≈ its parameter ratio), and the speedup τ / (γ·c + t_v/t_t)
(Leviathan et al.) follows. Ahead of time (aot: AOTInductor, what ZeroGPU runs) the same fused kernels are
launched one by one from compiled C++ with no graph: no Python, but a launch each, so the slower of the
device's time and the launches'.

Measured here, per preset's architecture (its ``config.json`` in assets/configs/, or the local folder's):
each eager step's non-view aten ops (every one a kernel launch on a GPU) and its host time, on a
*narrow copy* (the same layers, heads and ops with tiny widths and random weights, so the CPU's time is
the host side alone); the captured step's kernels, as torch.compile's inductor generates them for that
copy (CPU backend) plus the library calls it keeps (matrix products, attention). Computed: the weights'
bytes from the real config. Assumed (stated, not measured): the constants below. Every number this
prints for a GPU is therefore a prediction.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from specdemo.decoding.kv import CachedLM

CONFIGS = Path(__file__).resolve().parents[2] / "assets" / "configs"
LAUNCH_S = 5e-6  # host cost of one cudaLaunchKernel beyond the dispatcher's own (assumption: 3–6 µs is typical)
KERNEL_FLOOR_S = 2e-6  # the shortest a kernel occupies the device, back to back in a graph (assumption)
BANDWIDTH = {"H200": 4.8e12, "A100-80GB": 2.0e12, "L4": 3.0e11}  # memory bytes/s, from the datasheets
BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0, "4bit": 0.56}  # NF4: 4 bits + double-quantized scales
ALPHAS = (0.6, 0.7, 0.8)  # acceptance rates to predict at (the Qwen pairs' cannot be measured offline)


def config_of(model_id: str):
    """The model's architecture: its folder's config.json, else the copy kept in assets/configs/."""
    from transformers import AutoConfig

    if Path(model_id).is_dir():
        return AutoConfig.from_pretrained(model_id)
    path = CONFIGS / f"{model_id.replace('/', '--')}.json"
    if not path.exists():
        raise FileNotFoundError(f"no config.json for {model_id} in {CONFIGS}")
    return AutoConfig.for_model(**json.loads(path.read_text(encoding="utf-8")))


def narrow(config):
    """The same architecture with tiny widths: head dim 8, the same heads, layers and vocabulary kind."""
    narrow = config.__class__.from_dict(config.to_dict())
    heads = config.num_attention_heads
    narrow.hidden_size, narrow.head_dim = 8 * heads, 8
    narrow.intermediate_size, narrow.vocab_size = 64, 512
    narrow.bos_token_id = narrow.eos_token_id = narrow.pad_token_id = 0
    narrow._attn_implementation = "sdpa"
    return narrow


def weight_bytes(config, dtype: str) -> float:
    """Bytes a step reads: every weight but the input embedding (one row of it is read), unless tied."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())  # a tied matrix counts once
    if not config.tie_word_embeddings:
        params -= model.get_input_embeddings().weight.numel()
    return params * BYTES[dtype]


class OpCounter(TorchDispatchMode):
    """Counts the aten ops that compute (views launch nothing)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


LIBRARY_OPS = ("aten.linear", "aten.mm", "aten.addmm", "aten.bmm", "aten.scaled_dot_product_attention")


@dataclass
class StepCost:
    ops: int  # kernel launches of one eager step on a GPU (non-view aten ops)
    host_s: float  # this CPU's time to issue them (the narrow copy: nearly no arithmetic)
    library_ops: int  # of them, matrix products and attention: calls a captured graph keeps as they are


def narrow_model(config):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(narrow(config)).eval()


def step_costs(config, news, context: int = 64, repeats: int = 9) -> dict[int, StepCost]:
    """Static-cache steps of each of ``news`` new tokens after ``context``, on the narrow copy; the sizes
    take turns, so a busy moment lands on all of them alike and their ratios hold."""
    news = sorted(set(news))
    lm = CachedLM(narrow_model(config), steps="static", room=max(news) + 8)
    lm.forward(list(range(1, context + 1)))

    def one(new: int) -> float:
        start = time.perf_counter()
        lm.forward(list(range(1, new + 1)), keep=new)
        elapsed = time.perf_counter() - start
        lm.rollback_to(context)
        return elapsed

    times = {new: [] for new in news}
    for i in range(repeats + 1):
        for new in news:
            elapsed = one(new)
            if i:  # the first round warms up
                times[new].append(elapsed)
    out = {}
    for new in news:
        with OpCounter() as counter:
            lm.forward(list(range(1, new + 1)), keep=new)
        lm.rollback_to(context)
        library = sum(n for op, n in counter.ops.items() if op.startswith(LIBRARY_OPS))
        out[new] = StepCost(sum(counter.ops.values()), statistics.median(times[new]), library)
    return out


def step_cost(config, new: int) -> StepCost:
    return step_costs(config, [new])[new]


def captured_kernels(config, cost: StepCost) -> int:
    """The kernels of one captured step: those inductor generates for the narrow copy (its fusions of
    the small ops) and the library calls it keeps. Compiles once (tens of seconds on a CPU)."""
    from torch._inductor import metrics

    torch._dynamo.reset()
    lm = CachedLM(narrow_model(config), steps="compiled", room=8)
    lm.forward(list(range(1, 65)))
    metrics.reset()
    lm.forward([1])
    return metrics.generated_kernel_count + cost.library_ops


def gpu_step_s(
    cost: StepCost, nbytes: float, bandwidth: float, kernels: int | None = None, graph: bool = True
) -> float:
    """Device: the weights once plus a floor per kernel. Eager (``kernels`` None): the host issues every
    op, overlapping the device, so the slower of the two. Captured: the device alone, its fused kernels.
    Fused kernels without a graph (``graph`` False: ahead of time): the slower of the device and their launches."""
    if kernels is not None:
        device = nbytes / bandwidth + kernels * KERNEL_FLOOR_S
        return device if graph else max(device, kernels * LAUNCH_S)
    return max(nbytes / bandwidth + cost.ops * KERNEL_FLOOR_S, cost.host_s + cost.ops * LAUNCH_S)


def tau(alpha: float, gamma: int) -> float:
    """Tokens per target forward with γ drafts each kept with probability α (Leviathan et al., eq. 1)."""
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def predict(target_id: str, draft_id: str, dtype: str, draft_dtype: str, gpu: str = "H200", gammas=range(1, 9)):
    """The cost model for a pair: per kind of step, t_t, c, t_v/t_t at the best γ for each α."""
    target, draft = config_of(target_id), config_of(draft_id)
    bw = BANDWIDTH[gpu]
    tb, db = weight_bytes(target, dtype), weight_bytes(draft, draft_dtype)
    target_steps = step_costs(target, [1, *(g + 1 for g in gammas)])
    t1, d1 = target_steps[1], step_cost(draft, 1)
    verify = {g: target_steps[g + 1] for g in gammas}
    # a captured verify has the one-token step's kernels (the same graph, k rows)
    fused = (captured_kernels(target, t1), captured_kernels(draft, d1))
    kernels = {"eager": (None, None, True), "captured": (*fused, True), "aot": (*fused, False)}
    out = {"target": target_id, "draft": draft_id, "gpu": gpu, "target_ops": t1.ops, "draft_ops": d1.ops}
    out |= {"target_layers": target.num_hidden_layers, "draft_layers": draft.num_hidden_layers}
    out |= {"target_kernels": kernels["captured"][0], "draft_kernels": kernels["captured"][1]}
    out |= {"bytes_ratio": db / tb, "ops_ratio": d1.ops / t1.ops, "host_ms": 1000 * t1.host_s, "kinds": {}}
    for kind, (target_kernels, draft_kernels, graph) in kernels.items():
        t_t = gpu_step_s(t1, tb, bw, target_kernels, graph)
        c = gpu_step_s(d1, db, bw, draft_kernels, graph) / t_t
        rows = {}
        for alpha in ALPHAS:
            ratio = {g: gpu_step_s(verify[g], tb, bw, target_kernels, graph) / t_t for g in gammas}
            best = max(gammas, key=lambda g: tau(alpha, g) / (g * c + ratio[g]))
            rows[alpha] = {"gamma": best, "speedup": tau(alpha, best) / (best * c + ratio[best]), "tv_tt": ratio[best]}
        out["kinds"][kind] = {"t_t_ms": 1000 * t_t, "c": c, "by_alpha": rows}
    return out


def format_prediction(p: dict) -> str:
    lines = [
        f"{p['target']} + {p['draft']} on an {p['gpu']} (PREDICTED: random-weight architectures, stated constants)",
        f"  ops a step: target {p['target_ops']} ({p['target_layers']} layers), draft {p['draft_ops']} "
        f"({p['draft_layers']} layers): ratio {p['ops_ratio']:.2f}; weights' bytes ratio {p['bytes_ratio']:.2f}; "
        f"host {p['host_ms']:.1f} ms a target step here",
        f"  captured: target {p['target_kernels']} kernels, draft {p['draft_kernels']}",
    ]
    for kind, k in p["kinds"].items():
        cells = "  ".join(
            f"α {a}: {r['speedup']:.2f}× (γ {r['gamma']}, t_v/t_t {r['tv_tt']:.2f})" for a, r in k["by_alpha"].items()
        )
        lines.append(f"  {kind:<8} t_t {k['t_t_ms']:.2f} ms  c {k['c']:.2f}   {cells}")
    return "\n".join(lines)
