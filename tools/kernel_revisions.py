"""Probe: the compact-fp32 kernel as it is now against the kernel of an earlier commit, on a preset's
matrices (the lean forward's joined q/k/v and gate/up, o, down, the LM head), interleaved.

    python -m tools.kernel_revisions --against HEAD~1 [--preset smollm2-135m] [--rounds 30] [--forward]

Both sources are compiled with the flags the project uses into a temporary folder and loaded side
by side; each round times every k with each build in turn (reversed every second round), and each
figure is the median over rounds: all of the preset's products for one forward of k rows, in ms.
``--forward``: the whole target forward of k new tokens over a warm 100-token cache instead, as the
engine runs it (``measure/profile.py``), each build swapped in as the model's kernels.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from specdemo.measure.profile import time_forward, warm_cache
from specdemo.models import PRESETS, ModelCache, compact_linear, lean_forward, load_pair


def build(source: str, folder: Path, name: str) -> ctypes.CDLL:
    c, so = folder / f"{name}.c", folder / f"{name}.so"
    c.write_text(source)
    subprocess.run(["cc", *compact_linear.compiler_flags(), "-o", str(so), str(c)], check=True)
    return compact_linear.load_library(so)


def products(model) -> list:
    """The compact matrices one lean forward multiplies by (joined where the lean forward joins them)."""
    matrices = []
    for layer in model.base_model.layers:
        lean = lean_forward.LeanLayer(layer)
        matrices += [lean.qkv, layer.self_attn.o_proj, lean.gate_up, layer.mlp.down_proj]
    return matrices + [model.lm_head]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="a git revision whose compact_kernels.c to compare")
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--ks", default="1,2,3,4,5,9")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--forward", action="store_true", help="time the whole forward, not the products alone")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    preset = PRESETS[args.preset]
    pair = load_pair(preset.target, preset.draft, preset.target_options, preset.draft_options, ModelCache())
    matrices = products(pair.target)
    path = compact_linear.KERNEL_SOURCE.relative_to(Path.cwd())
    earlier = subprocess.run(["git", "show", f"{args.against}:{path}"], check=True, capture_output=True, text=True)
    ks = [int(k) for k in args.ks.split(",")]
    xs = {(k, n): torch.randn(k, n) for k in ks for n in {m.in_features for m in matrices}}
    ys = {(k, n): torch.empty(k, n) for k in ks for n in {m.out_features for m in matrices}}
    with tempfile.TemporaryDirectory() as folder:
        builds = {
            args.against: build(earlier.stdout, Path(folder), "earlier"),
            "now": build(compact_linear.KERNEL_SOURCE.read_text(), Path(folder), "now"),
        }

        if args.forward:
            lm, prefix = warm_cache(pair.target, 100)

        def forward(library, k: int) -> float:
            if args.forward:
                compact_linear._kernels["library"] = library
                return time_forward(lm, prefix, list(range(1000, 1000 + k)))
            start = time.perf_counter()
            for m in matrices:
                x, y = xs[k, m.in_features], ys[k, m.out_features]
                library.compact_linear(
                    compact_linear.KINDS[m.kind], x.data_ptr(), k, m.in_features, m.codes.data_ptr(),
                    m.scales.data_ptr(), y.data_ptr(), m.out_features, args.threads,
                )  # fmt: skip
            return time.perf_counter() - start

        names = list(builds)
        times = {(name, k): [] for name in names for k in ks}
        for round_ in range(args.rounds):
            for k in ks:
                for name in names if round_ % 2 == 0 else names[::-1]:
                    times[name, k].append(forward(builds[name], k))
    what = "whole forwards (100-token cache)" if args.forward else f"{len(matrices)} products"
    print(f"{what} of {args.preset}'s target, {args.threads} threads, ms per forward of k rows:")
    for name in names:
        print(f"{name:>10}: " + ", ".join(f"k={k}: {statistics.median(times[name, k]) * 1e3:.1f}" for k in ks))


if __name__ == "__main__":
    main()
