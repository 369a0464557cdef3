"""The result tables of README.md and docs/benchmarks.md, written from the results files alone.

Each result lives in one JSON file, written by the command that measures it (``SOURCES``); this module
renders them as markdown, so no table is ever typed by hand. ``python -m specdemo report`` rewrites the
README's results block and docs/benchmarks.md; ``--run`` first measures every file again on this machine.
"""

from __future__ import annotations

import json
from pathlib import Path

from specdemo.models.presets import PRESETS

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
START, END = "<!-- results:start -->", "<!-- results:end -->"

# results file → the command that writes it (``report --run`` runs them in this order)
SOURCES = {
    "assets/defaults/smollm2-135m.json": "python -m specdemo bench --preset smollm2-135m --defaults",
    "assets/tasks/smollm2-135m.json": (
        "python -m specdemo bench --preset smollm2-135m --tasks --methods draft,prompt-lookup,suffix,hybrid "
        "--max-new-tokens 48 --out assets/tasks/smollm2-135m.json"
    ),
    "docs/results/suffix_index.json": "python -m tools.suffix_index_compare --out docs/results/suffix_index.json",
    "docs/results/steps_cpu.json": "python -m tools.steps_compare --out docs/results/steps_cpu.json",
    "docs/results/race_stability.json": (
        "python -m tools.race_stability --runs 5 --tokens 96 --updates 0.125/1,0.5/2 "
        "--out docs/results/race_stability.json"
    ),
    "docs/results/cost_model.json": "python -m specdemo profile --cost-model --out docs/results/cost_model.json",
}


def load(name: str) -> dict:
    return json.loads((ROOT / name).read_text(encoding="utf-8"))


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def source(name: str) -> str:
    return f"`{SOURCES[name]}` → `{name}`"


def start_table() -> str:
    d = load("assets/defaults/smollm2-135m.json")
    rows = [[r["method"], r["gamma"], f"{r['speedup']:.2f}×", f"{r['alpha']:.2f}", f"{r['tau']:.2f}", f"{r['c']:.3f}"]
            for r in d["ranked"]]  # fmt: skip
    return (
        f"**The race's start, SmolLM2-135M on a CPU**: each candidate raced against the baseline on the preset's "
        f"{d['prompts']} example prompts, ≤ {d['max_new_tokens']} tokens, greedy; {d['measured']} "
        f"({d['kernels']}). {source('assets/defaults/smollm2-135m.json')}\n\n"
        + table(["method", "γ", "× baseline", "α", "τ", "c"], rows)
    )


def tasks_table() -> str:
    d = load("assets/tasks/smollm2-135m.json")
    where = d["measured"].split(" with `")[0].rstrip(",")  # the sentence before its command
    methods = list(dict.fromkeys(r["method"] for r in d["rows"]))
    rows = []
    for task, best in d["best"].items():
        cells = {r["method"]: r for r in d["rows"] if r["task"] == task}
        rows.append([task] + [
            (f"**{cells[m]['speedup']:.2f}×**" if m == best else f"{cells[m]['speedup']:.2f}×") if m in cells else "–"
            for m in methods
        ])  # fmt: skip
    return (
        "**Methods × tasks, SmolLM2-135M on a CPU** (× baseline by wall clock, ≤ "
        f"{d['max_new_tokens']} tokens, best in bold; `chat-again`: the chat prompts asked a second time in the "
        f"same process). {where}. {source('assets/tasks/smollm2-135m.json')}\n\n" + table(["task", *methods], rows)
    )


def suffix_table() -> str:
    d = load("docs/results/suffix_index.json")
    rows = [
        [r["task"], "yes" if r["same_proposals"] else "**no**", f"{r['python']['tau']:.2f}",
         f"{r['python']['tokens_per_second']:.1f} / {r['arctic-inference']['tokens_per_second']:.1f}",
         f"{r['python']['index_ms_per_step']:.2f} / {r['arctic-inference']['index_ms_per_step']:.2f}"]
        for r in d["rows"]
    ]  # fmt: skip
    return (
        f"**Suffix decoding's index: pure Python against arctic-inference** (suffix decoding, γ {d['gamma']}, greedy, "
        f"≤ {d['max_new_tokens']} tokens, {d['preset']}; {d['machine']}). {source('docs/results/suffix_index.json')}"
        "\n\n" + table(["task", "same proposals", "τ", "tokens/s (python / library)", "index ms a step"], rows)
    )


def steps_table() -> str:
    d = load("docs/results/steps_cpu.json")
    rows = [
        [kind, f"{k['t_t_ms']:.1f}", f"{k['c']:.2f}", f"{k['tv_tt']:.2f}", f"{k['baseline_tokens_per_second']:.1f}",
         f"{k['speculative_tokens_per_second']:.1f}", f"{k['speedup']:.2f}×", "yes" if k["same_tokens"] else "**no**"]
        for kind, k in d["kinds"].items()
    ]  # fmt: skip
    return (
        f"**Eager, static and compiled steps on a CPU** ({d['preset']}, draft model γ {d['gamma']}, {d['prompts']} "
        f"prompts, ≤ {d['max_new_tokens']} tokens, one interleaved run; {d['machine']}). Compiled steps are not "
        f"faster here, so the CPU default stays eager. {source('docs/results/steps_cpu.json')}\n\n"
        + table(
            ["steps", "t_t ms", "c", "t_v/t_t", "baseline tok/s", "speculative tok/s", "speedup", "same tokens"], rows
        )
    )


def stability_table() -> str:
    d = load("docs/results/race_stability.json")
    s = d["setting"]
    rows = []
    for way in (k for k in d if k != "setting"):
        for estimator in ("sum", "steady"):
            runs = d[way][estimator]["runs"]
            rows.append([way, estimator, f"{min(runs):.2f}–{max(runs):.2f}×", f"{d[way]['jitter']['mean']:.2f}"])
    return (
        f"**How steady the race's number is** ({s['preset']}, {s['method']} γ {s['gamma']}, {s['tokens']} tokens, "
        "the same race 5 times each way; *sum*: the step clocks summed, *steady*: trimmed step means; jitter: the "
        f"target step's 90th percentile over its median; {s.get('measured', '')}). "
        f"{source('docs/results/race_stability.json')}\n\n" + table(["where", "estimator", "speedups", "jitter"], rows)
    )


def cost_table() -> str:
    d = load("docs/results/cost_model.json")
    rows = []
    for p in d["predictions"]:
        for kind, k in p["kinds"].items():
            speedups = " / ".join(f"{r['speedup']:.2f}×" for r in k["by_alpha"].values())
            rows.append([p["preset"], kind, f"{k['t_t_ms']:.2f}", f"{k['c']:.2f}", speedups])
    alphas = " / ".join(next(iter(d["predictions"]))["kinds"]["eager"]["by_alpha"])
    return (
        f"**PREDICTED on an H200, not measured** (no GPU was lent to this work): each GPU preset's steps from its "
        f"architecture with random weights (ops and host time measured on this CPU, kernels as torch.compile "
        f"fuses them, bytes from the config, stated constants: `measure/launches.py`), {d['measured']}. "
        f"{source('docs/results/cost_model.json')}\n\n"
        + table(["preset", "steps", "t_t ms", "c", f"speedup at α {alphas}"], rows)
    )


def headline() -> str:
    """The README's block: one figure per preset, and where the rest is."""
    start = load("assets/defaults/smollm2-135m.json")["ranked"][0]
    cost = {p["preset"]: p for p in load("docs/results/cost_model.json")["predictions"]}
    lines = [
        "| preset | figure | from |",
        "|---|---|---|",
        f"| `smollm2-135m` (CPU) | **{start['speedup']:.2f}×** its baseline with {start['method']}, γ {start['gamma']} "
        "(measured, the race's start) | `assets/defaults/smollm2-135m.json` |",
    ]
    for name, p in cost.items():
        nf4 = PRESETS[name].target_options.quantization == "4bit"  # bitsandbytes' layers are not captured
        best = p["kinds"]["eager" if nf4 else "captured"]["by_alpha"]
        lines.append(
            f"| `{name}` (GPU) | {min(r['speedup'] for r in best.values()):.2f}–"
            f"{max(r['speedup'] for r in best.values()):.2f}× with {'eager' if nf4 else 'compiled'} steps at α "
            f"{' to '.join(list(best)[::2])} "
            "(**predicted**, no GPU was lent) | `docs/results/cost_model.json` |"
        )
    return (
        "\n".join(lines) + "\n\nEvery table, its command, machine and date: [docs/benchmarks.md](docs/benchmarks.md)."
    )


def benchmarks_page() -> str:
    parts = [
        "# Benchmarks",
        "Written by `python -m specdemo report` from the results files (each table names the command that wrote "
        "its file); do not edit by hand. Speedups are wall clock around whole generations on both sides, the "
        "same weights and kernels on both; the machines are shared, so each table says how noisy it is or was run "
        "interleaved.",
        start_table(),
        tasks_table(),
        stability_table(),
        suffix_table(),
        steps_table(),
        cost_table(),
    ]
    return "\n\n".join(parts) + "\n"


def readme_with_results(readme: str) -> str:
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{headline()}\n{END}{tail}"


def write() -> list[Path]:
    readme, page = ROOT / "README.md", ROOT / "docs" / "benchmarks.md"
    readme.write_text(readme_with_results(readme.read_text(encoding="utf-8")), encoding="utf-8")
    page.write_text(benchmarks_page(), encoding="utf-8")
    return [readme, page]
