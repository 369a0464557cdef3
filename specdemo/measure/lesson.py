"""The workshop's lesson: eight scenes, each one race (or one table) that teaches one thing, in the order a room
takes them (docs/workshop.md's plan follows them).

What a scene races and what it claims are read from the stored measurements, never typed: its method is the
stored best for its task (a win) or the model-free method that did worst there (a loss), its γ and length are
those the table was measured with, and its figure is the table's. ``python -m specdemo report --run`` measures
the files again and the scenes follow; tests/test_lesson.py checks that a scene shown as a win is a stored win.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specdemo.decoding import methods
from specdemo.measure.tasks import REPEATED, auto_targets, load_tasks

ROOT = Path(__file__).resolve().parents[2]
SEED_PROMPT = "What is the purpose of life?"  # the seed script's prompt: the lesson starts where the project did
PRESET = "smollm2-135m"  # the pair whose methods × tasks table the scenes are read from


@dataclass(frozen=True)
class Scene:
    key: str
    title: str
    look: str  # what to look at, two short sentences
    question: str  # one question for the attendee to answer
    # "win" / "loss": its task's stored speedup; "refusal": its stored acceptance; "difference": not lossless;
    # "theory": no race, the step costs measured here beside the GPU's predicted; "choice": auto's stored table
    shows: str
    task: str | None = None  # the methods × tasks row its method and figure come from
    method: str | None = None  # a fixed method (else chosen from the task's stored row by ``shows``)
    prompt: str | None = None  # else the task's first prompt
    tab: str = "Race"  # the title of the tab it opens
    asked_twice: bool = False  # the attendee presses Run a second time (the card says so)


SCENES = (
    Scene(
        "colours",
        "The race, colour by colour",
        "Green: drafted and kept; red, struck: refused; yellow: the target's own token at the refusal; blue: the "
        "bonus when every draft was kept. Both panes end with the same text.",
        "Which colour never appears in the left pane, and why can the right pane still not write anything else?",
        "win",
        task="chat",
        method=methods.DRAFT.name,
        prompt=SEED_PROMPT,
    ),
    Scene(
        "rewrite",
        "A rewrite: copying wins",
        "Prompt lookup drafts by copying the prompt's next words wherever the answer repeats them: long green runs, "
        "and no draft model to pay for.",
        "Where in the answer do the green runs stop, and what was the target doing there?",
        "win",
        task="rewrite",
    ),
    Scene(
        "twice",
        "The same question, asked twice",
        "Suffix decoding remembers every answer this server gave. The first race drafts little; press Run again: "
        "the second drafts the whole earlier answer.",
        "Why is the second race faster, and why are its tokens still exactly the first's?",
        "win",
        task=REPEATED,
        asked_twice=True,
    ),
    Scene(
        "turn-off",
        "Open writing: when to turn it off",
        "A new story has nothing to copy: prompt lookup's few drafts are mostly refused, and each refused draft "
        "still costs a wider target step.",
        "What would you measure before turning a method on for your users?",
        "loss",
        task="story",
    ),
    Scene(
        "naive",
        "The naive hand-off: not speculative decoding",
        "The seed script's shortcut: the draft writes the first half (purple), nobody checks it, the target goes on. "
        "Dashed red underlines mark where its text differs from the target's.",
        "Which rule of speculative decoding does the hand-off skip, and what does that cost?",
        "difference",
        method=methods.NAIVE.name,
        prompt=SEED_PROMPT,
    ),
    Scene(
        "rejection",
        "One rejection, up close",
        "The step inspector opens at the first refusal: q and p of the drafted token, the test min(1, p/q), and the "
        "target's own token that replaced it.",
        "In greedy mode, why is the correction always the target's most likely token?",
        "refusal",
        task="chat",
        method=methods.DRAFT.name,
        prompt=SEED_PROMPT,
        tab="Step inspector",
    ),
    Scene(
        "gpu",
        "Why a GPU wins more",
        "On a CPU checking γ+1 tokens costs more than one token (t_v/t_t above 1) and the draft is not free (c). "
        "On a GPU a step is mostly reading the weights: t_v/t_t is 1, and a large target makes c small.",
        "The 3B pair is predicted to win less than the 14B on the same GPU: which term says why?",
        "theory",
        tab="Theory",
    ),
    Scene(
        "choose",
        "Let it choose",
        "auto picks each step where to draft from (nothing, the prompt, the suffix store, the draft model) and how "
        "many tokens, from what a step costs on this machine and what each source has kept. The chips under the "
        "right pane are its choices; hover one for its reason.",
        "Where did it choose not to draft at all, and what does the reason say drafting would have cost there?",
        "choice",
        method=methods.AUTO.name,
        prompt=SEED_PROMPT,
    ),
)


def scene(key: str) -> Scene:
    return next(s for s in SCENES if s.key == key)


def stored(preset: str = PRESET) -> dict:
    """The preset's methods × tasks table (``python -m specdemo bench --tasks``)."""
    return json.loads((ROOT / "assets" / "tasks" / f"{preset}.json").read_text(encoding="utf-8"))


def stored_row(table: dict, task: str, method: str) -> dict | None:
    return next((r for r in table["rows"] if r["task"] == task and r["method"] == method), None)


def chosen_method(s: Scene, table: dict) -> str | None:
    """A fixed method, else the stored best of the task (a win) or its worst model-free method (a loss)."""
    if s.method or s.task is None:
        return s.method
    if s.shows == "win":
        return table["best"][s.task]
    free = [r for r in table["rows"] if r["task"] == s.task and r["method"] in methods.REGISTRY
            and not methods.get(r["method"]).draft_model]  # fmt: skip
    return min(free, key=lambda r: r["speedup"])["method"]


def prompts_of(task: str) -> list:
    """The prompts a task's row was measured on (asked again: the chat prompts, a second time)."""
    name = "chat" if task == REPEATED else task
    return load_tasks(names=[name])[name]


def prompt_of(s: Scene) -> str:
    """The scene's prompt: its own, else its task's first (the prompts the table was measured on)."""
    if s.prompt:
        return s.prompt
    first = prompts_of(s.task)[0]
    return first if isinstance(first, str) else first[-1]["content"]


AUTO_TABLE = "docs/results/auto_tasks.json"  # auto against the fixed methods, on the tasks' held-out prompts


def auto_stored() -> dict:
    """auto's table (``python -m specdemo bench --tasks --split held-out``, its command in ``report.SOURCES``)."""
    return json.loads((ROOT / AUTO_TABLE).read_text(encoding="utf-8"))


def race_settings(s: Scene, table: dict) -> dict | None:
    """{method, gamma, max_new_tokens, prompt} of the scene's race, as the table measured it (None: no race)."""
    method = chosen_method(s, table)
    if method is None:
        return None
    gamma = table["gammas"].get(method) or methods.get(method).gamma or table["gammas"][methods.DRAFT.name]
    return {"method": method, "gamma": gamma, "max_new_tokens": table["max_new_tokens"], "prompt": prompt_of(s)}


def measured_where(table: dict) -> str:
    return table["measured"].split(" with `")[0].rstrip(",")  # the sentence before its command


def measured_on(table: dict) -> str:
    """'measured 2026-12-02 on a 2 vCPU AMD EPYC': where and when a stored figure was measured (a stored figure
    never says "this CPU": the machine reading it may be another)."""
    return "m" + measured_where(table).split(" (")[0].split(",")[0][1:]


def claim(s: Scene, table: dict) -> str:
    """The scene's stored figure in a sentence (what the table measured, not what this race will do)."""
    method = chosen_method(s, table)
    if s.shows == "difference":
        return f"the {methods.get(method).short} is not lossless: it checks nothing the draft writes"
    if s.shows == "theory":
        return (
            "the step costs a CPU measured (stored), the GPU predicted by the cost model "
            "(no GPU was lent to measure it)"
        )
    if s.shows == "choice":
        d = auto_stored()
        t, where = auto_targets(d), d["machine"].split(", measured ")
        lowest = min(t["tasks"], key=lambda r: r["auto"])
        return (
            f"stored: auto {t['means'][method]:.2f}× the baseline on average over {len(t['shared'])} tasks' "
            f"{d['split']} prompts, the best single fixed method ({t['best_fixed']}) "
            f"{t['means'][t['best_fixed']]:.2f}×; its lowest task {lowest['task']} {lowest['auto']:.2f}× "
            f"(measured {where[-1]} on {where[0]}); a single race varies around it"
        )
    row = stored_row(table, s.task, method)
    n = len(prompts_of(s.task))
    prompts = f"the {n} chat prompts asked a second time" if s.task == REPEATED else f"the {n} {s.task} prompts"
    if s.shows == "refusal":
        return (
            f"stored: the {methods.get(method).short} keeps α {row['alpha']:.2f} of its drafts on {prompts}: "
            f"about {1 - row['alpha']:.0%} are refused ({measured_on(table)})"
        )
    verdict = "slower than the target alone" if s.shows == "loss" else "the best of the methods measured there"
    return (
        f"stored: {methods.get(method).short} {row['speedup']:.2f}× the baseline on {prompts} "
        f"(α {row['alpha']:.2f}, {measured_on(table)}), {verdict}; a single race varies around it"
    )


GPU_PAIRS = ("qwen2.5-3b+0.5b", "qwen2.5-14b+0.5b")  # the seed's pair in bf16 and the showcase, compiled steps


def gpu_predictions() -> list[dict]:
    """The cost model's H200 figures of ``GPU_PAIRS`` with captured steps (docs/results/cost_model.json)."""
    found = []
    for p in json.loads((ROOT / "docs/results/cost_model.json").read_text())["predictions"]:
        if p["preset"] in GPU_PAIRS:
            k = p["kinds"]["captured"]
            speedups = [a["speedup"] for a in k["by_alpha"].values()]
            found.append({"gpu": p["gpu"], "preset": p["preset"], "t_t_ms": k["t_t_ms"], "c": k["c"],
                          "tv_tt": max(a["tv_tt"] for a in k["by_alpha"].values()), "low": min(speedups),
                          "high": max(speedups), "alphas": f"{min(k['by_alpha'])}–{max(k['by_alpha'])}"})  # fmt: skip
    return found


def gpu_rows() -> list[list[str]]:
    """Where the time goes: this CPU's measured step (docs/results/steps_cpu.json, eager) beside the cost
    model's H200 rows (predicted)."""
    cpu = json.loads((ROOT / "docs/results/steps_cpu.json").read_text())
    eager = cpu["kinds"]["eager"]
    where = f"{cpu['machine'].split(',')[0]}, **measured** {cpu['measured']}"  # stored: named, dated
    rows = [[where, f"{cpu['preset']}, γ {cpu['gamma']}", f"{eager['t_t_ms']:.1f} ms", f"{eager['c']:.2f}",
             f"{eager['tv_tt']:.2f}", f"{eager['speedup']:.2f}×"]]  # fmt: skip
    for g in gpu_predictions():
        rows.append([f"{g['gpu']}, **predicted** (cost model)", f"{g['preset']}, compiled steps",
                     f"{g['t_t_ms']:.1f} ms", f"{g['c']:.2f}", f"{g['tv_tt']:.2f}",
                     f"{g['low']:.2f}–{g['high']:.2f}× at α {g['alphas']}"])  # fmt: skip
    return rows


GPU_HEADER = ["where", "pair", "one target step", "c (draft / target step)", "t_v/t_t (check γ+1 / one)", "speedup"]

SOURCES = ("assets/tasks/smollm2-135m.json", "docs/results/steps_cpu.json", "docs/results/cost_model.json", AUTO_TABLE)


def contradictions(table: dict, gpu: list[dict] | None = None, auto_table: dict | None = None) -> list[str]:
    """The scenes whose words the stored figures do not bear out (none, for the scenes to be shown): a win must be
    faster than the target alone, a loss slower, a refusal scene must have refusals, auto's scene must be faster
    than the target on average, and the GPU scene's question presumes the 3B pair predicted below the 14B."""
    found = []
    for s in SCENES:
        method = chosen_method(s, table)
        row = stored_row(table, s.task, method) if s.task else None
        if s.shows in ("win", "loss", "refusal") and row is None:
            found.append(f"{s.key}: no stored row for {method} on {s.task}")
        elif s.shows == "win" and row["speedup"] <= 1:
            found.append(f"{s.key}: shown as a win, stored {row['speedup']:.2f}×")
        elif s.shows == "loss" and row["speedup"] >= 1:
            found.append(f"{s.key}: shown as a loss, stored {row['speedup']:.2f}×")
        elif s.shows == "refusal" and row["alpha"] >= 1:
            found.append(f"{s.key}: shown for a refusal, stored α {row['alpha']:.2f}")
        elif s.shows == "difference" and methods.get(method).lossless:
            found.append(f"{s.key}: shown as not lossless, {method} is")
        elif s.shows == "choice" and (mean := auto_targets(auto_table or auto_stored())["means"][method]) <= 1:
            found.append(f"{s.key}: shown as the lesson's end, auto stored {mean:.2f}× on average")
    small, large = (next((g for g in gpu or gpu_predictions() if g["preset"] == p), None) for p in GPU_PAIRS)
    if small is None or large is None or small["high"] >= large["low"]:
        found.append("gpu: the 3B pair is not predicted below the 14B on the same GPU")
    return found
