"""Probe: how far auto's start-up cost curve moves from one start-up to the next on this machine.

    python -m tools.startup_spread --runs 10

Each run times the steps as auto's start-up does (``auto.timed_shapes``), and t_v(1+k)/t_t is read off the same
timings two ways: the least-squares line through every k (``auto.verify_curve``, what auto uses) and each k
over its own t_t with a running max (what it used before). Per k, the mean ± the spread (standard deviation)
over the runs: a spread as wide as the gap between two choices' costs makes the choice a coin toss.
"""

from __future__ import annotations

import argparse
import itertools
import statistics

from specdemo.cli.common import add_pair_args, load_from_args
from specdemo.decoding import auto, methods


def per_k(seconds: list[float]) -> list[float]:
    """Each k over the k = 0 median, made non-decreasing (the estimator the line replaced: the control)."""
    return list(itertools.accumulate((s / seconds[0] for s in seconds), max))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pair_args(parser)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    pair = load_from_args(args)  # as the CLI loads it: its threads, dtype and kernels
    most = methods.AUTO.gamma
    curves = {"line": [], "per k": []}
    for _ in range(args.runs):
        median = auto.timed_shapes(pair.target, pair.draft, most)
        seconds = [median[("target", 1 + k)] for k in range(most + 1)]
        curves["line"].append(auto.verify_curve(seconds)[1])
        curves["per k"].append(per_k(seconds))
    print(f"t_v(1+k)/t_t over {args.runs} start-ups ({auto.ROUNDS} rounds each), mean ± standard deviation")
    print(f"{'k':>2} " + " ".join(f"{name:>14}" for name in curves))
    for k in range(1, most + 1):
        cells = []
        for runs in curves.values():
            values = [curve[k] for curve in runs]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):.3f} ± {spread:.3f}")
        print(f"{k:>2} " + " ".join(f"{c:>14}" for c in cells))


if __name__ == "__main__":
    main()
