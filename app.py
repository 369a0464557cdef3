"""specdemo: speculative decoding, side by side with the target alone, live.

The UI only: every number, token colour and figure comes from step records that the
engine in ``specdemo/`` yields. Configuration comes from environment variables:

    SPECDEMO_PRESET          model pair to start with (default: Qwen on CUDA; on a CPU SmolLM2-135M-Instruct
                             when installed, else the bundled TinyStories pair)
    SPECDEMO_CONCURRENCY     runs at once on the models (default 1: GPU work is serialised)
    SPECDEMO_MAX_QUEUE       requests waiting at most (default 32)
    SPECDEMO_MAX_NEW_TOKENS  cap on max new tokens (default 512)
    GRADIO_SERVER_NAME/PORT  where to listen (default 127.0.0.1:7860)
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import tempfile
import threading
import time

import gradio as gr

from specdemo import trace as traces
from specdemo.bench import ENGINES, format_table, run_bench
from specdemo.compare import compare, comparison_record
from specdemo.divergence import dtype_name
from specdemo.engine import DecodeConfig, decode_steps, run_all
from specdemo.errors import InputError, SpecDemoError
from specdemo.live import RaceState, run_race
from specdemo.lossless import check_lossless
from specdemo.metrics import acceptance_rate, mean_accepted_tokens
from specdemo.models import (
    PRESETS,
    QUANTIZATIONS,
    LoadOptions,
    check_prompt,
    configure_cpu_threads,
    default_preset_name,
    default_preset_notice,
    encode_prompt,
    load_pair,
)
from specdemo.plots import (
    distribution_figure,
    gamma_sweep_figure,
    live_figures,
    lossless_figure,
    theory_figure,
    time_breakdown_figure,
    tree_figure,
)
from specdemo.render import legend_html, step_table_html, summary_html, token_spans, tokens_html
from specdemo.sampling import SamplingConfig
from specdemo.tree import TreeConfig

try:  # on Hugging Face ZeroGPU Spaces, GPU work must run inside @spaces.GPU
    import spaces
except ImportError:
    spaces = None

log = logging.getLogger("specdemo.app")

PRESET = os.environ.get("SPECDEMO_PRESET", default_preset_name())
CONCURRENCY = int(os.environ.get("SPECDEMO_CONCURRENCY", "1"))
MAX_QUEUE = int(os.environ.get("SPECDEMO_MAX_QUEUE", "32"))
MAX_NEW_TOKENS = int(os.environ.get("SPECDEMO_MAX_NEW_TOKENS", "512"))
UPDATE_EVERY_S = 0.12  # panes and summary at most ~8 times a second; every step is still recorded
PLOTS_EVERY_S = 0.5  # the five figures cost most to build and to lay out: ~2 updates a second
METHOD_LABELS = {
    "draft model": "draft",
    "prompt lookup": "prompt-lookup",
    "token tree": "tree",
    "naive: draft writes half, target continues (NOT lossless)": "naive",
}
DTYPE_CHOICES = ["auto", "float32", "float16", "bfloat16"]


def gpu(fn):
    """Run ``fn`` under @spaces.GPU when the spaces package is present, with a duration
    sized from its max_new_tokens argument (two generations side by side)."""
    if spaces is None:
        return fn
    signature = inspect.signature(fn)

    def duration(*args, **kwargs):
        n = signature.bind_partial(*args, **kwargs).arguments.get("max_new_tokens", 256)
        return int(min(300, 40 + 0.5 * int(n)))

    return spaces.GPU(duration=duration)(fn)


def friendly(error: Exception) -> str:
    """One clear line for the person at the screen; the traceback goes to the server log."""
    if isinstance(error, SpecDemoError):
        return str(error)
    if "out of memory" in str(error).lower():
        return "the device ran out of memory: try fewer new tokens, 4-bit quantization or a smaller pair"
    log.exception("unexpected error")
    return f"unexpected error ({type(error).__name__}): {error}"


class Settings:
    """The run inputs, in the order of ``SETTING_NAMES``, as one object."""

    def __init__(self, *values):
        self.__dict__.update(zip(SETTING_NAMES, values))

    @property
    def method(self) -> str:
        return METHOD_LABELS.get(self.method_label, self.method_label)

    def config(self) -> DecodeConfig:
        return DecodeConfig(
            max_new_tokens=int(self.max_new_tokens),
            gamma=int(self.gamma),
            schedule=self.schedule,
            method="draft" if self.method == "naive" else self.method,
            max_new_tokens_cap=MAX_NEW_TOKENS,
            sampling=SamplingConfig(float(self.temperature), int(self.top_k or 0), float(self.top_p), int(self.seed)),
            tree=TreeConfig(int(self.tree_k), int(self.tree_depth), int(self.tree_nodes)),
        )

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in SETTING_NAMES}


SETTING_NAMES = [
    "prompt",
    "target_id",
    "draft_id",
    "quantization",
    "dtype",
    "method_label",
    "gamma",
    "schedule",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "max_new_tokens",
    "chat_template",
    "tree_k",
    "tree_depth",
    "tree_nodes",
    "draft_vocab",
]


def takes_settings(fn):
    """``fn(settings, *extra)`` as a Gradio handler of the settings components + ``extra``.

    Gradio injects gr.Request and gr.Progress only into positional parameters it can see, so
    the handler declares every setting by name (a real signature), then hands ``fn`` one
    Settings object. Generator functions stay generator functions (Gradio streams them)."""
    extra = list(inspect.signature(fn).parameters.values())[1:]
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    signature = inspect.Signature(
        [inspect.Parameter(name, positional) for name in SETTING_NAMES] + [p.replace(kind=positional) for p in extra]
    )

    def call(args, kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments
        return fn(Settings(*(values[n] for n in SETTING_NAMES)), *(values[p.name] for p in extra))

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def handler(*args, **kwargs):
            yield from call(args, kwargs)
    else:

        @functools.wraps(fn)
        def handler(*args, **kwargs):
            return call(args, kwargs)

    handler.__signature__ = signature
    return handler


STOP_FLAGS: dict[str, threading.Event] = {}


def stop_flag(request: gr.Request | None) -> threading.Event:
    """One flag per browser session: Stop sets it, the running race checks it between steps."""
    return STOP_FLAGS.setdefault(getattr(request, "session_hash", None) or "local", threading.Event())


def stop(request: gr.Request):
    stop_flag(request).set()
    return "⏹ stopped"


def prepare(s: Settings):
    """Settings → (pair, prompt ids, DecodeConfig); raises SpecDemoError with a clear message."""
    check_prompt(s.prompt)
    if not (s.target_id or "").strip():
        raise InputError("no target model: pick a preset or type a model id under Advanced")
    needs_draft = s.method != "prompt-lookup"
    if needs_draft and not (s.draft_id or "").strip():
        raise InputError("this method needs a draft model: type one under Advanced, or use prompt lookup")
    config = s.config()  # before loading: bad numbers fail fast
    options = LoadOptions(dtype=s.dtype or "auto", quantization=s.quantization or "none")
    draft = s.draft_id.strip() if needs_draft else None
    pair = load_pair(
        s.target_id.strip(), draft, options, LoadOptions(dtype=options.dtype), draft_vocab=int(s.draft_vocab or 0)
    )
    configure_cpu_threads(pair)
    return pair, encode_prompt(pair.tokenizer, s.prompt, chat_template=bool(s.chat_template)), config


def decoder(tokenizer):
    return functools.lru_cache(maxsize=65536)(lambda t: tokenizer.decode([t]))


def render_state(state: RaceState, decode, prompt: str, plots: bool = True):
    """A race state → the two panes, the summary and the five live plots (``plots=False``:
    the figures are left as they are on screen)."""
    reference = state.tokens("baseline")
    label = "naive (not lossless)" if state.method == "naive" else "speculative"
    mark = state.first_difference() if state.greedy and state.lossless else None
    return (
        tokens_html(token_spans(state.baseline, decode, mark=mark), state.greedy, prompt),
        tokens_html(token_spans(state.contender, decode, reference, mark), state.greedy, prompt),
        summary_html(state.summary(), state.greedy, state.lossless),
        *(
            (*live_figures(state.baseline, state.contender, label), time_breakdown_figure(state.contender))
            if plots
            else (gr.skip(),) * 5
        ),
    )


N_RENDERED = 8  # panes (2), summary, plots (5)


def error_outputs(message: str):
    return (gr.skip(),) * N_RENDERED + (f"⚠️ {message}", gr.skip())


@gpu
@takes_settings
def run(s: Settings, request: gr.Request = None, progress=gr.Progress(track_tqdm=True)):
    """The Run button: stream both panes, the summary and the plots as the race goes on."""
    flag = stop_flag(request)
    flag.clear()
    try:
        progress(0, desc="loading models (first time only)")
        pair, ids, config = prepare(s)
        decode = decoder(pair.tokenizer)
        last = last_plots = 0.0
        for state in run_race(pair, ids, config, s.method, cancel=flag.is_set):
            now = time.perf_counter()
            if state.done:
                trace = traces.to_trace(state, s.as_dict(), decode, str(pair.target.device))
                yield (*render_state(state, decode, s.prompt), "⏹ stopped" if flag.is_set() else "✅ done", trace)
            elif now - last >= UPDATE_EVERY_S:
                plots = now - last_plots >= PLOTS_EVERY_S
                last, last_plots = now, now if plots else last_plots
                yield (*render_state(state, decode, s.prompt, plots), "⏳ running…", gr.skip())
    except Exception as error:  # shown in the UI; the app keeps serving
        yield error_outputs(friendly(error))


def replay(path):
    """Load an exported trace and play it back on its recorded clock (no model needed)."""
    try:
        with open(path, encoding="utf-8") as f:
            state, decode, settings = traces.from_trace(f.read())
    except OSError as error:
        yield error_outputs(f"cannot read the file: {error.strerror}")
        return
    except SpecDemoError as error:
        yield error_outputs(str(error))
        return
    prompt = settings.get("prompt", "")
    events = sorted(
        [(s.elapsed_s, "b", s) for s in state.baseline] + [(s.elapsed_s, "s", s) for s in state.contender],
        key=lambda e: e[0],
    )
    shown = RaceState(state.method, state.greedy)
    start, last = time.perf_counter(), 0.0
    for t, side, step in events:
        (shown.baseline if side == "b" else shown.contender).append(step)
        time.sleep(max(0.0, min(t, 30.0) - (time.perf_counter() - start)))  # the recorded clock
        if time.perf_counter() - last >= UPDATE_EVERY_S:
            last = time.perf_counter()
            yield (*render_state(shown, decode, prompt), "⏯ replaying a trace…", gr.skip())
    trace = traces.to_trace(state, settings, decode)
    yield (*render_state(state, decode, prompt), "✅ replayed from the trace (no model ran)", trace)


def export_trace(trace):
    if not trace:
        raise gr.Error("nothing to export yet: run once first")
    path = os.path.join(tempfile.mkdtemp(prefix="specdemo-"), "specdemo-trace.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(traces.dumps(trace))
    return path


@gpu
def compare_api(
    prompt: str,
    max_new_tokens: int = 64,
    gamma: int = 4,
    temperature: float = 0.0,
    seed: int = 0,
    top_k: int = 0,
    top_p: float = 1.0,
    method: str = "draft",
    preset: str = PRESET,
) -> dict:
    """Baseline vs speculative on one prompt; returns the JSON of `python -m specdemo generate --json`."""
    try:
        if preset not in PRESETS:
            raise InputError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
        if method not in ("draft", "prompt-lookup", "tree"):
            raise InputError("method must be draft, prompt-lookup or tree")
        p = PRESETS[preset]
        s = Settings(
            prompt,
            p.target,
            p.draft,
            p.target_options.quantization,
            p.target_options.dtype,
            method,
            gamma,
            "constant",
            temperature,
            top_k,
            top_p,
            seed,
            max_new_tokens,
            p.chat_template,
            2,
            4,
            12,
            p.draft_vocab,
        )
        pair, ids, config = prepare(s)
        base, spec = compare(pair, ids, config)
        return comparison_record(pair.tokenizer, ids, base, spec, dtype_name(pair.target))
    except Exception as error:
        raise gr.Error(friendly(error)) from error


# ---------------------------------------------------------------- step inspector


def inspector_view(steps, decode, greedy, index):
    if not steps:
        return "<p>No steps yet.</p>", None, gr.update(minimum=0, maximum=1, value=0)
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
    slider = gr.update(minimum=0, maximum=max(1, len(steps) - 1), value=index)
    return step_table_html(step, decode, greedy) + "<hr>" + text, figure, slider


@gpu
@takes_settings
def stepper_start(s: Settings, progress=gr.Progress(track_tqdm=True)):
    """Record a whole speculative run in this one call, then show its first step. The session
    holds plain records and token texts (no live generator or model), so "Next step" needs no
    model and the session pickles (ZeroGPU returns results by pickle)."""
    try:
        if s.method == "naive":
            raise InputError("the step inspector follows speculative decoding: pick draft model, prompt lookup or tree")
        pair, ids, config = prepare(s)
        steps = run_all(decode_steps(pair.target, pair.draft, ids, config, pair.eos)).steps
        texts = {t: pair.tokenizer.decode([t]) for t in traces.used_ids(steps)}
        session = {"steps": steps, "texts": texts, "greedy": config.sampling.greedy, "shown": 0}
        return stepper_show(session)
    except Exception as error:
        return None, f"⚠️ {friendly(error)}", None, gr.skip()


def stepper_show(session):
    decode = traces.text_lookup(session["texts"])
    html, figure, slider = inspector_view(session["steps"], decode, session["greedy"], session["shown"])
    if session["shown"] >= len(session["steps"]) - 1:
        html = "<p><b>Finished.</b></p>" + html
    return session, html, figure, slider


def stepper_next(session):
    if not session or not session.get("steps"):
        return session, "Press *Start step-by-step* first (or *Inspect the last run*).", None, gr.skip()
    session["shown"] = min(session["shown"] + 1, len(session["steps"]) - 1)
    return stepper_show(session)


def inspect_last(trace):
    if not trace:
        return None, "Run once first: the last run's steps appear here.", None, gr.skip()
    state, _, _ = traces.from_trace(trace)
    texts = {int(k): v for k, v in trace["token_text"].items()}
    return stepper_show({"steps": state.contender, "texts": texts, "greedy": state.greedy, "shown": 0})


def inspector_goto(session, index):
    if not session or not session.get("steps"):
        return gr.skip(), gr.skip()
    session["shown"] = max(0, min(int(index), len(session["steps"]) - 1))
    _, html, figure, _ = stepper_show(session)
    return html, figure


# ---------------------------------------------------------------- benchmark, theory, losslessness


@gpu
@takes_settings
def benchmark(
    s: Settings, gammas="1,2,3,4,6,8", repeats=1, with_transformers=False, progress=gr.Progress(track_tqdm=True)
):
    try:
        try:
            gamma_list = [int(g) for g in str(gammas).split(",") if g.strip()]
        except ValueError:
            raise InputError("γ values: whole numbers separated by commas, e.g. 1,2,4,8") from None
        if not gamma_list or not all(1 <= g <= 32 for g in gamma_list):
            raise InputError("every γ must be between 1 and 32")
        s.method_label = "draft"
        pair, ids, _ = prepare(s)
        engines = ENGINES if with_transformers else ("specdemo-baseline", "specdemo-speculative", "specdemo-tree")
        result = run_bench(pair, [ids], gamma_list, int(s.max_new_tokens), int(repeats), progress=True, engines=engines)
        return gamma_sweep_figure(result["rows"]), f"<pre>{format_table(result)}</pre>"
    except Exception as error:
        return None, f"⚠️ {friendly(error)}"


def measured_point(trace):
    """α, γ, c, τ and speedup of the last run, for the theory tab."""
    if not trace or trace["method"] == "naive":
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


def theory(alpha, gamma, c, trace):
    return theory_figure(float(alpha), int(gamma), float(c), measured_point(trace))


def theory_from_last(trace):
    point = measured_point(trace)
    if not point:
        raise gr.Error("run a speculative method once first")
    return round(point["alpha"], 3), point["gamma"], round(min(point["c"], 1.0), 3)


@gpu
@takes_settings
def lossless(s: Settings, samples=300, k=2, check_temperature=1.0, progress=gr.Progress()):
    try:
        if s.method == "naive":
            raise InputError("pick draft model, prompt lookup or tree: the naive method is known not to be lossless")
        s.temperature = check_temperature
        pair, ids, config = prepare(s)
        check = check_lossless(
            pair,
            ids,
            config,
            int(samples),
            int(k),
            progress=lambda done, total: progress(done / total, desc="sampling"),
        )
        verdict = (
            "no evidence of a difference" if check.p_value > 0.01 else "the distributions differ: that would be a bug"
        )
        return lossless_figure(check, decoder(pair.tokenizer)), f"χ² p-value **{check.p_value:.3f}**: {verdict}."
    except Exception as error:
        return None, f"⚠️ {friendly(error)}"


def preset_fields(name: str):
    """Selecting a preset fills the model fields, the options and the example prompts."""
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
        gr.update(choices=examples, value=None),
        examples[0] if examples else gr.skip(),
    )


CSS = """
.tokens { font-family: ui-monospace, monospace; font-size: 15px; }
.tok { border-radius: 3px; }
.pane { min-height: 180px; border: 1px solid #ddd; border-radius: 8px; padding: 10px; }
.legend { margin: 4px 0 8px; font-size: 13px; }
table.summary th, table.inspector th { text-align: left; padding-right: 12px; }
table.summary td.value { font-weight: bold; padding-right: 12px; }
table.inspector tr.accepted { background: #c8f7c5; }
table.inspector tr.rejected { background: #f8c4c4; }
"""

TITLE = """# Speculative decoding, side by side
A small **draft** proposes γ tokens; the **target** checks them all in **one** forward pass: same output as the
target alone, only faster. Press **Run** and watch both write; hover a token for its p, q and test."""

HOW_IT_WORKS = """Each draft token x is kept with probability min(1, p(x)/q(x)), where p and q are the target's and
the draft's probabilities; at the first refusal the target draws a replacement from norm(max(0, p − q)), and if every
draft is kept it adds a bonus token. The output follows the target's own distribution exactly (in greedy mode: the
very same tokens, up to the rounding of half precision, which the app explains when it matters)."""


def build_demo() -> gr.Blocks:
    first = PRESETS[PRESET]
    with gr.Blocks(title="specdemo: speculative decoding") as demo:
        gr.Markdown(TITLE)
        notice = default_preset_notice()
        if notice and PRESET == default_preset_name():
            gr.Markdown(f"ℹ️ {notice}", elem_id="notice")
        last_trace = gr.State(None)
        # The first screen is the race: prompt, pair and Run on top, the panes right under them.
        with gr.Row(equal_height=True):
            with gr.Column(scale=3):
                prompt = gr.Textbox(
                    label="Prompt", elem_id="prompt", value=first.examples[0] if first.examples else "", lines=1
                )
            with gr.Column(scale=2):
                preset = gr.Dropdown(list(PRESETS), value=PRESET, label="Model pair")
            with gr.Column(scale=1, min_width=160):
                run_btn = gr.Button("Run", variant="primary", elem_id="run-btn")
                stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-btn", size="sm")
        with gr.Row():
            example = gr.Dropdown(list(first.examples), label="Example prompts", value=None, scale=3)
            method = gr.Dropdown(list(METHOD_LABELS), value="draft model", label="Method", scale=2)
            gamma = gr.Slider(1, 32, value=first.gamma, step=1, label="γ (draft tokens per step)", scale=2)
            max_new_tokens = gr.Slider(
                1, MAX_NEW_TOKENS, value=min(128, MAX_NEW_TOKENS), step=1, label="Max new tokens", scale=2
            )
        with gr.Row():
            with gr.Accordion("How it works", open=False):
                gr.Markdown(HOW_IT_WORKS)
            with gr.Accordion("Sampling and γ schedule", open=False):
                with gr.Row():
                    temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
                    top_k = gr.Number(value=0, precision=0, label="top-k (0 = off)", minimum=0)
                with gr.Row():
                    top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="top-p")
                    seed = gr.Number(value=0, precision=0, label="Seed")
                schedule = gr.Radio(["constant", "heuristic"], value="constant", label="γ schedule")
            with gr.Accordion("Token tree options", open=False):
                tree_k = gr.Slider(1, 8, value=2, step=1, label="children per node (k)")
                tree_depth = gr.Slider(1, 16, value=4, step=1, label="depth")
                tree_nodes = gr.Slider(1, 64, value=12, step=1, label="nodes kept (N)")
            with gr.Accordion("Advanced: models and precision", open=False):
                target_id = gr.Textbox(first.target, label="Target (hub id or local folder)")
                draft_id = gr.Textbox(first.draft, label="Draft (hub id or local folder)")
                quantization = gr.Radio(
                    list(QUANTIZATIONS),
                    value=first.target_options.quantization,
                    label="Target quantization (bitsandbytes, CUDA only)",
                )
                dtype = gr.Radio(DTYPE_CHOICES, value=first.target_options.dtype, label="dtype")
                chat_template = gr.Checkbox(first.chat_template, label="Apply the chat template")
                draft_vocab = gr.Number(
                    first.draft_vocab,
                    precision=0,
                    minimum=0,
                    label="Draft vocabulary: score only the N most frequent tokens (0 = all)",
                )
        settings = [
            prompt,
            target_id,
            draft_id,
            quantization,
            dtype,
            method,
            gamma,
            schedule,
            temperature,
            top_k,
            top_p,
            seed,
            max_new_tokens,
            chat_template,
            tree_k,
            tree_depth,
            tree_nodes,
            draft_vocab,
        ]
        assert len(settings) == len(SETTING_NAMES)

        with gr.Tabs():
            with gr.Tab("Race"):
                status = gr.Markdown("", elem_id="status")
                with gr.Row():
                    with gr.Column():
                        gr.Markdown("### Baseline: the target alone")
                        base_pane = gr.HTML("", elem_id="baseline-pane", elem_classes="pane")
                    with gr.Column():
                        gr.Markdown("### Speculative")
                        gr.HTML(legend_html(("accepted", "rejected", "correction", "bonus", "unverified")))
                        spec_pane = gr.HTML("", elem_id="speculative-pane", elem_classes="pane")
                summary = gr.HTML("", elem_id="summary")
                with gr.Row():
                    race_plot = gr.Plot(label="race", elem_id="race-plot")
                    speedup_plot = gr.Plot(label="speedup", elem_id="speedup-plot")
                with gr.Row():
                    acceptance_plot = gr.Plot(label="acceptance", elem_id="acceptance-plot")
                    histogram_plot = gr.Plot(label="accepted length", elem_id="histogram-plot")
                breakdown_plot = gr.Plot(label="time breakdown", elem_id="breakdown-plot")
                with gr.Row():
                    export_btn = gr.DownloadButton("Download the last run (JSON trace)")
                    trace_file = gr.File(
                        label="Replay a trace (no model needed)", file_types=[".json"], type="filepath"
                    )
            with gr.Tab("Step inspector"):
                gr.Markdown(
                    "Walk through speculative decoding one target forward at a time: what was drafted, "
                    "the test each token went through, and at a rejection where the correction comes from."
                )
                with gr.Row():
                    step_start = gr.Button("Start step-by-step", variant="primary")
                    step_next = gr.Button("Next step")
                    step_last = gr.Button("Inspect the last run")
                step_slider = gr.Slider(0, 1, value=0, step=1, label="step")
                step_html = gr.HTML("", elem_id="inspector")
                step_plot = gr.Plot(label="step detail")
                stepper = gr.State(None)
            with gr.Tab("Benchmark"):
                with gr.Row():
                    bench_gammas = gr.Textbox("1,2,3,4,6,8", label="γ values")
                    bench_repeats = gr.Slider(1, 5, value=1, step=1, label="repeats (median)")
                    bench_hf = gr.Checkbox(False, label="also time transformers generate / assisted / prompt lookup")
                bench_btn = gr.Button("Run the γ sweep on this prompt", variant="primary")
                bench_plot = gr.Plot(label="speedup vs γ")
                bench_table = gr.HTML("")
            with gr.Tab("Theory"):
                gr.Markdown(
                    "Expected tokens per target forward (1 − α^(γ+1)) / (1 − α) and speedup "
                    "(1 − α^(γ+1)) / ((1 − α)(γc + 1)), with α the acceptance rate and c the draft's cost "
                    "relative to the target. The × marks the last measured run."
                )
                with gr.Row():
                    alpha = gr.Slider(0, 1, value=0.8, step=0.01, label="α (acceptance)")
                    theory_gamma = gr.Slider(1, 32, value=4, step=1, label="γ")
                    cost = gr.Slider(0, 1, value=0.1, step=0.01, label="c (draft step / target step)")
                theory_last = gr.Button("Use the last run's α, γ, c")
                theory_plot = gr.Plot(label="theory")
            with gr.Tab("Losslessness check"):
                gr.Markdown(
                    "Sample the first k tokens many times with the target alone and with speculative "
                    "decoding (this seed onwards), and compare the two distributions with a χ² test."
                )
                with gr.Row():
                    check_samples = gr.Slider(50, 2000, value=300, step=50, label="samples per side")
                    check_k = gr.Slider(1, 4, value=2, step=1, label="first k tokens")
                    check_temperature = gr.Slider(0.1, 2, value=1.0, step=0.05, label="temperature")
                check_btn = gr.Button("Run the check", variant="primary")
                check_text = gr.Markdown("")
                check_plot = gr.Plot(label="histograms")

        preset.change(
            preset_fields,
            preset,
            [target_id, draft_id, quantization, dtype, chat_template, draft_vocab, gamma, example, prompt],
        )
        example.change(lambda e: e or gr.skip(), example, prompt)
        outputs = [
            base_pane,
            spec_pane,
            summary,
            race_plot,
            acceptance_plot,
            histogram_plot,
            speedup_plot,
            breakdown_plot,
            status,
            last_trace,
        ]
        run_btn.click(run, settings, outputs, concurrency_id="models", api_visibility="private")
        stop_btn.click(stop, None, status, queue=False)
        export_btn.click(export_trace, last_trace, export_btn, api_visibility="private")
        trace_file.upload(replay, trace_file, outputs, api_visibility="private")

        inspector_out = [stepper, step_html, step_plot, step_slider]
        step_start.click(stepper_start, settings, inspector_out, concurrency_id="models", api_visibility="private")
        step_next.click(stepper_next, stepper, inspector_out, api_visibility="private")
        step_last.click(inspect_last, last_trace, inspector_out, api_visibility="private")
        step_slider.release(inspector_goto, [stepper, step_slider], [step_html, step_plot], api_visibility="private")

        bench_btn.click(
            benchmark,
            settings + [bench_gammas, bench_repeats, bench_hf],
            [bench_plot, bench_table],
            concurrency_id="models",
            api_visibility="private",
        )
        for control in (alpha, theory_gamma, cost):
            control.change(theory, [alpha, theory_gamma, cost, last_trace], theory_plot, api_visibility="private")
        theory_last.click(theory_from_last, last_trace, [alpha, theory_gamma, cost], api_visibility="private")
        demo.load(theory, [alpha, theory_gamma, cost, last_trace], theory_plot, api_visibility="private")
        check_btn.click(
            lossless,
            settings + [check_samples, check_k, check_temperature],
            [check_plot, check_text],
            concurrency_id="models",
            api_visibility="private",
        )
        gr.api(compare_api, api_name="compare", concurrency_id="models")
    demo.queue(max_size=MAX_QUEUE, default_concurrency_limit=CONCURRENCY)
    return demo


demo = build_demo()


def launch(**kwargs):
    """Bind to 127.0.0.1:7860 unless GRADIO_SERVER_NAME / GRADIO_SERVER_PORT say otherwise."""
    kwargs.setdefault("server_name", os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    kwargs.setdefault("server_port", int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    return demo.launch(css=CSS, **kwargs)


if __name__ == "__main__":
    launch()
