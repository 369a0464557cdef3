"""The result tables of README.md and docs/ (benchmarks.md, and the measured decisions in design.md and
training.md), written from the results files alone.

Each result lives in one JSON file, written by the command that measures it (``SOURCES``); this module
renders them as markdown, so no table is ever typed by hand. ``python -m specdemo report`` rewrites the
README's results block and docs/benchmarks.md; ``--run`` first measures every file again on this machine.
"""

from __future__ import annotations

import json
from pathlib import Path

from specdemo.decoding import methods
from specdemo.measure import lesson
from specdemo.measure.tasks import auto_targets
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
    "docs/results/bench_bundled.json": (
        "python -m specdemo bench --preset bundled-tinystories --gammas 4 --max-new-tokens 64 --repeats 3 "
        "--engines specdemo-baseline,specdemo-speculative --out docs/results/bench_bundled.json"
    ),
    lesson.AUTO_TABLE: (
        "python -m specdemo bench --preset smollm2-135m --tasks --split held-out "
        f"--methods draft,prompt-lookup,suffix,hybrid,auto --max-new-tokens 48 --repeats 3 --out {lesson.AUTO_TABLE}"
    ),
    "docs/results/suffix_index.json": "python -m tools.suffix_index_compare --out docs/results/suffix_index.json",
    "docs/results/steps_cpu.json": "python -m tools.steps_compare --out docs/results/steps_cpu.json",
    "docs/results/steps_cpu_plain.json": (
        "python -m tools.steps_compare --plain --steps eager,static,aot --out docs/results/steps_cpu_plain.json"
    ),
    "docs/results/race_stability.json": (
        "python -m tools.race_stability --runs 5 --tokens 96 --updates 0.125/1,0.5/2 "
        "--out docs/results/race_stability.json"
    ),
    "docs/results/cost_model.json": "python -m specdemo profile --cost-model --out docs/results/cost_model.json",
    "docs/results/space_start.json": "python -m tools.space_start --out docs/results/space_start.json",
    "docs/results/room_load.json": "python -m tools.room_load --attendees 10,20,30 --out docs/results/room_load.json",
    "docs/results/room_scenes.json": (
        "python -m tools.room_load --attendees 30 --scenes colours,rewrite,twice,turn-off,naive --ways on "
        "--out docs/results/room_scenes.json"
    ),
    "docs/results/laptop_install.json": "python -m tools.laptop_install --out docs/results/laptop_install.json",
}


# results files whose figures were copied from a command's printed table: rendered like the rest, but not
# re-measured by ``--run`` (they need vLLM's servers)
RECORDED = {
    "docs/results/vllm_bench.json": (
        "python -m specdemo serve-vllm --preset smollm2-135m --speculative ngram` then `python -m specdemo bench "
        "--preset smollm2-135m --prompts FILE --gammas 4 --max-new-tokens 96 --repeats 1 --engines "
        "specdemo-baseline,specdemo-prompt-lookup,vllm-baseline,vllm-speculative"
    ),
}


def load(name: str) -> dict:
    return json.loads((ROOT / name).read_text(encoding="utf-8"))


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def source(name: str) -> str:
    return f"`{(SOURCES | RECORDED)[name]}` → `{name}`"


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
        f"{d['max_new_tokens']} tokens{passes(d.get('repeats', 1))}, best in bold; `chat-again`: the chat prompts "
        f"asked a second time in the same process). {where}. {source('assets/tasks/smollm2-135m.json')}\n\n"
        + table(["task", *methods], rows)
    )


def passes(repeats: int) -> str:
    return f", each cell the median of {repeats} passes" if repeats > 1 else ", one pass"


def auto_table() -> str:
    """auto against the fixed methods on prompts none of them was chosen on (the tasks' held-out half)."""
    d = lesson.auto_stored()
    t = auto_targets(d)
    rows = [[r["task"], f"{r['auto']:.2f}×", f"{r['best_fixed']} {r['best']:.2f}×", f"{r['of_best']:.2f}"]
            for r in t["tasks"]]  # fmt: skip
    rows.append(["**mean**", f"**{t['means'][methods.AUTO.name]:.2f}×**",
                 f"{t['best_fixed']} {t['means'][t['best_fixed']]:.2f}× (the best single fixed method)",
                 f"{t['over_fixed']:.2f}"])  # fmt: skip
    met = "; ".join(f"{name}: {'met' if ok else '**missed**'}" for name, ok in t["met"].items())
    return (
        f"**auto against the fixed methods, SmolLM2-135M on a CPU**, on the {d.get('split', 'all')} half of each "
        "task's prompts (auto's constants were set on the tune half, its draft catch-up term on this half: see "
        f"design.md; the fixed methods run at their own γ), ≤ {d['max_new_tokens']} tokens, greedy, interleaved "
        "with the baseline prompt by prompt"
        f"{passes(d.get('repeats', 1))}; "
        f"{d['machine']}. Targets: {met}. {source(lesson.AUTO_TABLE)}\n\n"
        + table(["task", "auto", "best fixed method there", "auto ÷ best"], rows)
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


def steps_table(name: str = "docs/results/steps_cpu.json") -> str:
    d = load(name)
    rows = [
        [kind, f"{k['t_t_ms']:.1f}", f"{k['c']:.2f}", f"{k['tv_tt']:.2f}", f"{k['baseline_tokens_per_second']:.1f}",
         f"{k['speculative_tokens_per_second']:.1f}", f"{k['speedup']:.2f}×", "yes" if k["same_tokens"] else "**no**"]
        for kind, k in d["kinds"].items()
    ]  # fmt: skip
    weights = d.get("weights", "the preset's")
    plain = weights.startswith("plain")
    kinds = ", ".join(d["kinds"])
    why = (
        "The preset's compact kernel is called from Python, which a package compiled ahead of time cannot do, so "
        "this run uses plain fp32 weights and the draft's whole vocabulary on every kind. Ahead of time both sides' "
        "steps are shorter and the speedup, their ratio, barely moves: on a CPU the draft and the verify gain alike. "
        "(Timed in one process with torch.compile's steps as well, the aot baseline ran slower than alone: run the "
        "two apart.)"
        if plain
        else "Compiled steps are not faster here, so the CPU default stays eager."
    )
    return (
        f"**Kinds of step on a CPU: {kinds}** ({d['preset']}, weights: {weights}, "
        f"draft model γ {d['gamma']}, {d['prompts']} prompts, ≤ {d['max_new_tokens']} tokens, one "
        f"interleaved run; {d['machine']}). {why} {source(name)}\n\n"
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
        f"fuses them, bytes from the config, stated constants: `measure/launches.py`), {d['measured']}. *captured*: "
        f"CUDA graphs (compiled steps on a dedicated GPU); *aot*: the same kernels compiled ahead of time and launched "
        f"without a graph (ZeroGPU); NF4's rows other than eager are what they would be if bitsandbytes' layers "
        f"could be captured, which they cannot. "
        f"{source('docs/results/cost_model.json')}\n\n"
        + table(["preset", "steps", "t_t ms", "c", f"speedup at α {alphas}"], rows)
    )


def space_table() -> str:
    d = load("docs/results/space_start.json")
    c, bandwidth = d["cpu_basic"], d["bandwidth_mb_s"]
    download = f"{c['download_mb']:.0f} MB: {c['download_s_at_bandwidth']:.0f} s ({c['download_s_local_hub']:.1f} s "
    then = f"convert {c['convert_s']:.0f} s, load {c['load_s']:.0f} s (measured)"
    rows = [["CPU basic (2 vCPU)", c["preset"], download + "from the local hub)", then,
             f"{c['peak_memory_mb']:,} MB peak (measured)"]]  # fmt: skip
    for g in d["gpu"]:
        rows.append([
            g["space"], g["preset"], f"{g['download_mb']:,} MB: {g['download_s_at_bandwidth']:,} s", "",
            f"{g['weights_mb']:,} MB of weights (computed)",
        ])  # fmt: skip
    return (
        f"**What each Space does at start** (the hub on 127.0.0.1 served the real files to the real client; a "
        f"download's time over a network is its bytes at a stated {bandwidth:.0f} MB/s, not measured; the GPU rows' "
        f"bytes are computed from the architectures, none measured on a GPU; {d['measured']}). "
        f"{source('docs/results/space_start.json')}\n\n"
        + table(["Space", "start preset", f"download at {bandwidth:.0f} MB/s", "then", "memory"], rows)
    )


def room_table(name: str = "docs/results/room_load.json") -> str:
    d = load(name)
    scenes = any("scene" in r for r in d["rooms"])
    rows = []
    for r in d["rooms"]:
        first = f"{r['first_token_p50_s']} / {r['first_token_p95_s']} s"
        done = f"{r['result_p50_s']} / {r['result_p95_s']} / {r['result_max_s']} s"
        failed = r["failed"] + r["abandoned"]
        row = [r["attendees"], r["recordings"], first, done, r["recorded"], r["refused"], failed, r["wrong"]]
        rows.append([r["scene"] + (", Run again" if r.get("again") else ""), *row] if scenes else row)
    header = ["attendees", "recordings", "first token p50 / p95", "result p50 / p95 / max", "shown recorded"]
    header = ["scene", *header] if scenes else header
    header += ["refused", "failed", "wrong"]
    what = (
        "each room the Lesson's scene, with the settings its button sets, the room its first on that server (the "
        "first attendee races live, the rest wait for it: no facilitator ran it first)"
        if scenes
        else f"the page's defaults: {d['method']}, γ {d['gamma']}, {d['max_new_tokens']} tokens; the attendees "
        f"press Run on the preset's first {d['examples']} example prompt(s)"
    )
    follow = "" if scenes else (
        "; the rooms follow one another on the same two servers, so from the second on the recording is there "
        "already, as when the facilitator runs the example first"
    )  # fmt: skip
    return (
        f"**A workshop room on one Space** ({d['preset']}, {what}; within {d['spread_s']:.0f} s, each a session of "
        f"its own streaming the live race{follow}; concurrency {d['concurrency']}, queue {d['max_queue']}; "
        f"*recordings on*: a repeat of a finished greedy race is shown from its recording, *off*: every Run races "
        f"live; {d['measured']}). {source(name)}\n\n" + table(header, rows)
    )


def install_table() -> str:
    d = load("docs/results/laptop_install.json")
    rows = [[f"`{step['command']}`", f"{step['seconds']:.0f} s"] for step in d["steps"]]
    converted = f"{d['convert_s']:.0f} s, {d['converted_mb']:,} MB"
    rows += [["the venv on disk", f"{d['venv_mb']:,} MB"], ["first launch: SmolLM2's GGUF converted, once", converted]]
    return (
        f"**A workshop laptop's install** (the README's first command in a fresh venv, pip's cache {d['pip_cache']}, "
        f"Python {d['python']}; this machine's network is a data centre's: over a room's wifi the same bytes take "
        f"longer; {d['machine']}). {source('docs/results/laptop_install.json')}\n\n" + table(["step", "took"], rows)
    )


def lesson_table() -> str:
    """The Lesson's scenes as the app sets them up, from the same stored files (``measure/lesson.py``)."""
    stored = lesson.stored()
    rows = []
    for n, s in enumerate(lesson.SCENES, 1):
        race = lesson.race_settings(s, stored)
        if race is None:
            what = "no race: a CPU's measured step costs beside the GPU's predicted"
        else:
            method = methods.get(race["method"])
            gamma = f", γ {race['gamma']}" if method.on_engine else ""  # (the hand-off has no γ)
            what = f"{method.short}{gamma}, {race['max_new_tokens']} tokens on “{race['prompt'].splitlines()[0][:48]}”"
        rows.append([n, s.title, s.tab, what, lesson.claim(s, stored).split(";")[0], s.question])
    return (
        f"**The Lesson's scenes** (written by `python -m specdemo report` from the files they read: "
        f"{', '.join(f'`{f}`' for f in lesson.SOURCES)}; {lesson.measured_where(stored)})\n\n"
        + table(["#", "scene", "opens", "races", "the stored figure it quotes", "question"], rows)
    )


def decisions_table(section: str) -> str:
    """The choices a measurement made (``docs/results/decisions.json``), for docs/design.md or docs/training.md."""
    d = load("docs/results/decisions.json")
    rows = [[r["where"], r["choice"], "kept" if r["kept"] else "not kept", r["measured"], f"`{r['command']}`"]
            for r in d[section]]  # fmt: skip
    return f"From `docs/results/decisions.json` ({d['note']}).\n\n" + table(
        ["where", "choice", "", "measured", "command"], rows
    )


def with_block(text: str, block: str, start: str, end: str) -> str:
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block}\n{end}{tail}"


def bundled_speculative() -> dict:
    d = load("docs/results/bench_bundled.json")
    return next(r for r in d["rows"] if r["engine"] == "specdemo-speculative")


def bundled_table() -> str:
    d = load("docs/results/bench_bundled.json")
    rows = [[r["engine"], r["gamma"] or "–", f"{r['tokens_per_second']:.1f}", f"{r['speedup_over_baseline']:.2f}×",
             f"{r['mean_accepted_tokens']:.2f}" if r["mean_accepted_tokens"] else "–", r["same_tokens"]]
            for r in d["rows"]]  # fmt: skip
    return (
        f"**The bundled TinyStories pair on a CPU** (the 20 held-out story openings of its prompts file, ≤ 64 "
        f"tokens, greedy, median of 3 repeats, the engines in turns; {d['machine']}). "
        f"{source('docs/results/bench_bundled.json')}\n\n"
        + table(["engine", "γ", "tokens/s", "× baseline", "τ", "same tokens"], rows)
    )


def vllm_table() -> str:
    d = load("docs/results/vllm_bench.json")
    rows = [
        [r["prompts"], f"{r['specdemo_baseline']:.1f}", f"{r['specdemo_prompt_lookup']:.1f} "
         f"({r['specdemo_prompt_lookup'] / r['specdemo_baseline']:.2f}×)", f"{r['vllm_baseline']:.1f}",
         f"{r['vllm_ngram']:.1f} ({r['vllm_ngram'] / r['vllm_baseline']:.2f}× its baseline)", r["vllm_acceptance"]]
        for r in d["rows"]
    ]  # fmt: skip
    return (
        f"**vLLM's CPU build against specdemo, SmolLM2-135M** (tokens/s; {d['setting']}; {d['machine']}, "
        f"{d['measured']}). {source('docs/results/vllm_bench.json')}\n\n"
        + table(
            [
                "prompts",
                "specdemo baseline",
                "specdemo prompt lookup",
                "vLLM baseline",
                "vLLM n-gram",
                "vLLM acceptance; α by position; tokens per step",
            ],
            rows,
        )  # fmt: skip
    )


def held_out_start() -> str:
    """The race's start, chosen on the preset's example prompts, measured on prompts it was not chosen on: the
    tasks' held-out half (auto's table), with auto's figure beside it."""
    start, d = load("assets/defaults/smollm2-135m.json"), lesson.auto_stored()
    t = auto_targets(d)
    means, gamma = t["means"], d["gammas"].get(start["method"])
    if start["method"] not in means or gamma != start["gamma"]:  # the table raced another start: no figure of it
        raise ValueError(f"{lesson.AUTO_TABLE} has no row of the start, {start['method']} γ {start['gamma']}")
    return (
        f"**{means[start['method']]:.2f}×** its baseline with {start['method']}, γ {start['gamma']}, the race's start "
        f"(chosen on the preset's {start['prompts']} example prompts, there {start['ranked'][0]['speedup']:.2f}×; this "
        f"figure: the mean over {len(t['shared'])} tasks of their {d['split']} prompts, measured); auto "
        f"{means[methods.AUTO.name]:.2f}× on the same prompts"
    )


def headline() -> str:
    """The README's block: one figure per preset, and where the rest is."""
    bundled = bundled_speculative()
    cost = {p["preset"]: p for p in load("docs/results/cost_model.json")["predictions"]}
    lines = [
        "| preset | figure | from |",
        "|---|---|---|",
        f"| `smollm2-135m` (CPU) | {held_out_start()} | `{lesson.AUTO_TABLE}` |",
        f"| `bundled-tinystories` (CPU) | **{bundled['speedup_over_baseline']:.2f}×** its baseline with the draft "
        f"model, γ {bundled['gamma']} (measured) | `docs/results/bench_bundled.json` |",
    ]

    def span(kind: dict) -> str:
        speedups = [r["speedup"] for r in kind["by_alpha"].values()]
        return f"{min(speedups):.2f}–{max(speedups):.2f}×"

    for name, p in cost.items():
        nf4 = PRESETS[name].target_options.quantization == "4bit"  # bitsandbytes' layers are not captured
        kinds = p["kinds"]
        figure = f"{span(kinds['eager'])} with eager steps" if nf4 else f"{span(kinds['captured'])} with compiled steps"
        if not nf4 and "aot" in kinds:  # what ZeroGPU runs: compiled ahead of time, launched without a graph
            figure += f", {span(kinds['aot'])} ahead of time (ZeroGPU)"
        lines.append(
            f"| `{name}` (GPU) | {figure} at α {' to '.join(list(kinds['eager']['by_alpha'])[::2])} "
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
        bundled_table(),
        tasks_table(),
        auto_table(),
        stability_table(),
        suffix_table(),
        steps_table(),
        steps_table("docs/results/steps_cpu_plain.json"),
        vllm_table(),
        cost_table(),
        space_table(),
        room_table(),
        room_table("docs/results/room_scenes.json"),
        install_table(),
    ]
    return "\n\n".join(parts) + "\n"


def readme_with_results(readme: str) -> str:
    return with_block(readme, headline(), START, END)


DECISIONS = ("<!-- decisions:start -->", "<!-- decisions:end -->")
DOCS_WITH_DECISIONS = {"docs/design.md": "design", "docs/training.md": "training"}


def doc_with_decisions(name: str, text: str) -> str:
    return with_block(text, decisions_table(DOCS_WITH_DECISIONS[name]), *DECISIONS)


ROOM = ("<!-- room:start -->", "<!-- room:end -->")
LESSON = ("<!-- lesson:start -->", "<!-- lesson:end -->")
INSTALL = ("<!-- install:start -->", "<!-- install:end -->")
ROOM_SCENES = ("<!-- room-scenes:start -->", "<!-- room-scenes:end -->")


def write() -> list[Path]:
    readme, page, workshop = ROOT / "README.md", ROOT / "docs" / "benchmarks.md", ROOT / "docs" / "workshop.md"
    text = with_block(workshop.read_text(encoding="utf-8"), room_table(), *ROOM)
    text = with_block(with_block(text, lesson_table(), *LESSON), install_table(), *INSTALL)
    text = with_block(text, room_table("docs/results/room_scenes.json"), *ROOM_SCENES)
    workshop.write_text(text, encoding="utf-8")
    readme.write_text(readme_with_results(readme.read_text(encoding="utf-8")), encoding="utf-8")
    page.write_text(benchmarks_page(), encoding="utf-8")
    for name in DOCS_WITH_DECISIONS:
        doc = ROOT / name
        doc.write_text(doc_with_decisions(name, doc.read_text(encoding="utf-8")), encoding="utf-8")
    return [readme, page, workshop, *(ROOT / name for name in DOCS_WITH_DECISIONS)]
