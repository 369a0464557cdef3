"""specdemo: speculative decoding, side by side with the target alone, live.

Layout and wiring only: what each button does lives in ``specdemo/app/`` (one module per tab or concern) (plain
functions of plain values); every number, token colour and figure comes from the engine's step
records. Configuration comes from environment variables:

    SPECDEMO_PRESET          model pair to start with (default: Qwen on CUDA; on a CPU SmolLM2-135M-Instruct
                             when installed, else the bundled TinyStories pair; on ZeroGPU qwen2.5-3b+0.5b)
    SPECDEMO_ZERO_GPU_PRESETS  on a ZeroGPU Space, the pairs loaded at start (comma-separated; default: the preset)
    SPECDEMO_CONCURRENCY     runs at once on the models (default 1: GPU work is serialised)
    SPECDEMO_MAX_QUEUE       requests waiting at most (default 32)
    SPECDEMO_MAX_NEW_TOKENS  cap on max new tokens (default 512)
    GRADIO_SERVER_NAME/PORT  where to listen (default 127.0.0.1:7860)
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

from specdemo import errors, models
from specdemo.app import api, durations, inspector, race, sessions, tabs, texts, tries
from specdemo.app.race import RACE_OUTPUTS
from specdemo.app.settings import (
    DTYPE_CHOICES,
    KEEP,
    MAX_NEW_TOKENS,
    SETTING_NAMES,
    Settings,
    find_problem,
    method_labels,
    preset_fields,
    start_note,
)
from specdemo.decoding import methods
from specdemo.models import vllm
from specdemo.view.render import legend_html, pane_titles

ASSETS = Path(__file__).resolve().parent / "assets"

ZERO_GPU = spaces is not None and models.on_zero_gpu()
PRESET = models.startup_preset()
CONCURRENCY = int(os.environ.get("SPECDEMO_CONCURRENCY", "1"))
MAX_QUEUE = int(os.environ.get("SPECDEMO_MAX_QUEUE", "32"))
SESSION_TTL_S = 3600  # a browser session's records are dropped an hour after its last use
if ZERO_GPU:  # a GPU call cannot keep what it loads: load the pairs now, serve only them (README)
    CHOICES = [n.strip() for n in os.environ.get("SPECDEMO_ZERO_GPU_PRESETS", PRESET).split(",") if n.strip()]
    models.preload_presets(CHOICES)
else:
    CHOICES = list(models.PRESETS)


def gpu(duration):
    """@spaces.GPU with a duration sized from the call's own arguments (a no-op without spaces)."""
    return spaces.GPU(duration=duration) if spaces is not None else (lambda fn: fn)


# Every handler that touches a model runs under @gpu; the rest is plain data.
@gpu(durations.race_seconds)
def race_on_device(request: gr.Request, progress=gr.Progress(track_tqdm=True), **settings):
    yield from race.race(Settings(**settings), session_of(request))


def run(request: gr.Request, progress=gr.Progress(track_tqdm=True), **settings):
    """The race. On ZeroGPU its worker keeps nothing: suffix decoding's answer is filed here."""
    last = None
    for last in race_on_device(request, progress=progress, **settings):
        yield last
    if ZERO_GPU and last is not None:
        race.remember_answer(last)


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
    """Runs before a model handler is queued: a refused setting is shown next to its input."""
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


def build_demo() -> gr.Blocks:
    first = models.PRESETS[PRESET]
    start = Settings.from_preset(PRESET)  # its measured method, γ and length where stored
    with gr.Blocks(title="specdemo: speculative decoding", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(texts.TITLE)
        notice = models.default_preset_notice()
        if notice and PRESET == models.default_preset_name():
            gr.Markdown(f"ℹ {notice}", elem_id="notice")
        last_trace = gr.State(None, time_to_live=SESSION_TTL_S)
        # The first screen is the race: prompt, pair and Run on top, the panes right under them.
        with gr.Row(equal_height=True):
            with gr.Column(scale=3):
                prompt = gr.Textbox(  # a long prompt scrolls inside the box: the row keeps its height
                    label="Prompt",
                    elem_id="prompt",
                    value=first.examples[0] if first.examples else "",
                    lines=1,
                    max_lines=4,
                )
            with gr.Column(scale=2):
                preset = gr.Dropdown(CHOICES, value=PRESET, label="Model pair", elem_id="preset")
            with gr.Column(scale=1, min_width=160):
                run_btn = gr.Button("Run", variant="primary", elem_id="run-btn")
                stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-btn", size="sm")
        with gr.Row():
            example = gr.Dropdown(list(first.examples), label="Example prompts", value=None, scale=3)
            method_label = gr.Dropdown(
                method_labels(), value=start.method_label, label="Method", scale=2, elem_id="method"
            )
            gamma = gr.Slider(1, 32, value=start.gamma, step=1, label="γ (draft tokens per step)", scale=2)
            max_new_tokens = gr.Slider(
                1, MAX_NEW_TOKENS, value=start.max_new_tokens, step=1, label="Max new tokens", scale=2
            )
        start_line = gr.Markdown(start_note(PRESET), elem_id="start-note")  # the measured start, and where it is from
        with gr.Row():
            with gr.Accordion("How it works", open=False):
                gr.Markdown(texts.HOW_IT_WORKS)
            with gr.Accordion("Sampling and γ schedule", open=False):
                with gr.Row():
                    temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
                    top_k = gr.Number(value=0, precision=0, label="top-k (0 = off)", minimum=0)
                with gr.Row():
                    top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="top-p")
                    seed = gr.Number(value=0, precision=0, label="Seed")
                schedule = gr.Radio(["constant", "heuristic"], value="constant", label="γ schedule")
            with gr.Accordion("Suffix decoding's memory", open=False):
                suffix_note = gr.Markdown(tabs.suffix_memory())
                forget_btn = gr.Button("Forget the earlier answers", size="sm")
            with gr.Accordion("Token tree options", open=False):
                tree_k = gr.Slider(1, 8, value=2, step=1, label="children per node (k)")
                tree_depth = gr.Slider(1, 16, value=4, step=1, label="depth")
                tree_nodes = gr.Slider(1, 64, value=12, step=1, label="nodes kept (N)")
            with gr.Accordion("Advanced: models and precision", open=False):
                target_id = gr.Textbox(first.target, label="Target (hub id or local folder)")
                draft_id = gr.Textbox(first.draft, label="Draft (hub id or local folder)")
                quantization = gr.Radio(
                    list(models.QUANTIZATIONS),
                    value=first.target_options.quantization,
                    label=(
                        "Target weights (8bit / 4bit: bitsandbytes, CUDA; int8-cpu: int8 weights on a CPU; "
                        "compact-fp32: the same fp32 numbers, kept as the GGUF's 4-bit blocks or 16 bits, CPU)"
                    ),
                )
                dtype = gr.Radio(list(DTYPE_CHOICES), value=first.target_options.dtype, label="dtype")
                chat_template = gr.Checkbox(first.chat_template, label="Apply the chat template")
                draft_vocab = gr.Number(
                    first.draft_vocab,
                    precision=0,
                    minimum=0,
                    label="Draft vocabulary: score only the N most frequent tokens (0 = all)",
                )
                vllm_default = vllm.configured_urls()  # the vLLM method's servers (README)
                with gr.Row():
                    vllm_baseline_url = gr.Textbox(
                        "", placeholder=vllm_default["baseline"], label="vLLM baseline server (the vLLM method)"
                    )
                    vllm_speculative_url = gr.Textbox(
                        "", placeholder=vllm_default["speculative"], label="vLLM speculative server"
                    )
        # Each setting's component is named after its Settings field: every model handler
        # gets them all by name (inputs_kwargs); a field without its component fails right here.
        components = locals()
        settings = {name: components[name] for name in SETTING_NAMES}

        with gr.Tabs():
            with gr.Tab("Race"):
                status = gr.Markdown("", elem_id="status")
                gr.HTML(legend_html(("accepted", "rejected", "correction", "bonus", "unverified", "target")))
                with gr.Row():
                    left_title, right_title = pane_titles(methods.DRAFT.name)  # each race says what its sides are
                    with gr.Column():
                        base_title = gr.Markdown(left_title, elem_id="baseline-title")
                        base_pane = gr.HTML("", elem_id="baseline-pane", elem_classes="pane")
                    with gr.Column():
                        spec_title = gr.Markdown(right_title, elem_id="speculative-title")
                        spec_pane = gr.HTML("", elem_id="speculative-pane", elem_classes="pane")
                summary = gr.HTML("", elem_id="summary")
                with gr.Row(equal_height=True):  # same prompt, another method: every result kept below
                    try_method = gr.Dropdown(
                        [m.label for m in methods.suggestions() if not m.missing()],
                        value=None,
                        label="Try another method on this prompt",
                        elem_id="try-method",
                        scale=3,
                    )
                    try_btn = gr.Button("Race it (the results so far stay listed)", elem_id="try-btn", scale=1)
                tries_table = gr.HTML("", elem_id="tries")
                tried = gr.State([], time_to_live=SESSION_TTL_S)
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
                gr.Markdown(texts.INSPECTOR)
                with gr.Row():
                    step_start = gr.Button("Start step-by-step", variant="primary")
                    step_next = gr.Button("Next step")
                    step_last = gr.Button("Inspect the last run")
                step_slider = gr.Slider(0, 1, value=0, step=1, label="step")
                step_html = gr.HTML("", elem_id="inspector")
                step_plot = gr.Plot(label="step detail")
                stepper = gr.State(None, time_to_live=SESSION_TTL_S)
            with gr.Tab("Benchmark"):
                with gr.Row():
                    bench_gammas = gr.Textbox("1,2,3,4,6,8", label="γ values")
                    bench_repeats = gr.Slider(1, 5, value=1, step=1, label="repeats (median)")
                    bench_hf = gr.Checkbox(False, label="also time transformers generate / assisted / prompt lookup")
                bench_btn = gr.Button("Run the γ sweep on this prompt", variant="primary")
                bench_plot = gr.Plot(label="speedup vs γ")
                bench_table = gr.HTML("")
            with gr.Tab("Which method when?"):
                gr.Markdown(texts.METHODS_TAB)
                methods_plot = gr.Plot(label="methods × tasks")
                methods_table = gr.HTML("")
                zoo_plot = gr.Plot(label="drafter zoo")
                with gr.Row():
                    methods_tokens = gr.Slider(16, 96, value=48, step=8, label="new tokens per prompt (re-measure)")
                    methods_btn = gr.Button("Re-measure on this machine (a few minutes)", variant="secondary")
            with gr.Tab("Theory"):
                gr.Markdown(texts.THEORY)
                with gr.Row():
                    alpha = gr.Slider(0, 1, value=0.8, step=0.01, label="α (acceptance)")
                    theory_gamma = gr.Slider(1, 32, value=4, step=1, label="γ")
                    cost = gr.Slider(0, 1, value=0.1, step=0.01, label="c (draft step / target step)")
                with gr.Row():
                    theory_last = gr.Button("Use the last run's α, γ, c")
                    theory_note = gr.Markdown("")
                theory_plot = gr.Plot(label="theory")
            with gr.Tab("Losslessness check"):
                gr.Markdown(texts.CHECK)
                with gr.Row():
                    check_samples = gr.Slider(50, 2000, value=100, step=50, label="samples per side")
                    check_k = gr.Slider(1, 4, value=2, step=1, label="first k tokens")
                    check_temperature = gr.Slider(0.1, 2, value=1.0, step=0.05, label="temperature")
                check_btn = gr.Button("Run the check", variant="primary")
                check_text = gr.Markdown("")
                check_plot = gr.Plot(label="histograms")

        preset.change(
            preset_fields,
            preset,
            [target_id, draft_id, quantization, dtype, chat_template, draft_vocab]
            + [method_label, gamma, max_new_tokens, start_line, example, prompt],
            api_visibility="private",
        )
        example.change(lambda e: e or KEEP, example, prompt, api_visibility="private")
        outputs = dict(baseline_title=base_title, speculative_title=spec_title)
        outputs |= dict(zip(("baseline_pane", "speculative_pane", "summary"), (base_pane, spec_pane, summary)))
        outputs |= dict(race_plot=race_plot, speedup_plot=speedup_plot, acceptance_plot=acceptance_plot)
        outputs |= dict(histogram_plot=histogram_plot, breakdown_plot=breakdown_plot, status=status, trace=last_trace)
        race_outputs = [outputs[name] for name in RACE_OUTPUTS]
        model_event = dict(concurrency_id="models", api_visibility="private", validator=validate)
        race_api = dict(api_visibility="public", api_name="race")  # the live race as a stream a client can cancel
        # "always_last": a click just after "✓ done", while the finished race still closes, runs once it
        # has closed instead of being dropped (gradio's default for a click ignores it while one is pending)
        race_event = run_btn.click(
            run, inputs_kwargs=settings, outputs=race_outputs, trigger_mode="always_last", **(model_event | race_api)
        )
        try_event = try_btn.click(
            tries.pick, [try_method, preset], [method_label, gamma], api_visibility="private"
        ).success(run, inputs_kwargs=settings, outputs=race_outputs, **model_event)
        methods_out = [methods_plot, methods_table, zoo_plot]
        for event in (race_event, try_event):  # after every race
            event.then(tabs.suffix_memory, None, suffix_note, api_visibility="private")
            tries_out = [tried, tries_table, try_method]
            event.then(tries.after_race, [tried, last_trace], tries_out, api_visibility="private")
            # the zoo marks the last race (its α and c) among the stored drafters
            event.then(tabs.methods_view, [preset, last_trace], methods_out, api_visibility="private")
        forget_btn.click(tabs.forget_answers, None, suffix_note, api_visibility="private")
        method_label.change(tabs.gamma_for_method, [method_label, preset], gamma, api_visibility="private")
        trace_file.upload(race.replay, trace_file, race_outputs, api_visibility="private")
        stop_btn.click(stop, None, status, queue=False, api_visibility="private")
        export_btn.click(export, last_trace, export_btn, api_visibility="private")

        inspector_out = [stepper, step_html, step_plot, step_slider]
        step_start.click(stepper_start, inputs_kwargs=settings, outputs=inspector_out, **model_event)
        step_next.click(inspector.stepper_next, stepper, inspector_out, api_visibility="private")
        step_last.click(inspector.inspect_last, last_trace, inspector_out, api_visibility="private")
        step_slider.release(
            inspector.inspector_goto, [stepper, step_slider], [step_html, step_plot], api_visibility="private"
        )

        bench_inputs = settings | dict(gammas=bench_gammas, repeats=bench_repeats, with_transformers=bench_hf)
        # one progress bar per long job, on its figure (not one on every output)
        bench_btn.click(
            benchmark,
            inputs_kwargs=bench_inputs,
            outputs=[bench_plot, bench_table],
            show_progress_on=bench_plot,
            **model_event,
        )
        theory_inputs = [alpha, theory_gamma, cost, last_trace]
        for control in (alpha, theory_gamma, cost):
            control.change(tabs.theory, theory_inputs, theory_plot, api_visibility="private")
        theory_last.click(
            tabs.theory_from_last, last_trace, [alpha, theory_gamma, cost, theory_note], api_visibility="private"
        )
        demo.load(tabs.theory, theory_inputs, theory_plot, api_visibility="private")
        check_inputs = settings | dict(samples=check_samples, k=check_k, check_temperature=check_temperature)
        check_btn.click(
            lossless,
            inputs_kwargs=check_inputs,
            outputs=[check_plot, check_text],
            show_progress_on=check_plot,
            **model_event,
        )
        gr.api(compare_api, api_name="compare", concurrency_id="models")
        methods_inputs = settings | dict(max_new_tokens=methods_tokens)
        methods_btn.click(
            methods_remeasure,
            inputs_kwargs=methods_inputs,
            outputs=[methods_plot, methods_table, zoo_plot],
            show_progress_on=methods_plot,
            **model_event,
        )
        preset.change(tabs.methods_view, preset, methods_out, api_visibility="private")
        demo.load(tabs.methods_view, preset, methods_out, api_visibility="private")
        demo.unload(forget)
    demo.queue(max_size=MAX_QUEUE, default_concurrency_limit=CONCURRENCY)
    return demo


demo = build_demo()


def launch(**kwargs):
    """Bind to 127.0.0.1:7860 unless GRADIO_SERVER_NAME / GRADIO_SERVER_PORT say otherwise."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    kwargs.setdefault("server_name", os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    kwargs.setdefault("server_port", int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    return demo.launch(css_paths=[ASSETS / "app.css"], **kwargs)


if __name__ == "__main__":
    launch()
