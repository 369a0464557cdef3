"""The step inspector: one target forward at a time, from a run recorded here or the last race's trace."""

from __future__ import annotations

from specdemo.app import model_thread
from specdemo.app.settings import (
    KEEP,
    Settings,
    friendly,
    own_method,
    prepare,
    update,
)
from specdemo.decoding.engine import decode_steps, run_all
from specdemo.view import trace as traces
from specdemo.view.plots import (
    distribution_figure,
    tree_figure,
)
from specdemo.view.render import step_table_html, token_spans, tokens_html

# The inspector's outputs: its session (plain records), the step's HTML, its figure, the slider.


def inspector_view(steps, decode, greedy: bool, index: int):
    if not steps:
        return "<p>No steps yet.</p>", None, update(minimum=0, maximum=1, value=0)
    index = max(0, min(int(index), len(steps) - 1))
    step = steps[index]
    if step.tree_parents:
        figure = tree_figure(step, decode)
    elif step.views.p_top:
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
        own_method(s, "the step inspector")
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
    if not trace["speculative"]:
        return None, "<p>The last run stopped before its first step: run again.</p>", None, KEEP
    state, _, _ = traces.from_trace(trace)
    texts = {int(k): v for k, v in trace["token_text"].items()}
    return stepper_show({"steps": state.speculative, "texts": texts, "greedy": state.greedy, "shown": 0})


def inspector_goto(session: dict | None, index) -> tuple:
    if not session or not session.get("steps"):
        return KEEP, KEEP
    session["shown"] = max(0, min(int(index), len(session["steps"]) - 1))
    _, html, figure, _ = stepper_show(session)
    return html, figure
