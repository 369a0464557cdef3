"""What each button of the app does, as plain functions of plain values (no gradio import).

``app.py`` lays the components out and wires each event to one function here; a function takes
the component values and returns (or yields) the values to show, so the whole behaviour of the
UI is tested without a browser (tests/test_app.py). Nothing escapes a handler as an exception
(the UI would show an "Error" badge): each failure becomes one status line starting with ⚠;
refused input is logged as one line, an unexpected error with its traceback.

Everything a handler returns is plain data (strings, plotly figures, step records, dicts), so it
crosses a ZeroGPU call by pickle; nothing live (a generator, a model) is kept between calls.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from html import escape

from . import model_thread
from . import trace as traces
from .bench import ENGINES, format_table, run_bench
from .compare import compare, comparison_record
from .divergence import dtype_name
from .engine import DecodeConfig, decode_steps, run_all
from .errors import InputError, SpecDemoError
from .live import LiveRace, RaceState
from .lossless import check_lossless
from .metrics import acceptance_rate, mean_accepted_tokens
from .models import (
    PRESETS,
    LoadOptions,
    check_prompt,
    configure_cpu_threads,
    draft_options_for,
    encode_prompt,
    load_pair,
    lowercases,
    startup_preset,
)
from .plots import (
    acceptance_figure,
    accepted_length_figure,
    distribution_figure,
    gamma_sweep_figure,
    lossless_figure,
    race_figure,
    speedup_figure,
    theory_figure,
    time_breakdown_figure,
    tree_figure,
)
from .render import step_table_html, summary_html, token_spans, tokens_html
from .sampling import SamplingConfig
from .steps import validate_config
from .tree import TreeConfig, validate_tree

log = logging.getLogger("specdemo.app")

KEEP = {"__type__": "update"}  # what gradio's gr.skip() returns: leave this output as it is


def update(**props) -> dict:
    """What gradio's gr.update(**props) returns: change some properties of a component."""
    return {"__type__": "update", **props}


MAX_NEW_TOKENS = int(os.environ.get("SPECDEMO_MAX_NEW_TOKENS", "512"))
PANES_EVERY_S = 0.125  # panes, summary and status: 8 updates a second while the race runs
PLOTS_EVERY_S = 1.0  # the race, speedup and acceptance figures: once a second (the rest at the end)
METHOD_LABELS = {
    "draft model": "draft",
    "prompt lookup": "prompt-lookup",
    "token tree": "tree",
    "naive: draft writes half, target continues (NOT lossless)": "naive",
}
DTYPE_CHOICES = ("auto", "float32", "float16", "bfloat16")


@dataclass
class Settings:
    """The run settings, one field per input component of the app (same names)."""

    prompt: str = ""
    target_id: str = ""
    draft_id: str = ""
    quantization: str = "none"
    dtype: str = "auto"
    method_label: str = "draft model"
    gamma: int = 4
    schedule: str = "constant"
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_new_tokens: int = 128
    chat_template: bool = True
    tree_k: int = 2
    tree_depth: int = 4
    tree_nodes: int = 12
    draft_vocab: int = 0

    @classmethod
    def from_preset(cls, name: str, **changes) -> Settings:
        p = PRESETS[name]
        values = dict(
            target_id=p.target,
            draft_id=p.draft,
            quantization=p.target_options.quantization,
            dtype=p.target_options.dtype,
            gamma=p.gamma,
            chat_template=p.chat_template,
            draft_vocab=p.draft_vocab,
            prompt=p.examples[0] if p.examples else "",
        )
        return cls(**(values | changes))

    @property
    def method(self) -> str:
        return METHOD_LABELS.get(self.method_label, self.method_label)

    def config(self) -> DecodeConfig:
        return DecodeConfig(
            max_new_tokens=whole(self.max_new_tokens, "max_new_tokens"),
            gamma=whole(self.gamma, "gamma"),
            schedule=self.schedule,
            method="draft" if self.method == "naive" else self.method,
            max_new_tokens_cap=MAX_NEW_TOKENS,
            sampling=SamplingConfig(
                number(self.temperature, "temperature"),
                whole(self.top_k or 0, "top_k"),
                number(self.top_p, "top_p"),
                whole(self.seed or 0, "seed"),
            ),
            tree=TreeConfig(
                whole(self.tree_k, "tree_k"), whole(self.tree_depth, "tree_depth"), whole(self.tree_nodes, "tree_nodes")
            ),
        )


SETTING_NAMES = tuple(f.name for f in fields(Settings))
# an InputError's field (a DecodeConfig / SamplingConfig name) → the setting that holds it
FIELD_SETTINGS = {"method": "method_label"}


def number(value, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, got {value!r}", field=name) from None


def whole(value, name: str) -> int:
    n = number(value, name)
    if n != int(n):
        raise InputError(f"{name} must be a whole number, got {value!r}", field=name)
    return int(n)


def find_problem(s: Settings) -> tuple[str, str] | None:
    """The first setting a run would refuse, found without loading a model: (setting, message).
    The app's validator shows it next to that input before anything is queued."""
    try:
        check_prompt(s.prompt)
        config = s.config()
        validate_config(config)
        if s.method == "tree":
            validate_tree(config.tree)
        whole(s.draft_vocab or 0, "draft_vocab")
    except InputError as error:
        return FIELD_SETTINGS.get(error.field, error.field or "prompt"), str(error)
    return None


def friendly(error: BaseException) -> str:
    """One clear line for the person at the screen. Refused input is logged as one line; an
    unexpected error with its traceback."""
    if isinstance(error, SpecDemoError):
        log.info("refused: %s", error)
        return str(error)
    if "out of memory" in str(error).lower():
        log.warning("out of memory: %s", error)
        return "the device ran out of memory: try fewer new tokens, 4-bit quantization or a smaller pair"
    log.error("unexpected error", exc_info=error)
    return f"unexpected error ({type(error).__name__}): {error}"


@dataclass
class Prepared:
    pair: object
    ids: list[int]
    config: DecodeConfig
    prompt: str  # as the model saw it (lower-cased for a lower-case-only pair)
    note: str  # said in the status line ("" when nothing to say)


def prepare(s: Settings) -> Prepared:
    """Settings → the pair, prompt ids and DecodeConfig; raises SpecDemoError with a clear message."""
    problem = find_problem(s)  # bad numbers fail before anything loads
    if problem:
        raise InputError(problem[1], field=problem[0])
    target_id, draft_id = (s.target_id or "").strip(), (s.draft_id or "").strip()
    if not target_id:
        raise InputError("no target model: pick a preset or type a model id under Advanced", field="target_id")
    needs_draft = s.method != "prompt-lookup"
    if needs_draft and not draft_id:
        raise InputError("this method needs a draft model: type one under Advanced, or use prompt lookup")
    options = LoadOptions(dtype=s.dtype or "auto", quantization=s.quantization or "none")
    draft_vocab = whole(s.draft_vocab or 0, "draft_vocab")
    draft_id = draft_id if needs_draft else None
    # all model work runs on the one model thread (model_thread.py says why)
    pair = model_thread.call(
        load_pair, target_id, draft_id, options, draft_options_for(options), draft_vocab=draft_vocab
    )
    model_thread.call(configure_cpu_threads, pair)
    prompt, note = s.prompt, ""
    if lowercases(target_id) and prompt != prompt.lower():
        prompt, note = prompt.lower(), "this pair knows lower-case stories only, so the prompt was lower-cased"
    ids = encode_prompt(pair.tokenizer, prompt, chat_template=bool(s.chat_template))
    return Prepared(pair, ids, s.config(), prompt, note)


def decoder(tokenizer):
    return functools.lru_cache(maxsize=65536)(lambda t: tokenizer.decode([t]))


# ---------------------------------------------------------------- the race

# The race's outputs, in this order: panes, summary, figures, status line, last run's trace.
RACE_OUTPUTS = (
    "baseline_pane",
    "speculative_pane",
    "summary",
    "race_plot",
    "speedup_plot",
    "acceptance_plot",
    "histogram_plot",
    "breakdown_plot",
    "status",
    "trace",
)


def render(state: RaceState, decode, prompt: str, figures: str, status: str, trace=KEEP) -> tuple:
    """A race state → the RACE_OUTPUTS. ``figures``: "all", "live" (race, speedup and acceptance:
    the ones that change the most) or "none" (the figures stay as they are on screen)."""
    reference = state.tokens("baseline")
    label = "naive (not lossless)" if state.method == "naive" else "speculative"
    mark = state.first_difference() if state.greedy and state.lossless else None
    if figures in ("all", "live"):
        base, spec = state.baseline, state.contender
        live = (race_figure(base, spec, label), speedup_figure(base, spec), acceptance_figure(spec))
    else:
        live = (KEEP,) * 3
    rest = (
        (accepted_length_figure(state.contender), time_breakdown_figure(state.contender))
        if figures == "all"
        else (KEEP,) * 2
    )
    return (
        tokens_html(token_spans(state.baseline, decode, mark=mark), state.greedy, prompt),
        tokens_html(token_spans(state.contender, decode, reference, mark), state.greedy, prompt),
        summary_html(state.summary(), state.greedy, state.lossless),
        *live,
        *rest,
        status,
        trace,
    )


def status_only(text: str) -> tuple:
    """The RACE_OUTPUTS that change the status line only (the rest stays as it is on screen)."""
    return (KEEP,) * (len(RACE_OUTPUTS) - 2) + (text, KEEP)


def failure(message: str) -> tuple:
    """A run that could not start or failed: one status line, nothing on screen lost."""
    return status_only(f"⚠ {message}")


def race(s: Settings, session: str | None = None) -> Iterator[tuple]:
    """The Run button: both panes, the summary and the figures as the race goes on.

    The race runs on the model thread (``LiveRace``); this generator shows its latest state at a
    fixed rate, so rendering never slows the models down. Stop (``request_stop``) ends it at its
    next step with everything shown; closing the generator (Gradio does when the browser goes
    away) stops it too."""
    clear_stop(session)
    yield status_only("● starting… (a pair's first run loads it)")
    try:
        prep = prepare(s)
    except Exception as error:
        yield failure(friendly(error))
        return
    decode = decoder(prep.pair.tokenizer)
    settings = asdict(s)
    device = str(prep.pair.target.device)
    live = LiveRace(prep.pair, prep.ids, prep.config, s.method)
    try:
        last_figures = time.perf_counter()
        while not live.wait(PANES_EVERY_S):
            if stop_requested(session):
                live.cancel()
            state = live.snapshot()
            status = f"● running… {token_counts(state)}"
            if time.perf_counter() - last_figures >= PLOTS_EVERY_S:
                last_figures = time.perf_counter()
                # the trace too, so a stopped run can still be inspected and exported
                trace = traces.to_trace(state, settings, decode, device)
                yield render(state, decode, prep.prompt, "live", status, trace)
            else:
                yield render(state, decode, prep.prompt, "none", status)
        if live.error is not None:
            yield failure(friendly(live.error))
            return
        state = live.snapshot()
        trace = traces.to_trace(state, settings, decode, device)
        if live.cancelled:
            end = f"■ stopped: {token_counts(state)}"
        else:
            end = done_status(state, live.wall_s, prep.note)
        yield render(state, decode, prep.prompt, "all", end, trace)
    finally:
        live.close()
        clear_stop(session)


def token_counts(state: RaceState) -> str:
    """ "B + S tokens": what the baseline and the speculative side have written so far."""
    return f"{len(state.tokens('baseline'))} + {len(state.tokens('speculative'))} tokens"


def done_status(state: RaceState, wall_s: float, note: str = "") -> str:
    """✓ with the race's wall time and its compute time (both sides' own clocks, added up)."""
    text = f"✓ done: {token_counts(state)}, compute {state.compute_s:.1f} s, wall {wall_s:.1f} s"
    return text + (f" · ℹ {note}" if note else "")


def replay(path: str) -> Iterator[tuple]:
    """Load an exported trace and play it back on its recorded clock (no model needed)."""
    try:
        with open(path, encoding="utf-8") as f:
            state, decode, settings = traces.from_trace(f.read())
    except OSError as error:
        yield failure(f"cannot read the file: {error.strerror}")
        return
    except SpecDemoError as error:
        yield failure(friendly(error))
        return
    prompt = settings.get("prompt", "")
    events = sorted(
        [(s.elapsed_s, "b", s) for s in state.baseline] + [(s.elapsed_s, "s", s) for s in state.contender],
        key=lambda e: e[0],
    )
    shown = RaceState(state.method, state.greedy, dtype=state.dtype)
    start = last = time.perf_counter()
    for t, side, step in events:
        (shown.baseline if side == "b" else shown.contender).append(step)
        time.sleep(max(0.0, min(t, 30.0) - (time.perf_counter() - start)))  # the recorded clock
        if time.perf_counter() - last >= PANES_EVERY_S:
            last = time.perf_counter()
            yield render(shown, decode, prompt, "none", "▶ replaying a trace…")
    trace = traces.to_trace(state, settings, decode)
    yield render(state, decode, prompt, "all", "✓ replayed from the trace (no model ran)", trace)


# Per browser session: the exported trace and the stop flag, removed when the session ends.
SESSIONS_DIR = os.path.join(tempfile.gettempdir(), "specdemo-sessions")


def session_file(session: str | None, name: str) -> str:
    folder = "".join(c for c in (session or "local") if c.isalnum())[:64] or "local"
    os.makedirs(os.path.join(SESSIONS_DIR, folder), exist_ok=True)
    return os.path.join(SESSIONS_DIR, folder, name)


def export_trace(trace: dict | None, session: str | None) -> str | dict:
    """The last run as a JSON file, one per browser session (overwritten, removed when it leaves)."""
    if not trace:
        return KEEP
    path = session_file(session, "specdemo-trace.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(traces.dumps(trace))
    return path


def request_stop(session: str | None) -> str:
    """The Stop button. The flag is a file, so it reaches the race wherever it runs (on ZeroGPU,
    in a forked GPU worker); the race sees it within one update and ends showing what it has."""
    open(session_file(session, "stop"), "w").close()
    return "■ stopping…"


def stop_requested(session: str | None) -> bool:
    return os.path.exists(session_file(session, "stop"))


def clear_stop(session: str | None) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(session_file(session, "stop"))


def forget_session(session: str | None) -> None:
    """A browser session ended: remove what it left on disk."""
    shutil.rmtree(os.path.dirname(session_file(session, "stop")), ignore_errors=True)


def compare_api(
    prompt: str,
    max_new_tokens: int = 64,
    gamma: int = 4,
    temperature: float = 0.0,
    seed: int = 0,
    top_k: int = 0,
    top_p: float = 1.0,
    method: str = "draft",
    preset: str = startup_preset(),
) -> dict:
    """Baseline vs speculative on one prompt: the JSON of `python -m specdemo generate --json`.
    Raises SpecDemoError with a clear message (the API's caller sees it)."""
    try:
        if preset not in PRESETS:
            raise InputError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
        labels = {v: k for k, v in METHOD_LABELS.items() if v != "naive"}
        if method not in labels:
            raise InputError("method must be draft, prompt-lookup or tree")
        s = Settings.from_preset(
            preset,
            prompt=prompt,
            method_label=labels[method],
            gamma=gamma,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            max_new_tokens=max_new_tokens,
        )
        prep = prepare(s)
        base, spec = model_thread.call(compare, prep.pair, prep.ids, prep.config)
        return comparison_record(prep.pair.tokenizer, prep.ids, base, spec, dtype_name(prep.pair.target))
    except SpecDemoError:
        raise
    except Exception as error:
        raise SpecDemoError(friendly(error)) from error


# ---------------------------------------------------------------- step inspector

# The inspector's outputs: its session (plain records), the step's HTML, its figure, the slider.


def inspector_view(steps, decode, greedy: bool, index: int):
    if not steps:
        return "<p>No steps yet.</p>", None, update(minimum=0, maximum=1, value=0)
    index = max(0, min(int(index), len(steps) - 1))
    step = steps[index]
    if step.tree_parents:
        figure = tree_figure(step, decode)
    elif step.p_top:
        figure = distribution_figure(step, decode)
    else:
        figure = None
    text = tokens_html(token_spans(steps[: index + 1], decode), greedy)
    # a slider needs maximum > minimum: a one-step run still gets a 0..1 slider
    slider = update(minimum=0, maximum=max(1, len(steps) - 1), value=index)
    return step_table_html(step, decode, greedy) + "<hr>" + text, figure, slider


def stepper_start(s: Settings) -> tuple:
    """Record a whole speculative run in this one call, then show its first step. The session
    holds plain records and token texts (no live generator or model), so "Next step" needs no
    model and the session pickles (ZeroGPU returns results by pickle)."""
    try:
        if s.method == "naive":
            raise InputError("the step inspector follows speculative decoding: pick draft model, prompt lookup or tree")
        prep = prepare(s)
        pair = prep.pair
        steps = model_thread.call(
            lambda: run_all(decode_steps(pair.target, pair.draft, prep.ids, prep.config, pair.eos))
        )
        steps = steps.steps
        texts = {t: prep.pair.tokenizer.decode([t]) for t in traces.used_ids(steps)}
        return stepper_show({"steps": steps, "texts": texts, "greedy": prep.config.sampling.greedy, "shown": 0})
    except Exception as error:
        return None, f"<p>⚠ {friendly(error)}</p>", None, KEEP


def stepper_show(session: dict) -> tuple:
    decode = traces.text_lookup(session["texts"])
    html, figure, slider = inspector_view(session["steps"], decode, session["greedy"], session["shown"])
    if session["shown"] >= len(session["steps"]) - 1:
        html = "<p><b>Finished.</b></p>" + html
    return session, html, figure, slider


def stepper_next(session: dict | None) -> tuple:
    if not session or not session.get("steps"):
        return session, "<p>Press <b>Start step-by-step</b> first (or <b>Inspect the last run</b>).</p>", None, KEEP
    session["shown"] = min(session["shown"] + 1, len(session["steps"]) - 1)
    return stepper_show(session)


def inspect_last(trace: dict | None) -> tuple:
    if not trace:
        return None, "<p>Run once first: the last run's steps appear here.</p>", None, KEEP
    if not trace["contender"]:
        return None, "<p>The last run stopped before its first step: run again.</p>", None, KEEP
    state, _, _ = traces.from_trace(trace)
    texts = {int(k): v for k, v in trace["token_text"].items()}
    return stepper_show({"steps": state.contender, "texts": texts, "greedy": state.greedy, "shown": 0})


def inspector_goto(session: dict | None, index) -> tuple:
    if not session or not session.get("steps"):
        return KEEP, KEEP
    session["shown"] = max(0, min(int(index), len(session["steps"]) - 1))
    _, html, figure, _ = stepper_show(session)
    return html, figure


# ---------------------------------------------------------------- benchmark, theory, losslessness


def parse_gammas(text: str) -> list[int]:
    try:
        gammas = [int(g) for g in str(text).split(",") if g.strip()]
    except ValueError:
        raise InputError("γ values: whole numbers separated by commas, e.g. 1,2,4,8") from None
    if not gammas or not all(1 <= g <= 32 for g in gammas):
        raise InputError("every γ must be between 1 and 32")
    return gammas


def benchmark(s: Settings, gammas: str = "1,2,3,4,6,8", repeats: int = 1, with_transformers: bool = False) -> tuple:
    """The γ sweep on this prompt: (figure, HTML table)."""
    try:
        gamma_list = parse_gammas(gammas)
        s.method_label = "draft model"
        prep = prepare(s)
        engines = ENGINES if with_transformers else ("specdemo-baseline", "specdemo-speculative", "specdemo-tree")
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
        table = escape(format_table(result))
        return gamma_sweep_figure(result["rows"]), f"<pre style='overflow-x:auto'>{table}</pre>"
    except Exception as error:
        return None, f"<p>⚠ {friendly(error)}</p>"


def measured_point(trace: dict | None) -> dict | None:
    """α, γ, c, τ and speedup of the last run, for the theory tab."""
    if not trace or trace["method"] == "naive" or not trace["contender"]:
        return None
    state, _, settings = traces.from_trace(trace)
    spec, base = state.contender, state.baseline
    drafted = sum(len(s.drafted) for s in spec[1:])
    t_d = sum(s.draft_s for s in spec[1:]) / drafted if drafted else 0.0
    t_t = sorted(s.verify_s for s in base[1:])[len(base[1:]) // 2] if len(base) > 1 else 0.0
    return {
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


def lossless(s: Settings, samples: int = 300, k: int = 2, temperature: float = 1.0, progress=None) -> tuple:
    """The χ² check: (figure, verdict markdown). ``progress(fraction, desc=...)`` if given."""
    try:
        if s.method == "naive":
            raise InputError("pick draft model, prompt lookup or tree: the naive method is known not to be lossless")
        s.temperature = temperature
        prep = prepare(s)
        report = (lambda done, total: progress(done / total, desc="sampling")) if progress else None
        check = model_thread.call(
            check_lossless, prep.pair, prep.ids, prep.config, int(samples), int(k), progress=report
        )
        verdict = (
            "no evidence of a difference" if check.p_value > 0.01 else "the distributions differ: that would be a bug"
        )
        figure = lossless_figure(check, decoder(prep.pair.tokenizer))
        return figure, f"χ² p-value **{check.p_value:.3f}**: {verdict}."
    except Exception as error:
        return None, f"⚠ {friendly(error)}"


def preset_fields(name: str) -> tuple:
    """Selecting a preset fills the model fields, the options, γ and the example prompts."""
    p = PRESETS[name]
    examples = list(p.examples)
    return (
        p.target,
        p.draft,
        p.target_options.quantization,
        p.target_options.dtype,
        p.chat_template,
        p.draft_vocab,
        p.gamma,
        update(choices=examples, value=None),
        examples[0] if examples else KEEP,
    )


# ---------------------------------------------------------------- ZeroGPU durations

# Seconds of GPU a call may take, from its own arguments (ZeroGPU refuses a call longer than the
# visitor's quota left: 2 min a day unauthenticated, 3.5 min free), capped at MAX_GPU_SECONDS.
MAX_GPU_SECONDS = 120


def _seconds(fixed: float, per_unit: float, units: float) -> int:
    return int(min(MAX_GPU_SECONDS, fixed + per_unit * units))


def race_seconds(*_, max_new_tokens=128, **__) -> int:
    return _seconds(10, 0.15, number(max_new_tokens, "max_new_tokens"))  # two generations side by side


def compare_seconds(*args, max_new_tokens=64, **__) -> int:
    return race_seconds(max_new_tokens=args[1] if len(args) > 1 else max_new_tokens)


def stepper_seconds(*_, max_new_tokens=128, **__) -> int:
    return _seconds(10, 0.08, number(max_new_tokens, "max_new_tokens"))


def benchmark_seconds(*_, max_new_tokens=128, gammas="1,2,3,4,6,8", repeats=1, with_transformers=False, **__) -> int:
    runs = (len(str(gammas).split(",")) + 1) * number(repeats, "repeats") * (2 if with_transformers else 1)
    return _seconds(15, 0.08, runs * number(max_new_tokens, "max_new_tokens"))


def lossless_seconds(*_, samples=300, k=2, **__) -> int:
    return _seconds(15, 0.05, 2 * number(samples, "samples") * number(k, "k"))
