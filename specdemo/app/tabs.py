"""The Benchmark, Theory and Losslessness tabs."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from specdemo.app import model_thread
from specdemo.app.settings import (
    KEEP,
    Settings,
    decoder,
    friendly,
    own_method,
    prepare,
)
from specdemo.decoding import auto, methods, suffix
from specdemo.decoding.methods import DEFAULT_SIDES
from specdemo.decoding.steps import whole_numbers
from specdemo.measure.bench import default_engines, run_bench, table_cells
from specdemo.measure.lossless import lossless_progress
from specdemo.measure.metrics import acceptance_rate, mean_accepted_tokens
from specdemo.models import PRESETS, start_settings
from specdemo.view import trace as traces
from specdemo.view.plots import (
    gamma_sweep_figure,
    lossless_figure,
    tasks_figure,
    theory_figure,
    zoo_figure,
)
from specdemo.view.render import table_html


def benchmark(s: Settings, gammas: str = "1,2,3,4,6,8", repeats: int = 1, with_transformers: bool = False) -> tuple:
    """The γ sweep on this prompt: (figure, HTML table)."""
    try:
        gamma_list = whole_numbers(gammas, "γ values")
        s.method_label = methods.DRAFT.label
        prep = prepare(s)
        # without transformers' rows: the draft model's own engines (its chain and its tree)
        own = (m.engine for m in methods.REGISTRY.values() if m.bench and m.draft_model and not m.mixed)
        engines = default_engines() if with_transformers else ("specdemo-baseline", "specdemo-speculative", *own)
        result = model_thread.call(
            run_bench,
            prep.pair,
            [prep.ids],
            gamma_list,
            int(s.max_new_tokens),
            int(repeats),
            progress=True,
            engines=engines,
        )
        headers, rows = table_cells(result)
        t_t = next(r["t_target"] for r in result["rows"] if r["engine"] == "specdemo-baseline")
        note = (
            f"× baseline: tokens/s over specdemo's own baseline, same weights, wall clock. "
            f"same tokens: the prompts on which the engine wrote exactly the baseline's tokens. "
            f"t_t (one target step) = {t_t * 1e3:.1f} ms on {result['device']}."
        )
        return gamma_sweep_figure(result["rows"]), table_html(headers, rows, note)
    except Exception as error:
        return None, f"<p>⚠ {friendly(error)}</p>"


def measured_point(trace: dict | None) -> dict | None:
    """α, γ, c, τ and speedup of the last run, for the theory tab."""
    method = methods.REGISTRY.get(trace["method"]) if trace else None
    if not method or not method.lossless or method.sides != DEFAULT_SIDES or not trace["speculative"]:
        return None  # (not speculative decoding, or one engine against another: no target-alone step)
    state, _, settings = traces.from_trace(trace)
    spec, base = state.speculative, state.baseline
    drafted = sum(len(s.drafted) for s in spec[1:])
    t_d = sum(s.draft_s for s in spec[1:]) / drafted if drafted else 0.0
    t_t = sorted(s.verify_s for s in base[1:])[len(base[1:]) // 2] if len(base) > 1 else 0.0
    return {
        "method": trace["method"],
        "alpha": acceptance_rate(spec),
        "gamma": int(settings.get("gamma", 4)),
        "c": t_d / t_t if t_t else 0.0,
        "tau": mean_accepted_tokens(spec),
        "speedup": state.summary()["speedup"],
    }


def theory(alpha, gamma, c, trace: dict | None):
    return theory_figure(float(alpha), int(gamma), float(c), measured_point(trace))


def theory_from_last(trace: dict | None) -> tuple:
    """(α, γ, c, note) of the last run for the theory sliders."""
    point = measured_point(trace)
    if not point:
        return KEEP, KEEP, KEEP, "⚠ run a speculative method on the Race tab once first"
    return round(point["alpha"], 3), point["gamma"], round(min(point["c"], 1.0), 3), "the × is the last run"


def lossless_stream(s: Settings, samples: int = 100, k: int = 2, temperature: float = 1.0, progress=None):
    """The χ² check as it goes: (figure, markdown) every few samples, with the running p-value;
    the last one is the verdict. ``progress(fraction, desc=...)`` if given."""
    try:
        own_method(s, "the losslessness check")
        s.temperature = temperature
        prep = prepare(s)
        decode = decoder(prep.pair.tokenizer)
        checks = lossless_progress(prep.pair, prep.ids, prep.config, int(samples), int(k))
        last = None
        while (check := model_thread.call(next, checks, None)) is not None:  # each step on the model thread
            last = check
            if progress:
                progress(check.samples / int(samples), desc=f"sampling: {check.samples} of {samples} per side")
            if check.samples < int(samples):
                yield (
                    lossless_figure(check, decode),
                    f"sampling… {check.samples} of {samples} per side, χ² p-value so far **{check.p_value:.3f}**",
                )
        verdict = (
            "no evidence of a difference" if last.p_value > 0.01 else "the distributions differ: that would be a bug"
        )
        yield (
            lossless_figure(last, decode),
            f"χ² p-value **{last.p_value:.3f}** ({samples} samples per side): {verdict}.",
        )
    except Exception as error:
        yield None, f"⚠ {friendly(error)}"


# ---------------------------------------------------------------- suffix decoding's memory


def suffix_memory() -> str:
    """What suffix decoding remembers in this process (shared by every session of the app)."""
    stats = [store.stats() for store in suffix.shared_stores()]
    count, tokens = sum(s["answers"] for s in stats), sum(s["tokens"] for s in stats)
    answers = f"{count} earlier answer" + ("" if count == 1 else "s")
    return (
        f"Suffix decoding remembers **{answers}** ({tokens} tokens, the last "
        f"{suffix.MAX_ANSWERS} per tokenizer at most), shared by everyone using this server: it proposes from them "
        "and from the prompt, so a question asked again is answered faster. Hover a drafted token to see where "
        "its proposal was seen. *auto* remembers, the same way, how often each source's drafts were kept; "
        "forgetting the answers forgets that too."
    )


def forget_answers() -> str:
    for store in suffix.shared_stores():
        store.reset()
    auto.forget()  # auto's counts of what the store's proposals kept go with them
    return suffix_memory()


def gamma_for_method(method_label: str, preset: str):
    """A method's own best γ when it is picked: the measured one for the preset's start method; the
    preset's for a draft model; the model-free methods propose for free, so longer (suffix
    decoding's length follows its match below γ)."""
    name = methods.from_label(method_label)
    start = start_settings(PRESETS[preset]) if preset in PRESETS else None
    if start and name == start.method:
        return start.gamma
    own = methods.REGISTRY[name].gamma if name in methods.REGISTRY else None
    if own:  # the hybrid's draft model keeps its own γ
        return own
    return PRESETS[preset].gamma if preset in PRESETS else KEEP


# ---------------------------------------------------------------- which method when?

STORED_TASKS = Path(__file__).resolve().parents[2] / "assets" / "tasks"


def methods_table_html(result: dict) -> str:
    from specdemo.measure.tasks import why_sentence

    headers = ["task", "best", "× baseline", "why"]
    rows = []
    for task, best in result["best"].items():
        speed = next(r["speedup"] for r in result["rows"] if r["task"] == task and r["method"] == best)
        rows.append([task, best, f"{speed:.2f}", why_sentence(task, result)])
    note = f"{result.get('preset', '')}: ≤ {result['max_new_tokens']} new tokens, greedy, against the same baseline."
    gammas = ", ".join(f"{m} {g}" for m, g in result.get("gammas", {}).items())
    measured = f"γ per method: {gammas}. {result.get('measured', '')}"
    return table_html(headers, rows, note, css_class="tasks", provenance=measured)


def methods_view(preset: str, trace: dict | None = None) -> tuple:
    """The stored methods × tasks table of this preset (measured on the machine it names): the heat
    map, the table with its why sentences, and the drafter zoo (α vs c, the last race a star)."""
    path = STORED_TASKS / f"{preset}.json"
    if not path.exists():
        return None, f"<p>No stored table for {escape(preset)}: press <b>Re-measure</b> (a few minutes).</p>", None
    result = json.loads(path.read_text(encoding="utf-8"))
    current = measured_point(trace) if trace and runs_here(trace.get("method")) else None
    return tasks_figure(result), methods_table_html(result), zoo_figure(result, current=current)


def runs_here(name: str | None) -> bool:
    """A race of this method ran in this process (specdemo's engine), so its clocks can be read."""
    return name in methods.REGISTRY and methods.get(name).on_engine


def remeasured_methods() -> list:
    """What "Re-measure" times: the chains that draft from one source (the draft model, the prompt,
    earlier answers) and run here; a few minutes in all."""
    return [m for m in methods.REGISTRY.values() if m.on_engine and not m.tree and not m.mixed]


def methods_remeasure(s: Settings, max_new_tokens: int = 48, progress=None) -> tuple:
    """Every task of the suite with this pair's draft, prompt lookup and suffix decoding, on this machine now."""
    from specdemo.measure.tasks import encode_tasks, load_tasks, run_tasks

    try:
        s.method_label = methods.DRAFT.label
        prep = prepare(s)
        pair = prep.pair
        tasks = load_tasks()
        ids = encode_tasks(pair.tokenizer, tasks, bool(s.chat_template))
        drafters = {
            m.name: (pair.draft if m.draft_model else None, m.gamma or prep.config.gamma, m.name)
            for m in remeasured_methods()
            if methods.takes(m, pair.draft)
        }
        result = model_thread.call(run_tasks, pair.target, drafters, ids, int(max_new_tokens), pair.eos, progress=True)
        result |= {"preset": s.target_id, "gammas": {m: g for m, (_, g, _) in drafters.items()}, "measured": "now"}
        return tasks_figure(result), methods_table_html(result), zoo_figure(result)
    except Exception as error:
        return None, f"<p>⚠ {friendly(error)}</p>", None
