"""specdemo: speculative decoding, side by side with the target alone, live.

Layout and wiring only: what each button does lives in ``specdemo/app/`` (one module per tab or concern) (plain
functions of plain values); every number, token colour and figure comes from the engine's step
records. Configuration comes from environment variables: the SPECDEMO_* ones in ``specdemo/env.py`` (their
defaults and meaning, one place; ``python -m specdemo --help`` lists them) and GRADIO_SERVER_NAME / PORT (where to
listen, default 127.0.0.1:7860).
"""

from __future__ import annotations

try:  # first of all: on a ZeroGPU Space, spaces must patch CUDA before torch is imported
    import spaces
except ImportError:
    spaces = None

import functools
import logging
import os
from pathlib import Path

import gradio as gr

from specdemo import env, errors, models
from specdemo.app import (
    api,
    durations,
    inspector,
    lesson,
    race_tab,
    recordings,
    sessions,
    tabs,
    texts,
    tries,
    warmup,
)
from specdemo.app.race_tab import RACE_OUTPUTS
from specdemo.app.settings import (
    DTYPE_CHOICES,
    KEEP,
    MAX_NEW_TOKENS,
    PRESET_OUTPUTS,
    SETTING_NAMES,
    Settings,
    before_race,
    find_problem,
    method_choices,
    preset_fields,
    start_note,
)
from specdemo.decoding import methods
from specdemo.decoding.drafters import MAX_GAMMA
from specdemo.decoding.shapes import STEPS
from specdemo.decoding.steps import TREE_LIMITS, TreeConfig
from specdemo.measure.lesson import SCENES
from specdemo.models import vllm
from specdemo.ui import layout
from specdemo.view.render import legend_html, pane_titles

ASSETS = Path(__file__).resolve().parent / "assets"

# configured at import: a ZeroGPU Space's preload (below) logs its downloads before anything is served
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
ZERO_GPU = spaces is not None and env.on_zero_gpu()
PRESET = models.startup_preset()
CONCURRENCY = int(env.number("SPECDEMO_CONCURRENCY"))
MAX_QUEUE = int(env.number("SPECDEMO_MAX_QUEUE"))


def gpu(duration):
    """@spaces.GPU with a duration sized from the call's own arguments (a no-op without spaces)."""
    return spaces.GPU(duration=duration) if spaces is not None else (lambda fn: fn)


def zero_gpu_package(program, inductor_configs) -> bytes:
    """ZeroGPU's own AOTInductor compile (it also clears the libraries' executable-stack flag, which its workers
    refuse); only the package is kept: the weights stay the preloaded model's (decoding/aot.py)."""
    return spaces.aoti_compile(program, inductor_configs).archive_file.getvalue()


if ZERO_GPU:  # a GPU call cannot keep what it loads: load the pairs now, serve only them (docs/deploy.md)
    wanted = [PRESET, *env.get("SPECDEMO_ZERO_GPU_PRESETS").split(",")]
    CHOICES = list(dict.fromkeys(n.strip() for n in wanted if n.strip()))
    models.preload_presets(CHOICES)
    if env.get("SPECDEMO_STEPS") in ("compiled", "aot"):  # nothing compiles while serving: once, now, on the GPU
        models.install_ahead(gpu(durations.ahead_seconds)(models.compile_ahead)(package=zero_gpu_package))
else:
    CHOICES = list(models.PRESETS)


# Every handler that touches a model runs under @gpu; the rest is plain data.
@gpu(durations.race_seconds)
def race_on_device(request: gr.Request, progress=gr.Progress(track_tqdm=True), **settings):
    yield from race_tab.stream(Settings(**settings), session_of(request))


def run(request: gr.Request, progress=gr.Progress(track_tqdm=True), **settings):
    """The race, streamed: both panes, the summary and the figures as they change (a client may cancel it)."""
    # (the API page shows this docstring) on ZeroGPU the GPU worker keeps nothing: suffix decoding's answer is
    # filed here, in the process that lives on
    last, race = None, functools.partial(race_on_device, request, progress=progress, **settings)
    for last in recordings.race_or_replay(Settings(**settings), session_of(request), race):  # a room's repeats
        yield last
    if ZERO_GPU and last is not None:
        race_tab.remember_answer(last)


@gpu(durations.stepper_seconds)
def stepper_start(progress=gr.Progress(track_tqdm=True), **settings):
    return inspector.stepper_start(Settings(**settings))


@gpu(durations.benchmark_seconds)
def benchmark(progress=gr.Progress(track_tqdm=True), gammas="1,2,4", repeats=1, with_transformers=False, **settings):
    return tabs.benchmark(Settings(**settings), gammas, repeats, with_transformers)


@gpu(durations.methods_seconds)
def methods_remeasure(progress=gr.Progress(track_tqdm=True), **settings):
    return tabs.methods_remeasure(Settings(**settings), settings.pop("max_new_tokens", 48))


@gpu(durations.lossless_seconds)
def lossless(progress=gr.Progress(), samples=100, k=2, check_temperature=1.0, **settings):
    yield from tabs.lossless_stream(Settings(**settings), samples, k, check_temperature, progress)


def api_errors(fn):
    """A SpecDemoError becomes gr.Error: the API's caller sees its message (gr.Error also crosses a
    ZeroGPU worker intact, where other exceptions become "ZeroGPU worker error")."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except errors.SpecDemoError as error:
            raise gr.Error(str(error), print_exception=False) from None

    return call


compare_api = gpu(durations.compare_seconds)(api_errors(api.compare_api))


def validate(**values):
    """Runs before a model handler is queued: a refused setting never queues it (the line beside Run says why)."""
    problem = find_problem(Settings(**{name: values[name] for name in SETTING_NAMES}))
    field, message = problem or (None, "")
    return [gr.validate(name != field, message if name == field else "") for name in values]


def session_of(request: gr.Request | None) -> str | None:
    return getattr(request, "session_hash", None)


def export(trace, request: gr.Request):
    return sessions.export_trace(trace, session_of(request))


def stop(request: gr.Request):
    return sessions.request_stop(session_of(request))


def forget(request: gr.Request):
    sessions.forget_session(session_of(request))


Components = layout.Components  # name → gradio component: each section returns its own, named


def race_controls(first) -> Components:
    """The first screen: prompt, pair and Run."""
    ui: Components = {}
    with gr.Row(equal_height=True):
        with gr.Column(scale=3):
            ui["prompt"] = gr.Textbox(  # a long prompt scrolls inside the box: the row keeps its height
                label="Prompt",
                elem_id="prompt",
                value=first.examples[0] if first.examples else "",
                lines=1,
                max_lines=4,
            )
        with gr.Column(scale=2):
            named = [(f"{n} — {models.PRESETS[n].role}" if models.PRESETS[n].role else n, n) for n in CHOICES]
            ui["preset"] = gr.Dropdown(named, value=PRESET, label="Model pair", elem_id="preset")
        with gr.Column(scale=1, min_width=160):
            ui["run_btn"] = gr.Button("Run", variant="primary", elem_id="run-btn")
            ui["stop_btn"] = gr.Button("Stop", variant="secondary", elem_id="stop-btn", size="sm")
            # a refused run says why here, beside the button that was clicked (hidden otherwise: no line lost)
            ui["refusal"] = gr.Markdown("", elem_id="refusal", visible=False)
    return ui


def method_controls(first, start: Settings) -> Components:
    """Method, γ and length, and the line that says why the race starts with them."""
    ui: Components = {}
    with gr.Row():
        ui["example"] = gr.Dropdown(list(first.examples), label="Example prompts", value=None, scale=3)
        ui["method_label"] = gr.Dropdown(
            method_choices(), value=start.method_label, label="Method", scale=2, elem_id="method"
        )
        ui["gamma"] = gr.Slider(1, MAX_GAMMA, value=start.gamma, step=1, label="γ (draft tokens per step)", scale=2)
        # a number box, not a slider: a slider clamps a typed 0 or 100000 in the browser without a word; here
        # the run is refused with the reason beside Run
        ui["max_new_tokens"] = gr.Number(
            start.max_new_tokens, precision=0, label="Max new tokens", info=f"1 to {MAX_NEW_TOKENS}", scale=2
        )
    ui["start_line"] = gr.Markdown(start_note(PRESET), elem_id="start-note")  # the measured start, and why
    return ui


def option_accordions(first) -> Components:
    """Sampling, suffix decoding's memory, the tree's shape, models and precision: folded away."""
    ui: Components = {}
    with gr.Row():
        with gr.Accordion("How it works", open=False):
            gr.Markdown(texts.HOW_IT_WORKS)
        with gr.Accordion("Sampling and γ schedule", open=False):
            with gr.Row():
                ui["temperature"] = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
                ui["top_k"] = gr.Number(value=0, precision=0, label="top-k (0 = off)", minimum=0)
            with gr.Row():
                ui["top_p"] = gr.Slider(0.05, 1, value=1, step=0.05, label="top-p")
                ui["seed"] = gr.Number(value=0, precision=0, label="Seed")
            ui["schedule"] = gr.Radio(["constant", "heuristic"], value="constant", label="γ schedule")
        with gr.Accordion("Suffix decoding's memory", open=False):
            ui["suffix_note"] = gr.Markdown(tabs.suffix_memory())
            ui["forget_btn"] = gr.Button("Forget the earlier answers", size="sm")
        with gr.Accordion("Token tree options", open=False):
            tree, top = TreeConfig(), TREE_LIMITS
            ui["tree_k"] = gr.Slider(1, top.k, value=tree.k, step=1, label="children per node (k)")
            ui["tree_depth"] = gr.Slider(1, top.depth, value=tree.depth, step=1, label="depth")
            ui["tree_nodes"] = gr.Slider(1, top.max_nodes, value=tree.max_nodes, step=1, label="nodes kept (N)")
        with gr.Accordion("Advanced: models and precision", open=False):
            ui |= model_fields(first)
    return ui


def model_fields(first) -> Components:
    ui: Components = {}
    ui["target_id"] = gr.Textbox(models.shown_id(first.target), label="Target (hub id or local folder)")
    ui["draft_id"] = gr.Textbox(models.shown_id(first.draft), label="Draft (hub id or local folder)")
    ui["quantization"] = gr.Radio(
        list(models.QUANTIZATIONS),
        value=first.target_options.quantization,
        label=(
            "Target weights (8bit / 4bit: bitsandbytes, CUDA; int8-cpu: int8 weights on a CPU; "
            "compact-fp32: the same fp32 numbers, kept as the GGUF's 4-bit blocks or 16 bits, CPU)"
        ),
    )
    ui["dtype"] = gr.Radio(list(DTYPE_CHOICES), value=first.target_options.dtype, label="dtype")
    ui["chat_template"] = gr.Checkbox(first.chat_template, label="Apply the chat template")
    ui["steps"] = gr.Radio(
        list(STEPS),
        value=Settings.steps,
        label=(
            "Steps, on both sides (static: a preallocated KV cache; compiled: static + torch.compile, CUDA graphs "
            "on a GPU: the first run of a shape compiles, tens of seconds; aot: compiled ahead of time, chains only)"
        ),
    )
    ui["draft_vocab"] = gr.Number(
        first.draft_vocab,
        precision=0,
        minimum=0,
        label="Draft vocabulary: score only the N most frequent tokens (0 = all)",
    )
    vllm_default = vllm.configured_urls()  # the vLLM method's servers (README)
    with gr.Row():
        ui["vllm_baseline_url"] = gr.Textbox(
            "", placeholder=vllm_default["baseline"], label="vLLM baseline server (the vLLM method)"
        )
        ui["vllm_speculative_url"] = gr.Textbox(
            "", placeholder=vllm_default["speculative"], label="vLLM speculative server"
        )
    return ui


def race_tab_ui() -> Components:
    """Both panes, the summary, "try another method", the figures, download and replay. Named as
    ``RACE_OUTPUTS`` names them."""
    ui: Components = {}
    ui["status"] = gr.Markdown("", elem_id="status")
    gr.HTML(legend_html(("accepted", "rejected", "correction", "bonus", "unverified", "target"), compact=True))
    with gr.Row():
        left_title, right_title = pane_titles(methods.DRAFT.name)  # each race says what its sides are
        with gr.Column():
            ui["baseline_title"] = gr.Markdown(left_title, elem_id="baseline-title")
            ui["baseline_pane"] = gr.HTML("", elem_id="baseline-pane", elem_classes="pane")
        with gr.Column():
            ui["speculative_title"] = gr.Markdown(right_title, elem_id="speculative-title")
            ui["speculative_pane"] = gr.HTML("", elem_id="speculative-pane", elem_classes="pane")
    ui["summary"] = gr.HTML("", elem_id="summary")
    with gr.Row(equal_height=True):  # same prompt, another method: every result kept below
        ui["try_method"] = gr.Dropdown(
            [m.label for m in methods.suggestions()],
            value=None,
            label="Try another method on this prompt",
            elem_id="try-method",
            scale=3,
        )
        ui["try_btn"] = gr.Button("Race it (the results so far stay listed)", elem_id="try-btn", scale=1)
    ui["tries_table"] = gr.HTML("", elem_id="tries")
    ui["tried"] = gr.State([], time_to_live=layout.SESSION_TTL_S)
    with gr.Row():
        ui["race_plot"] = gr.Plot(label="race", elem_id="race-plot")
        ui["speedup_plot"] = gr.Plot(label="speedup", elem_id="speedup-plot")
    with gr.Row():
        ui["acceptance_plot"] = gr.Plot(label="acceptance", elem_id="acceptance-plot")
        ui["histogram_plot"] = gr.Plot(label="accepted length", elem_id="histogram-plot")
    ui["breakdown_plot"] = gr.Plot(label="time breakdown", elem_id="breakdown-plot")
    with gr.Row():
        ui["export_btn"] = gr.DownloadButton("Download the last run (JSON trace)", elem_id="export-btn")
        ui["trace_file"] = gr.File(label="Replay a trace (no model needed)", file_types=[".json"], type="filepath")
    return ui


TABS = {
    "Race": race_tab_ui,
    "Lesson": layout.lesson_tab_ui,
    "Step inspector": layout.inspector_tab_ui,
    "Benchmark": layout.benchmark_tab_ui,
    "Which method when?": layout.methods_tab_ui,
    "Theory": layout.theory_tab_ui,
    "Losslessness check": layout.check_tab_ui,
}
INSPECTOR_OUT = ("stepper", "step_html", "step_plot", "step_slider")
MODEL_EVENT = dict(concurrency_id="models", api_visibility="private", validator=validate)
PRIVATE = dict(api_visibility="private")


def wire_race(ui: Components, settings: Components) -> None:
    """Run, "race it", Stop, download and replay; after every race the tries list, the suffix
    memory and the drafter zoo follow."""
    race_outputs = [ui[name] for name in RACE_OUTPUTS]
    race_api = dict(api_visibility="public", api_name="race")  # the live race as a stream a client can cancel
    # "always_last": a click just after "✓ done", while the finished race still closes, runs once it
    # has closed instead of being dropped (gradio's default for a click ignores it while one is pending)
    # first the line beside Run (a refusal, or nothing: the field at fault may be folded away), then the race,
    # which its validator keeps from being queued when refused
    refusal = dict(inputs_kwargs=settings, outputs=[ui["refusal"], ui["status"]], queue=False, show_progress="hidden")
    refusal |= PRIVATE
    # while it waits, its place in line and the wait show once, on the status line (not on every output)
    race = dict(inputs_kwargs=settings, outputs=race_outputs, show_progress="minimal", show_progress_on=ui["status"])
    race |= MODEL_EVENT
    race_event = ui["run_btn"].click(before_race, trigger_mode="always_last", **refusal).then(run, **(race | race_api))
    try_event = (
        ui["try_btn"]
        .click(tries.pick, [ui["try_method"], ui["preset"]], [ui["method_label"], ui["gamma"]], **PRIVATE)
        .success(before_race, **refusal)
        .then(run, **race)
    )
    methods_out = [ui["methods_plot"], ui["methods_table"], ui["zoo_plot"]]
    events = [race_event, try_event]
    for scene in SCENES:  # a scene sets its race up, then runs it as Run does
        start = functools.partial(lesson.start, scene.key, CHOICES)
        clicked = ui[f"scene:{scene.key}"].click(start, None, [ui[name] for name in lesson.SCENE_OUTPUTS], **PRIVATE)
        if scene.shows != "theory":
            events.append(clicked.then(before_race, **refusal).then(run, **race))
        if scene.tab == "Step inspector":
            events[-1].then(lesson.first_refusal, ui["trace"], [ui[name] for name in INSPECTOR_OUT], **PRIVATE)
    for event in events:  # after every race
        event.then(tabs.suffix_memory, None, ui["suffix_note"], **PRIVATE)
        tries_out = [ui["tried"], ui["tries_table"], ui["try_method"]]
        event.then(tries.after_race, [ui["tried"], ui["trace"]], tries_out, **PRIVATE)
        # the zoo marks the last race (its α and c) among the stored drafters
        event.then(tabs.methods_view, [ui["preset"], ui["trace"]], methods_out, **PRIVATE)
        # the trace's file is the download button's value once the race ends: one click downloads it
        event.then(export, ui["trace"], ui["export_btn"], **PRIVATE)
    ui["forget_btn"].click(tabs.forget_answers, None, ui["suffix_note"], **PRIVATE)
    # (a person's pick: a scene or "try another method" sets the method and its γ together)
    ui["method_label"].input(tabs.gamma_for_method, [ui["method_label"], ui["preset"]], ui["gamma"], **PRIVATE)
    replayed = ui["trace_file"].upload(race_tab.replay, ui["trace_file"], race_outputs, **PRIVATE)
    replayed.then(export, ui["trace"], ui["export_btn"], **PRIVATE)
    ui["stop_btn"].click(stop, None, ui["status"], queue=False, **PRIVATE)
    ui["preset"].input(preset_fields, ui["preset"], [ui[name] for name in PRESET_OUTPUTS], **PRIVATE)
    ui["example"].change(lambda e: e or KEEP, ui["example"], ui["prompt"], **PRIVATE)


def wire_tabs(demo: gr.Blocks, ui: Components, settings: Components) -> None:
    """The inspector, the benchmark, the methods table, the theory and the losslessness check."""
    inspector_out = [ui[name] for name in INSPECTOR_OUT]
    ui["step_start"].click(stepper_start, inputs_kwargs=settings, outputs=inspector_out, **MODEL_EVENT)
    ui["step_next"].click(inspector.stepper_next, ui["stepper"], inspector_out, **PRIVATE)
    ui["step_last"].click(inspector.inspect_last, ui["trace"], inspector_out, **PRIVATE)
    step_view = [ui["step_html"], ui["step_plot"]]
    ui["step_slider"].release(inspector.inspector_goto, [ui["stepper"], ui["step_slider"]], step_view, **PRIVATE)
    # one progress bar per long job, on its figure (not one on every output)
    jobs = (
        ("bench_btn", benchmark, dict(gammas="bench_gammas", repeats="bench_repeats", with_transformers="bench_hf")),
        ("check_btn", lossless, dict(samples="check_samples", k="check_k", check_temperature="check_temperature")),
        ("methods_btn", methods_remeasure, dict(max_new_tokens="methods_tokens")),
    )
    outputs = {"bench_btn": ["bench_plot", "bench_table"], "check_btn": ["check_plot", "check_text"]}
    outputs["methods_btn"] = ["methods_plot", "methods_table", "zoo_plot"]
    for button, fn, extra in jobs:
        out = [ui[name] for name in outputs[button]]
        inputs = settings | {arg: ui[name] for arg, name in extra.items()}
        ui[button].click(fn, inputs_kwargs=inputs, outputs=out, show_progress_on=out[0], **MODEL_EVENT)
    theory_inputs = [ui["alpha"], ui["theory_gamma"], ui["cost"], ui["trace"]]
    for control in ("alpha", "theory_gamma", "cost"):
        ui[control].change(tabs.theory, theory_inputs, ui["theory_plot"], **PRIVATE)
    theory_out = [ui["alpha"], ui["theory_gamma"], ui["cost"], ui["theory_note"]]
    ui["theory_last"].click(tabs.theory_from_last, ui["trace"], theory_out, **PRIVATE)
    demo.load(tabs.theory, theory_inputs, ui["theory_plot"], **PRIVATE)
    gr.api(compare_api, api_name="compare", concurrency_id="models")
    methods_out = [ui["methods_plot"], ui["methods_table"], ui["zoo_plot"]]
    ui["preset"].change(tabs.methods_view, ui["preset"], methods_out, **PRIVATE)
    demo.load(tabs.methods_view, ui["preset"], methods_out, **PRIVATE)
    # what can run is read again for each visitor (a vLLM server may have started since)
    demo.load(lambda: gr.Dropdown(choices=method_choices()), None, ui["method_label"], **PRIVATE)
    # the start pair's loading (launch() starts it), on the Run button each second until it is over
    timer = gr.Timer(1.0)
    timer.tick(warmup.run_label, None, [ui["run_btn"], timer], show_progress="hidden", **PRIVATE)


def build_demo() -> gr.Blocks:
    first = models.PRESETS[PRESET]
    start = Settings.from_preset(PRESET)  # its measured method, γ and length where stored
    with gr.Blocks(title="specdemo: speculative decoding", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(texts.TITLE)
        notice = models.default_preset_notice()
        if notice and PRESET == models.default_preset_name():
            gr.Markdown(f"ℹ {notice}", elem_id="notice")
        ui: Components = {"trace": gr.State(None, time_to_live=layout.SESSION_TTL_S)}  # the last run's trace
        ui |= race_controls(first)
        # folded once a race starts, so both panes and the result fit a laptop's screen (reopen: click it)
        with gr.Accordion("Method, γ, length and options", open=True, elem_id="settings") as box:
            ui |= method_controls(first, start)
            ui |= option_accordions(first)
        ui["settings_box"] = box
        ui["scene_card"] = gr.Markdown("", visible=False, elem_id="scene-card")  # the Lesson's scene, once picked
        with gr.Tabs() as ui["tabs"]:
            for title, tab in TABS.items():
                with gr.Tab(title, id=title):
                    ui |= tab()
        # Each setting's component is named after its Settings field: every model handler gets them
        # all by name (inputs_kwargs); a field without its component fails right here.
        settings = {name: ui[name] for name in SETTING_NAMES}
        wire_race(ui, settings)
        wire_tabs(demo, ui, settings)
        demo.unload(forget)
    demo.queue(max_size=MAX_QUEUE, default_concurrency_limit=CONCURRENCY)
    return demo


demo = build_demo()


def launch(**kwargs):
    """Bind to 127.0.0.1:7860 unless GRADIO_SERVER_NAME / GRADIO_SERVER_PORT say otherwise."""
    kwargs.setdefault("server_name", os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    kwargs.setdefault("server_port", int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    if not ZERO_GPU:  # (a ZeroGPU Space loaded its pairs at import)
        warmup.start(PRESET)
    return demo.launch(css_paths=[ASSETS / "app.css"], **kwargs)


if __name__ == "__main__":
    launch()
