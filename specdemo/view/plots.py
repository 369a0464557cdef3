"""Plotly figures from step records (no gradio). ``uirevision`` keeps zoom across live updates."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio

from specdemo.decoding import methods

COLOURS = {"baseline": "#7f7f7f", "speculative": "#2a9d8f", "accepted": "#52b788", "theory": "#e76f51"}


def _base_layout(title: str, x: str, y: str, height: int) -> dict:
    return dict(
        title=dict(text=title),
        xaxis=dict(title=dict(text=x)),
        yaxis=dict(title=dict(text=y)),
        height=height,
        margin=dict(l=50, r=20, t=40, b=40),
        uirevision="keep",  # live updates keep the user's zoom and do not flicker
        # above the plot, right of the title: below it, it ran into the x axis's title
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
        template=_TEMPLATE,
    )


_TEMPLATE = pio.templates["plotly_white"].to_plotly_json()


def _layout(fig: go.Figure, title: str, x: str, y: str, height: int = 280) -> go.Figure:
    fig.update_layout(_base_layout(title, x, y, height))
    return fig


def _live_figure(traces: list[dict], title: str, x: str, y: str, **layout) -> go.Figure:
    """A figure redrawn during the race, built from plain dicts WITHOUT plotly's property
    validation (``_validate=False``): validating costs ~10 ms a figure, a live race redraws
    several a second. tests/test_render_plots.py validates every one of them instead."""
    return go.Figure(data=traces, layout=_base_layout(title, x, y, 280) | layout, _validate=False)


def _nothing_checked(figure: go.Figure) -> go.Figure:
    """A run that drafted nothing checked (the naive hand-off, or a stop at once): say so, on sane axes."""
    figure.layout.annotations = [
        dict(text="no drafted token was checked in this run", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    ]
    figure.layout.xaxis.range, figure.layout.yaxis.range = [0, 1], [0, 1.05]
    return figure


def _hline(y: float) -> dict:
    return dict(type="line", xref="paper", x0=0, x1=1, y0=y, y1=y, line=dict(dash="dot", color=COLOURS["baseline"]))


def race_figure(
    base: Sequence, spec: Sequence, spec_label: str = "speculative", base_label: str = "baseline"
) -> go.Figure:
    """Tokens written vs own compute time: the race."""
    traces = [
        dict(
            type="scatter",
            x=[0] + [s.elapsed_s for s in steps],
            y=[0] + [s.new_tokens for s in steps],
            mode="lines",
            line=dict(color=colour, shape="hv"),
            name=name,
        )
        for name, steps, colour in ((base_label, base, COLOURS["baseline"]), (spec_label, spec, COLOURS["speculative"]))
    ]
    return _live_figure(traces, "The race: tokens vs compute time", "seconds", "tokens")


def acceptance_figure(spec: Sequence, server: Sequence[tuple[int, float]] | None = None) -> go.Figure:
    """Fraction of each step's draft that was kept, and the running acceptance rate.

    ``server``: (steps so far, acceptance so far) read from a serving engine's counters (vLLM),
    whose stream never shows the rejected drafts: then that running rate alone."""
    if server is not None:
        line = dict(type="scatter", x=[x for x, _ in server], y=[y for _, y in server], name="vLLM /metrics")
        figure = _live_figure([line], "Acceptance so far (vLLM's counters)", "step", "accepted / drafted")
        figure.layout.yaxis.range = [0, 1.05]
        return figure
    steps = [s for s in spec if s.drafted]
    running, kept, drafted = [], 0, 0
    for s in steps:
        kept, drafted = kept + s.accepted, drafted + len(s.drafted)
        running.append(kept / drafted)
    x = [s.index for s in steps]
    traces = [
        dict(
            type="bar",
            x=x,
            y=[s.accepted / len(s.drafted) for s in steps],
            name="this step",
            marker=dict(color=COLOURS["accepted"]),
        ),
        dict(type="scatter", x=x, y=running, name="running mean", line=dict(color="#264653")),
    ]
    figure = _live_figure(traces, "Acceptance per step", "step", "accepted / drafted")
    figure.layout.yaxis.range = [0, 1.05]
    return figure if steps else _nothing_checked(figure)


def accepted_length_figure(spec: Sequence) -> go.Figure:
    """How many drafted tokens each step kept (γ on the right means a full accept + bonus), every
    count from 0 to the longest proposal shown, so a run that kept nothing reads as one bar at 0."""
    counts: dict[int, int] = {}
    for s in spec:
        if s.drafted:
            counts[s.accepted] = counts.get(s.accepted, 0) + 1
    xs = list(range(max((len(s.drafted) for s in spec), default=0) + 1))  # a step keeps at most what it drafted
    bars = dict(
        type="bar", x=xs, y=[counts.get(x, 0) for x in xs], marker=dict(color=COLOURS["speculative"]), name="steps"
    )
    axis = dict(title=dict(text="accepted drafts"), dtick=1)  # whole counts
    figure = _live_figure([bars], "Accepted tokens per step", "accepted drafts", "steps", xaxis=axis)
    return figure if counts else _nothing_checked(figure)


def baseline_time_for(base: Sequence, tokens: int) -> float | None:
    """The baseline's compute time to reach ``tokens`` tokens (None if it has not yet)."""
    marks = [s.new_tokens for s in base]
    i = bisect.bisect_left(marks, tokens)
    return base[i].elapsed_s if i < len(base) else None


def running_speedup(base: Sequence, spec: Sequence) -> list[tuple[int, float]]:
    """(tokens, speedup) where speedup = baseline time to n tokens / speculative time to n tokens."""
    points = []
    for s in spec:
        t = baseline_time_for(base, s.new_tokens)
        if t is not None and s.elapsed_s > 0:
            points.append((s.new_tokens, t / s.elapsed_s))
    return points


def speedup_figure(base: Sequence, spec: Sequence, over: str = "baseline") -> go.Figure:
    points = running_speedup(base, spec)
    line = dict(
        type="scatter",
        x=[p[0] for p in points],
        y=[p[1] for p in points],
        mode="lines+markers",
        line=dict(color=COLOURS["speculative"]),
        name="speedup",
    )
    return _live_figure([line], f"Running speedup over the {over}", "tokens", "× faster", shapes=[_hline(1.0)])


def gamma_sweep_figure(rows: Sequence[dict]) -> go.Figure:
    """Measured speedup over the baseline vs γ, the prediction from measured step times, and
    the paper's curve (1 − α^(γ+1)) / ((1 − α)(γc + 1)) at the measured α and c."""
    from specdemo.measure.metrics import theoretical_speedup

    spec = sorted((r for r in rows if r["engine"] == "specdemo-speculative"), key=lambda r: r["gamma"])
    fig = go.Figure()
    if spec:
        g = [r["gamma"] for r in spec]
        fig.add_scatter(
            x=g,
            y=[r["speedup_over_baseline"] for r in spec],
            mode="lines+markers",
            name="measured",
            line=dict(color=COLOURS["speculative"]),
        )
        fig.add_scatter(
            x=g,
            y=[r["predicted_speedup"] for r in spec],
            mode="lines+markers",
            name="predicted from step times",
            line=dict(dash="dash", color="#264653"),
        )
        alpha = sum(r["acceptance_rate"] for r in spec) / len(spec)
        c = sum(r["cost_ratio"] for r in spec) / len(spec)
        xs = list(range(min(g), max(g) + 1))  # the γ range measured, not beyond it
        fig.add_scatter(
            x=xs,
            y=[theoretical_speedup(alpha, x, c) for x in xs],
            mode="lines" if len(xs) > 1 else "markers",
            name=f"theory (α={alpha:.2f}, c={c:.2f})",
            line=dict(color=COLOURS["theory"], dash="dot"),
        )
    fig.add_hline(y=1.0, line_dash="dot", line_color=COLOURS["baseline"])
    return _layout(fig, "Speedup vs γ", "γ (draft tokens per step)", "× over the baseline", height=360)


def time_breakdown_figure(spec: Sequence) -> go.Figure:
    """Per step: draft / verify / rest milliseconds, stacked."""
    xs = [s.index for s in spec]
    bars = [
        dict(type="bar", x=xs, y=[getattr(s, attr) * 1e3 for s in spec], name=name, marker=dict(color=colour))
        for name, attr, colour in (
            ("draft", "draft_s", "#8ecae6"),
            ("verify", "verify_s", "#219ebc"),
            ("rest", "rest_s", "#ffb703"),
        )
    ]
    return _live_figure(bars, "Where each step's time goes", "step", "milliseconds", barmode="stack")


def distribution_figure(step, decode) -> go.Figure:
    """At a rejection: the target's p, the draft's q and the residual norm(max(0, p − q)) (top 10 each)."""
    fig = go.Figure()
    ids: list[int] = []
    for top in (step.views.residual_top, step.views.p_top, step.views.q_top):
        ids += [int(i) for i, _ in top if int(i) not in ids]
    labels = [repr(decode(i)) for i in ids]
    for name, top, colour in (
        ("p (target)", step.views.p_top, "#264653"),
        ("q (draft)", step.views.q_top, "#e9c46a"),
        ("residual norm(max(0, p−q))", step.views.residual_top, "#e76f51"),
    ):
        if not top:  # greedy: no residual, the correction is simply the target's argmax
            continue
        values = {int(i): v for i, v in top}
        fig.add_bar(x=labels, y=[values.get(i, 0.0) for i in ids], name=name, marker_color=colour)
    fig.update_layout(barmode="group")
    return _layout(fig, "At the rejection: where the correction is drawn from", "token", "probability", height=320)


def tree_figure(step, decode) -> go.Figure:
    """A tree step's drafted token tree, depth left to right, the accepted path highlighted."""
    parents, path = step.tree_parents, set(step.tree_path)
    depth, rows = {}, {}
    for n, parent in enumerate(parents):
        depth[n] = 1 if parent < 0 else depth[parent] + 1
        rows[n] = sum(1 for m in range(n) if depth[m] == depth[n])
    pos = {-1: (0, 0.0)}
    for n in range(len(parents)):
        pos[n] = (depth[n], -float(rows[n]))
    fig = go.Figure()
    for n, parent in enumerate(parents):
        (x0, y0), (x1, y1) = pos[parent], pos[n]
        on = n in path
        fig.add_scatter(
            x=[x0, x1],
            y=[y0, y1],
            mode="lines",
            showlegend=False,
            hoverinfo="skip",
            line=dict(color=COLOURS["accepted"] if on else "#cccccc", width=4 if on else 1),
        )
    nodes = list(range(len(parents)))
    fig.add_scatter(
        x=[pos[n][0] for n in nodes],
        y=[pos[n][1] for n in nodes],
        mode="markers+text",
        text=[decode(step.drafted[n]) for n in nodes],
        textposition="top center",
        showlegend=False,
        marker=dict(size=14, color=[COLOURS["accepted"] if n in path else "#bbbbbb" for n in nodes]),
        hovertext=[f"q={step.q[n]:.3f} p={step.p[n]:.3f}" for n in nodes],
        hoverinfo="text",
    )
    fig.add_scatter(
        x=[0],
        y=[0],
        mode="markers+text",
        text=["root"],
        textposition="top center",
        marker=dict(size=14, color="#264653"),
        showlegend=False,
    )
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(showticklabels=False)
    return _layout(fig, f"Step {step.index}: the token tree ({len(path)} accepted)", "depth", "", height=320)


def theory_figure(alpha: float, gamma: int, c: float, measured: dict | None = None) -> go.Figure:
    """Expected tokens per target forward and speedup vs γ for the chosen α and c."""
    from plotly.subplots import make_subplots

    from specdemo.measure.metrics import expected_tokens_per_step, theoretical_speedup

    xs = list(range(1, 33))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens per target forward", "speedup"))
    fig.add_scatter(
        x=xs,
        y=[expected_tokens_per_step(alpha, g) for g in xs],
        name=f"α={alpha:.2f}",
        line=dict(color=COLOURS["speculative"]),
        row=1,
        col=1,
    )
    fig.add_scatter(
        x=xs,
        y=[theoretical_speedup(alpha, g, c) for g in xs],
        name=f"α={alpha:.2f}, c={c:.2f}",
        line=dict(color=COLOURS["theory"]),
        row=1,
        col=2,
    )
    fig.add_vline(x=gamma, line_dash="dot")
    if measured:
        fig.add_scatter(
            x=[measured["gamma"]],
            y=[measured["tau"]],
            mode="markers",
            name="last run",
            marker=dict(size=12, color="#000000", symbol="x"),
            row=1,
            col=1,
        )
        fig.add_scatter(
            x=[measured["gamma"]],
            y=[measured["speedup"]],
            mode="markers",
            showlegend=False,
            marker=dict(size=12, color="#000000", symbol="x"),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="γ")
    return _layout(fig, "Theory (Leviathan et al. 2023)", "γ", "", height=360)


def lossless_figure(check, decode, top: int = 20) -> go.Figure:
    """Side-by-side frequencies of the most common first-k-token sequences."""
    keys = sorted(
        set(check.baseline) | set(check.speculative), key=lambda x: -(check.baseline[x] + check.speculative[x])
    )[:top]
    labels = ["".join(decode(t) for t in key) or "∅" for key in keys]
    fig = go.Figure()
    fig.add_bar(
        x=labels, y=[check.baseline[k] / check.samples for k in keys], name="baseline", marker_color=COLOURS["baseline"]
    )
    fig.add_bar(
        x=labels,
        y=[check.speculative[k] / check.samples for k in keys],
        name="speculative",
        marker_color=COLOURS["speculative"],
    )
    fig.update_layout(barmode="group")
    return _layout(
        fig,
        f"First {check.k} token{'s' if check.k > 1 else ''}, {check.samples} samples each: χ² p = {check.p_value:.3f}",
        "sequence",
        "frequency",
        height=360,
    )


def tasks_figure(result: dict) -> go.Figure:
    """Methods × tasks: the measured speedup over the baseline as a heat map (1× is white)."""
    methods = list(dict.fromkeys(r["method"] for r in result["rows"]))
    tasks = list(result["best"])
    speed = {(r["task"], r["method"]): r["speedup"] for r in result["rows"]}
    z = [[speed.get((t, m)) for m in methods] for t in tasks]
    text = [
        [
            f"{v:.2f}×" + (" ★" if m == result["best"][t] else "") if v is not None else ""
            for v, m in zip(row, methods, strict=True)
        ]
        for row, t in zip(z, tasks, strict=True)
    ]
    top = max(2.0, max((v for row in z for v in row if v is not None), default=2.0))
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=methods,
            y=tasks,
            text=text,
            texttemplate="%{text}",
            zmin=0,
            zmid=1,
            zmax=top,
            colorscale=[[0, "#e76f51"], [1 / top, "#ffffff"], [1, "#2a9d8f"]],
            colorbar=dict(title="× baseline"),
        )
    )
    return _layout(fig, "speedup over the baseline (★ best method per task)", "method", "task", height=380)


def zoo_figure(result: dict, gamma: int | None = None, current: dict | None = None) -> go.Figure:
    """The drafter zoo: each method on each task as a point (c = draft cost per token / target
    step, α = acceptance), over Leviathan's predicted speedup τ / (γc + 1) with
    τ = (1 − α^(γ+1)) / (1 − α) (which assumes a verify costs one step). A drafter pays only when
    it is both right (up) and cheap (left): the contour 1× is where it breaks even. ``current``
    ({"method", "alpha", "c", "speedup"}): the last race, highlighted as a star."""
    from specdemo.measure.metrics import theoretical_speedup

    gamma = gamma or result.get("gammas", {}).get(methods.DRAFT.name) or 4
    alphas = [i / 50 for i in range(50)]  # α < 1: τ's formula divides by 1 − α
    top_c = max(0.3, max((r.get("c") or 0 for r in result["rows"]), default=0) * 1.2)
    costs = [top_c * i / 40 for i in range(41)]
    z = [[theoretical_speedup(a, gamma, c) for c in costs] for a in alphas]
    contours = go.Contour(
        x=costs,
        y=alphas,
        z=z,
        contours=dict(start=0.5, end=3.0, size=0.25, showlabels=True),
        colorscale=[[0, "#fbe3dc"], [0.2, "#ffffff"], [1, "#cdeee9"]],
        showscale=False,
        hoverinfo="skip",
        name=f"predicted × at γ = {gamma}",
    )
    fig = go.Figure(contours)
    symbols = ["circle", "square", "diamond", "triangle-up", "x", "cross", "pentagon"]
    for i, method in enumerate(dict.fromkeys(r["method"] for r in result["rows"])):
        rows = [r for r in result["rows"] if r["method"] == method and r.get("alpha") is not None]
        fig.add_trace(
            go.Scatter(
                x=[r.get("c") or 0.0 for r in rows],
                y=[r["alpha"] for r in rows],
                mode="markers",
                name=method,
                marker=dict(size=10, symbol=symbols[i % len(symbols)], line=dict(width=1, color="#333")),
                text=[
                    f"{r['task']}: α {r['alpha']:.2f}, c {r.get('c') or 0:.3f}, {r['speedup']:.2f}× measured"
                    for r in rows
                ],
                hoverinfo="text",
            )
        )
    if current:
        fig.add_trace(
            go.Scatter(
                x=[current["c"]],
                y=[current["alpha"]],
                mode="markers",
                name=f"your last race ({current['method']})",
                marker=dict(size=18, symbol="star", color="#d00000", line=dict(width=1, color="#333")),
                text=[f"your last race: α {current['alpha']:.2f}, c {current['c']:.3f}, {current['speedup']:.2f}×"],
                hoverinfo="text",
            )
        )
    title = f"the drafter zoo: acceptance α vs draft cost c (contours: predicted × at γ = {gamma}, verify = 1 step)"
    return _layout(fig, title, "c = draft cost per token / target step", "α (acceptance)", height=380)
