"""specdemo: speculative decoding, side by side with the target alone, live.

The UI only: every number, token colour and figure comes from step records that the
engine in ``specdemo/`` yields. Configuration comes from environment variables:

    SPECDEMO_PRESET          model pair to start with (default: Qwen on CUDA, bundled pair on CPU)
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
import time

import gradio as gr

from specdemo.cli import compare, comparison_record
from specdemo.engine import DecodeConfig
from specdemo.errors import SpecDemoError
from specdemo.live import run_race
from specdemo.models import PRESETS, QUANTIZATIONS, LoadOptions, default_preset_name, encode_prompt, load_pair
from specdemo.plots import live_figures
from specdemo.render import legend_html, summary_html, token_spans, tokens_html
from specdemo.sampling import SamplingConfig

try:  # on Hugging Face ZeroGPU Spaces, GPU work must run inside @spaces.GPU
    import spaces
except ImportError:
    spaces = None

log = logging.getLogger("specdemo.app")

PRESET = os.environ.get("SPECDEMO_PRESET", default_preset_name())
CONCURRENCY = int(os.environ.get("SPECDEMO_CONCURRENCY", "1"))
MAX_QUEUE = int(os.environ.get("SPECDEMO_MAX_QUEUE", "32"))
MAX_NEW_TOKENS = int(os.environ.get("SPECDEMO_MAX_NEW_TOKENS", "512"))
UPDATE_EVERY_S = 0.12  # at most ~8 screen updates a second; every step is still recorded
METHOD_LABELS = {
    "draft model": "draft",
    "prompt lookup": "prompt-lookup",
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


def prepare(
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
    chat_template=True,
):
    """Inputs → (pair, prompt ids, DecodeConfig). Raises SpecDemoError with a clear message."""
    from specdemo.errors import InputError

    if not (prompt or "").strip():
        raise InputError("the prompt is empty: type some text to continue")
    if not (target_id or "").strip():
        raise InputError("no target model: pick a preset or type a model id under Advanced")
    needs_draft = method in ("draft", "naive")
    if needs_draft and not (draft_id or "").strip():
        raise InputError("this method needs a draft model: type one under Advanced, or use prompt lookup")
    options = LoadOptions(dtype=dtype or "auto", quantization=quantization or "none")
    pair = load_pair(
        target_id.strip(), draft_id.strip() if needs_draft else None, options, LoadOptions(dtype=options.dtype)
    )
    config = DecodeConfig(
        max_new_tokens=int(max_new_tokens),
        gamma=int(gamma),
        schedule=schedule,
        method="draft" if method == "naive" else method,
        max_new_tokens_cap=MAX_NEW_TOKENS,
        sampling=SamplingConfig(float(temperature), int(top_k), float(top_p), int(seed)),
    )
    ids = encode_prompt(pair.tokenizer, prompt, chat_template=chat_template)
    return pair, ids, config


def decoder(tokenizer):
    return functools.lru_cache(maxsize=65536)(lambda t: tokenizer.decode([t]))


def render_state(state, decode, prompt: str, status: str):
    base_html = tokens_html(token_spans(state.baseline, decode), state.greedy, prompt)
    reference = state.tokens("baseline")
    spec_html = tokens_html(token_spans(state.contender, decode, reference), state.greedy, prompt)
    label = "naive (not lossless)" if state.method == "naive" else "speculative"
    return (
        base_html,
        spec_html,
        summary_html(state.summary(), state.greedy, state.lossless),
        *live_figures(state.baseline, state.contender, label),
        status,
    )


N_OUTPUTS = 8  # base pane, speculative pane, summary, four plots, status


def error_outputs(message: str):
    return (gr.skip(),) * (N_OUTPUTS - 1) + (f"⚠️ {message}",)


@gpu
def run(
    prompt,
    target_id,
    draft_id,
    quantization,
    dtype,
    method_label,
    gamma,
    schedule,
    temperature,
    top_k,
    top_p,
    seed,
    max_new_tokens,
    chat_template,
    progress=gr.Progress(track_tqdm=True),
):
    """The Run button: stream both panes, the summary and the plots as the race goes on."""
    method = METHOD_LABELS.get(method_label, "draft")
    try:
        progress(0, desc="loading models (first time only)")
        pair, ids, config = prepare(
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
        )
        decode = decoder(pair.tokenizer)
        last = 0.0
        for state in run_race(pair, ids, config, method):
            now = time.perf_counter()
            if state.done or now - last >= UPDATE_EVERY_S:
                last = now
                status = "✅ done" if state.done else "⏳ running…"
                yield render_state(state, decode, prompt, status)
    except Exception as error:  # shown in the UI; the app keeps serving
        yield error_outputs(friendly(error))


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
            raise SpecDemoError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
        if method not in ("draft", "prompt-lookup"):
            raise SpecDemoError("method must be draft or prompt-lookup")
        p = PRESETS[preset]
        pair, ids, config = prepare(
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
        )
        base, spec = compare(pair, ids, config)
        return comparison_record(pair.tokenizer, ids, base.steps, spec.steps)
    except Exception as error:
        raise gr.Error(friendly(error)) from error


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
        gr.update(choices=examples, value=None),
        examples[0] if examples else gr.skip(),
    )


CSS = """
.tokens { font-family: ui-monospace, monospace; font-size: 15px; }
.tok { border-radius: 3px; }
.pane { min-height: 180px; border: 1px solid #ddd; border-radius: 8px; padding: 10px; }
.legend { margin: 4px 0 8px; font-size: 13px; }
table.summary th { text-align: left; padding-right: 12px; }
table.summary td.value { font-weight: bold; padding-right: 12px; }
"""

INTRO = """# Speculative decoding, side by side
A small **draft** model proposes γ tokens; the large **target** checks all of them in **one** forward pass.
Each draft token x is kept with probability min(1, p(x)/q(x)), where p and q are the target's and the draft's
probabilities; at the first refusal the target draws a replacement from norm(max(0, p − q)), and if every draft is
kept it adds a bonus token. The output follows the target's own distribution exactly (in greedy mode: the very same
tokens), only faster. Hover a token to see its p, q and the test it went through."""


def build_demo() -> gr.Blocks:
    first = PRESETS[PRESET]
    with gr.Blocks(title="specdemo: speculative decoding") as demo:
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=3):
                prompt = gr.Textbox(label="Prompt", value=first.examples[0] if first.examples else "", lines=2)
                example = gr.Dropdown(list(first.examples), label="Example prompts", value=None)
            with gr.Column(scale=2):
                preset = gr.Dropdown(list(PRESETS), value=PRESET, label="Model pair")
                method = gr.Radio(list(METHOD_LABELS), value="draft model", label="Method")
        with gr.Row():
            gamma = gr.Slider(1, 32, value=4, step=1, label="γ (draft tokens per step)")
            schedule = gr.Radio(["constant", "heuristic"], value="constant", label="γ schedule")
            max_new_tokens = gr.Slider(
                1, MAX_NEW_TOKENS, value=min(128, MAX_NEW_TOKENS), step=1, label="Max new tokens"
            )
        with gr.Row():
            temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
            top_k = gr.Number(value=0, precision=0, label="top-k (0 = off)", minimum=0)
            top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="top-p")
            seed = gr.Number(value=0, precision=0, label="Seed")
        with gr.Accordion("Advanced: models", open=False):
            with gr.Row():
                target_id = gr.Textbox(first.target, label="Target (hub id or local folder)")
                draft_id = gr.Textbox(first.draft, label="Draft (hub id or local folder)")
            with gr.Row():
                quantization = gr.Radio(
                    list(QUANTIZATIONS),
                    value=first.target_options.quantization,
                    label="Target quantization (bitsandbytes, CUDA only)",
                )
                dtype = gr.Radio(DTYPE_CHOICES, value=first.target_options.dtype, label="dtype")
                chat_template = gr.Checkbox(first.chat_template, label="Apply the chat template")
        with gr.Row():
            run_btn = gr.Button("Run", variant="primary")
            stop_btn = gr.Button("Stop", variant="stop")
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

        preset.change(preset_fields, preset, [target_id, draft_id, quantization, dtype, chat_template, example, prompt])
        example.change(lambda e: e or gr.skip(), example, prompt)
        inputs = [
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
        ]
        outputs = [base_pane, spec_pane, summary, race_plot, acceptance_plot, histogram_plot, speedup_plot, status]
        run_event = run_btn.click(run, inputs, outputs, concurrency_id="models", api_visibility="private")
        stop_btn.click(lambda: "⏹ stopped", None, status, cancels=[run_event], queue=False)
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
