"""The Race tab: the Run button's live stream (panes, summary, figures, status) and a trace's replay."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

from specdemo.app.live import LiveRace
from specdemo.app.sessions import (
    clear_stop,
    stop_requested,
)
from specdemo.app.settings import (
    KEEP,
    Prepared,
    Settings,
    decoder,
    friendly,
    loading_text,
    prepare,
    update,
)
from specdemo.decoding import methods
from specdemo.decoding.suffix import shared_store, vocabulary_of
from specdemo.errors import SpecDemoError
from specdemo.measure.race import VLLM_LEGEND, RaceState
from specdemo.view import trace as traces
from specdemo.view.plots import (
    acceptance_figure,
    accepted_length_figure,
    race_figure,
    speedup_figure,
    time_breakdown_figure,
)
from specdemo.view.render import (
    choices_html,
    pane_titles,
    speedup_text,
    summary_html,
    token_spans,
    tokens_html,
)

# How often the page is redrawn while a race runs: a browser on the same cores redrawing 8 times a second
# made the target's steps uneven (jitter 2.3-2.4) and the typical-step speedup move ±10%; twice a second,
# jitter 1.3-1.6 and ±6% (two interleaved A/B runs: tools/race_stability.py --updates, docs/benchmarks.md)
PANES_EVERY_S = 0.5  # panes, summary and status
PLOTS_EVERY_S = 2.0  # the race, speedup and acceptance figures (the rest at the end)


# The race's outputs, in this order: panes, summary, figures, the settings box, status line, last run's trace.
RACE_OUTPUTS = (
    "baseline_title",
    "speculative_title",
    "baseline_pane",
    "speculative_pane",
    "summary",
    "race_plot",
    "speedup_plot",
    "acceptance_plot",
    "histogram_plot",
    "breakdown_plot",
    "settings_box",
    "status",
    "trace",
)


def outputs(**changed) -> tuple:
    """The RACE_OUTPUTS with ``changed`` set by name; the rest stays as it is on screen."""
    return tuple(changed.get(name, KEEP) for name in RACE_OUTPUTS)


def render(state: RaceState, decode, prompt: str, figures: str, status: str, trace=KEEP, settings_box=KEEP) -> tuple:
    """A race state → the RACE_OUTPUTS. ``figures``: "all", "live" (race, speedup and acceptance:
    the ones that change the most) or "none" (the figures stay as they are on screen)."""
    # sampling: the two sides draw their own random tokens, so a different token is no error
    reference = state.tokens("baseline") if state.greedy else None
    left, right, _ = state.about.sides
    right = right if state.lossless else f"{state.method} (not lossless)"
    mark = state.first_difference() if state.greedy and state.lossless else None
    if figures in ("all", "live"):
        base, spec = state.baseline, state.speculative
        vllm_both = state.about.both_on_vllm
        server = state.server_acceptance if state.server_counters is not None and vllm_both else None
        live = (
            race_figure(base, spec, right, left),
            speedup_figure(base, spec, over=left),
            acceptance_figure(spec, server),
        )
    else:
        live = (KEEP,) * 3
    rest = (
        (accepted_length_figure(state.speculative), time_breakdown_figure(state.speculative))
        if figures == "all"
        else (KEEP,) * 2
    )
    titles = pane_titles(state.method)
    return outputs(
        baseline_title=titles[0],
        speculative_title=titles[1],
        baseline_pane=tokens_html(token_spans(state.baseline, decode, mark=mark), state.greedy, prompt),
        speculative_pane=tokens_html(token_spans(state.speculative, decode, reference, mark), state.greedy, prompt)
        + choices_html(state.speculative),
        summary=summary_html(state.summary(), state.greedy, state.lossless),
        **dict(zip(("race_plot", "speedup_plot", "acceptance_plot"), live)),
        **dict(zip(("histogram_plot", "breakdown_plot"), rest)),
        settings_box=settings_box,
        status=status,
        trace=trace,
    )


def status_only(text: str) -> tuple:
    """The RACE_OUTPUTS that change the status line only (the rest stays as it is on screen)."""
    return outputs(status=text)


def failure(message: str) -> tuple:
    """A run that could not start or failed: one status line, nothing on screen lost."""
    return status_only(f"⚠ {message}")


def stream(s: Settings, session: str | None = None) -> Iterator[tuple]:
    """The Run button: both panes, the summary and the figures as the race goes on.

    The race runs on the model thread (``LiveRace``); this generator shows its latest state at a
    fixed rate, so rendering never slows the models down. Stop (``request_stop``) ends it at its
    next step with everything shown; closing the generator (Gradio does when the browser goes
    away) stops it too."""
    clear_stop(session)
    prep = None
    for item in prepared(s):  # status lines while the pair loads, then the pair (or a failure line)
        if isinstance(item, Prepared):
            prep = item
        else:
            yield item
    if prep is None:
        return
    # with the race's first picture the settings fold away, so both panes and the result fit a laptop's screen
    fold = update(open=False)
    decode = decoder(prep.pair.tokenizer)
    settings = asdict(s)
    device = str(prep.pair.target.device)
    live = LiveRace(prep.pair, prep.ids, prep.config, vllm_urls=s.vllm_urls())
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
                yield render(state, decode, prep.prompt, "live", status, trace, fold)
            else:
                yield render(state, decode, prep.prompt, "none", status, settings_box=fold)
            fold = KEEP
        if live.error is not None:
            yield failure(friendly(live.error))
            return
        state = live.snapshot()
        trace = traces.to_trace(state, settings, decode, device)
        trace["vocabulary"] = vocabulary_of(prep.pair.target)  # whose store its answer joins (ZeroGPU)
        trace["steps"] = prep.config.steps  # the kind both sides ran (a fallback's may differ from the asked one)
        if live.cancelled:
            end = f"■ stopped: {token_counts(state)}"
        else:
            note = " · ".join(n for n in (prep.note, VLLM_LEGEND if state.about.on_vllm else "") if n)
            end = done_status(state, live.wall_s, note)
        yield render(state, decode, prep.prompt, "all", end, trace, fold)
    finally:
        live.close()
        clear_stop(session)


def prepared(s: Settings) -> Iterator:
    """``prepare`` on a worker thread, yielding a status line every half second while it loads (a
    first run converts or loads models for seconds), then the Prepared, or a failure line."""
    started = time.perf_counter()
    yield status_only(f"● {loading_text(s)}…")
    with ThreadPoolExecutor(1, thread_name_prefix="prepare") as pool:
        job = pool.submit(prepare, s)
        while True:
            try:
                yield job.result(timeout=0.5)
                return
            except TimeoutError:
                # said again each time: a conversion reports its stages, then the pair loads
                yield status_only(f"● {loading_text(s)}… {time.perf_counter() - started:.0f} s")
            except Exception as error:
                yield failure(friendly(error))
                return


def remember_answer(outputs: tuple) -> None:
    """On ZeroGPU the race ran in a worker that keeps nothing: file a suffix-decoding race's answer
    (from its trace, the last output) in this process's store, which the next worker starts with."""
    trace = dict(zip(RACE_OUTPUTS, outputs)).get("trace")
    method = methods.REGISTRY.get(trace.get("method")) if isinstance(trace, dict) else None
    if method and method.suffix_store:
        answer = [t for step in trace["speculative"] for t in step["emitted"]]
        shared_store(trace.get("vocabulary", "")).remember(answer)


def token_counts(state: RaceState) -> str:
    """ "B + S tokens": what the baseline and the speculative side have written so far."""
    return f"{len(state.tokens('baseline'))} + {len(state.tokens('speculative'))} tokens"


def done_status(state: RaceState, wall_s: float, note: str = "") -> str:
    """✓ with the race's wall time and its compute time (both sides' own clocks, added up)."""
    summary = state.summary()
    speedup = "nothing to compare" if summary["nothing"] else f"speedup {speedup_text(summary)}"
    text = f"✓ done: {speedup} · {token_counts(state)}, compute {state.compute_s:.1f} s, wall {wall_s:.1f} s"
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
        [(s.elapsed_s, "b", s) for s in state.baseline] + [(s.elapsed_s, "s", s) for s in state.speculative],
        key=lambda e: e[0],
    )
    shown = RaceState(state.method, state.greedy, dtype=state.dtype)
    start = last = time.perf_counter()
    for t, side, step in events:
        (shown.baseline if side == "b" else shown.speculative).append(step)
        time.sleep(max(0.0, min(t, 30.0) - (time.perf_counter() - start)))  # the recorded clock
        if time.perf_counter() - last >= PANES_EVERY_S:
            last = time.perf_counter()
            yield render(shown, decode, prompt, "none", "▶ replaying a trace…")
    trace = traces.to_trace(state, settings, decode)
    yield render(state, decode, prompt, "all", "✓ replayed from the trace (no model ran)", trace)
