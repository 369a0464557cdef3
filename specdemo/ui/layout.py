"""The tool tabs' layouts (the step inspector, benchmark, methods × tasks, theory, losslessness check) and the
Lesson's (the ui layer: gradio is imported here and in app.py only): app.py holds the race's layout and
wires every component, by the names these return."""

from __future__ import annotations

import gradio as gr

from specdemo.app import texts
from specdemo.decoding.drafters import MAX_GAMMA
from specdemo.measure.lesson import SCENES

Components = dict  # name → gradio component
SESSION_TTL_S = 3600  # a browser session's records are dropped an hour after its last use


def inspector_tab_ui() -> Components:
    ui: Components = {}
    gr.Markdown(texts.INSPECTOR)
    with gr.Row():
        ui["step_start"] = gr.Button("Start step-by-step", variant="primary")
        ui["step_next"] = gr.Button("Next step")
        ui["step_last"] = gr.Button("Inspect the last run")
    ui["step_slider"] = gr.Slider(0, 1, value=0, step=1, label="step")
    ui["step_html"] = gr.HTML("", elem_id="inspector")
    ui["step_plot"] = gr.Plot(label="step detail")
    ui["stepper"] = gr.State(None, time_to_live=SESSION_TTL_S)
    return ui


def benchmark_tab_ui() -> Components:
    ui: Components = {}
    with gr.Row():
        ui["bench_gammas"] = gr.Textbox("1,2,3,4,6,8", label="γ values")
        ui["bench_repeats"] = gr.Slider(1, 5, value=1, step=1, label="repeats (median)")
        ui["bench_hf"] = gr.Checkbox(False, label="also time transformers generate / assisted / prompt lookup")
    ui["bench_btn"] = gr.Button("Run the γ sweep on this prompt", variant="primary")
    ui["bench_plot"] = gr.Plot(label="speedup vs γ")
    ui["bench_table"] = gr.HTML("")
    return ui


def methods_tab_ui() -> Components:
    ui: Components = {}
    gr.Markdown(texts.METHODS_TAB)
    ui["methods_plot"] = gr.Plot(label="methods × tasks")
    ui["methods_table"] = gr.HTML("")
    ui["zoo_plot"] = gr.Plot(label="drafter zoo")
    with gr.Row():
        ui["methods_tokens"] = gr.Slider(16, 96, value=48, step=8, label="new tokens per prompt (re-measure)")
        ui["methods_btn"] = gr.Button("Re-measure on this machine (a few minutes)", variant="secondary")
    return ui


def theory_tab_ui() -> Components:
    ui: Components = {}
    gr.Markdown(texts.THEORY)
    with gr.Row():
        ui["alpha"] = gr.Slider(0, 1, value=0.8, step=0.01, label="α (acceptance)")
        ui["theory_gamma"] = gr.Slider(1, MAX_GAMMA, value=4, step=1, label="γ")
        ui["cost"] = gr.Slider(0, 1, value=0.1, step=0.01, label="c (draft step / target step)")
    with gr.Row():
        ui["theory_last"] = gr.Button("Use the last run's α, γ, c")
        ui["theory_note"] = gr.Markdown("")
    ui["theory_plot"] = gr.Plot(label="theory")
    return ui


def check_tab_ui() -> Components:
    ui: Components = {}
    gr.Markdown(texts.CHECK)
    with gr.Row():
        ui["check_samples"] = gr.Slider(50, 2000, value=100, step=50, label="samples per side")
        ui["check_k"] = gr.Slider(1, 4, value=2, step=1, label="first k tokens")
        ui["check_temperature"] = gr.Slider(0.1, 2, value=1.0, step=0.05, label="temperature")
    ui["check_btn"] = gr.Button("Run the check", variant="primary")
    ui["check_text"] = gr.Markdown("")
    ui["check_plot"] = gr.Plot(label="histograms")
    return ui


def lesson_tab_ui() -> Components:
    """The scenes, in order: each button sets a race up, opens its tab and starts it (app/lesson.py)."""
    ui: Components = {}
    gr.Markdown(texts.LESSON)
    for n, scene in enumerate(SCENES, 1):
        with gr.Row(equal_height=True):
            ui[f"scene:{scene.key}"] = gr.Button(f"{n}. {scene.title}", elem_id=f"scene-{scene.key}", min_width=300)
            with gr.Column(scale=3):
                gr.Markdown(scene.look)
    return ui
