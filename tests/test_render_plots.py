"""Records → HTML and figures: colours, escaping, hover text, live plot data."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from specdemo.decoding.engine import Step
from specdemo.measure.race import RaceState
from specdemo.view.plots import (
    acceptance_figure,
    accepted_length_figure,
    gamma_sweep_figure,
    race_figure,
    running_speedup,
    speedup_figure,
)
from specdemo.view.render import legend_html, step_table_html, summary_html, token_spans, tokens_html


def live_figures(base, spec):
    """The figures the Race tab redraws as a race runs (``race_tab.render``)."""
    return race_figure(base, spec), acceptance_figure(spec), accepted_length_figure(spec), speedup_figure(base, spec)


WORDS = {1: "a", 2: "<b>", 3: "c", 4: "d", 5: "&e", 6: "f", 7: "g"}
decode = WORDS.__getitem__


def spec_steps():
    # step 0: drafted [1, 2, 3], kept 1 then rejected 2 → correction 4
    s0 = Step(
        0,
        drafted=[1, 2, 3],
        q=[0.9, 0.8, 0.5],
        p=[0.95, 0.2, 0.4],
        draws=[0.3, 0.7],
        accepted=1,
        correction=4,
        emitted=[1, 4],
        draft_s=0.01,
        verify_s=0.02,
        rest_s=0.001,
        new_tokens=2,
        elapsed_s=0.031,
    )
    # step 1: drafted [5, 6], all kept → bonus 7
    s1 = Step(
        1,
        drafted=[5, 6],
        q=[0.5, 0.5],
        p=[0.6, 0.9],
        draws=[0.1, 0.2],
        accepted=2,
        bonus=7,
        emitted=[5, 6, 7],
        draft_s=0.01,
        verify_s=0.02,
        rest_s=0.001,
        new_tokens=5,
        elapsed_s=0.062,
    )
    return [s0, s1]


def base_steps(n=5, dt=0.02):
    return [
        Step(i, emitted=[t], bonus=t, verify_s=dt, new_tokens=i + 1, elapsed_s=dt * (i + 1))
        for i, t in enumerate([1, 4, 5, 6, 7][:n])
    ]


def test_spans_give_each_draft_its_verdict_in_place():
    kinds = [(s["text"], s["kind"]) for s in token_spans(spec_steps(), decode)]
    assert kinds == [
        ("a", "accepted"),
        ("<b>", "rejected"),
        ("c", "rejected"),
        ("d", "correction"),
        ("&e", "accepted"),
        ("f", "accepted"),
        ("g", "bonus"),
    ]


def test_html_escapes_tokens_and_prompt_and_carries_hover_numbers():
    html = tokens_html(token_spans(spec_steps(), decode), greedy=False, prompt="<script>alert(1)</script>")
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;" in html and "&amp;e" in html
    assert 'class="tok tok-rejected"' in html and "line-through" in html
    assert 'title="p=0.200  q=0.800  min(1, p/q)=0.250  u=0.700 ≥ p/q"' in html
    assert "tok-correction" in html and "tok-bonus" in html


def test_differences_from_the_baseline_are_marked():
    spans = list(token_spans(spec_steps(), decode, reference=[1, 4, 5, 3, 7]))
    flagged = [s["text"] for s in spans if s.get("differs")]
    assert flagged == ["f"]  # position 3: baseline has 3 ("c"), speculative wrote 6 ("f")


def test_legend_names_every_colour():
    legend = legend_html()
    for label in ("accepted", "rejected", "correction", "bonus"):
        assert f"tok-{label}" in legend


def test_summary_reports_identity_and_savings():
    state = RaceState("draft", greedy=True, baseline=base_steps(), speculative=spec_steps())
    s = state.summary()
    assert s["identical_so_far"] and s["target_forwards_saved"] == 3
    assert s["acceptance_rate"] == 3 / 5 and s["mean_accepted_tokens"] == 2.5
    assert s["alpha_per_position"] == [1.0, 0.5]  # position 1: 2 of 2 kept; position 2: 1 of 2
    html = summary_html(s, greedy=True, lossless=True)
    assert "✓" in html and "α by position" in html and "100% / 50%" in html
    state.baseline[3].emitted = [3]
    assert "✗ differs at token 3" in summary_html(state.summary(), greedy=True, lossless=True)


def test_live_figures_hold_the_race_and_keep_zoom():
    race, acceptance, histogram, speedup = live_figures(base_steps(), spec_steps())
    for fig in (race, acceptance, histogram, speedup):
        assert fig.layout.uirevision == "keep"
    assert list(race.data[1].y) == [0, 2, 5] and list(race.data[0].y) == [0, 1, 2, 3, 4, 5]
    assert list(acceptance.data[0].y) == [1 / 3, 1.0] and list(acceptance.data[1].y) == [1 / 3, 3 / 5]
    assert list(histogram.data[0].x) == [0, 1, 2, 3] and list(histogram.data[0].y) == [0, 1, 1, 0]  # 0 to γ = 3
    assert histogram.layout.xaxis.dtick == 1  # whole counts on the axis
    kept_nothing = [Step(i, drafted=[1, 2, 3, 4], accepted=0, emitted=[5]) for i in range(2)]
    *_, nothing, _ = live_figures(base_steps(), kept_nothing)
    assert list(nothing.data[0].x) == [0, 1, 2, 3, 4] and list(nothing.data[0].y) == [2, 0, 0, 0, 0]
    # 5 tokens: baseline 0.100 s, speculative 0.062 s
    assert running_speedup(base_steps(), spec_steps())[-1] == (5, 0.1 / 0.062)


def test_the_inspector_shows_the_rule_greedy_uses_and_the_one_sampling_uses():
    step = Step(3, drafted=[1, 2, 3], q=[0.9, 0.8, 0.7], p=[0.6, 0.3, 0.2], accepted=1, correction=4, emitted=[1, 4])
    greedy = step_table_html(step, decode, greedy=True)
    assert "<th>rule</th>" in greedy and "min(1, p/q)" not in greedy
    assert greedy.count("argmax = draft") == 1 and greedy.count("argmax ≠ draft") == 1  # the third is unchecked
    step.draws = [0.1, 0.95]
    sampled = step_table_html(step, decode, greedy=False)
    assert "<th>min(1, p/q)</th>" in sampled and "<th>rule</th>" not in sampled and "0.950" in sampled


def test_the_drafter_zoo_puts_each_method_over_leviathans_contours():
    import json
    from pathlib import Path

    from specdemo.view.plots import zoo_figure

    result = json.loads((Path(__file__).parent.parent / "assets" / "tasks" / "smollm2-135m.json").read_text())
    current = {"method": "draft", "alpha": 0.4, "c": 0.09, "speedup": 1.1}
    figure = zoo_figure(result, gamma=4, current=current)
    contour, *points, star = figure.data
    assert contour.type == "contour" and {p.name for p in points} == {r["method"] for r in result["rows"]}
    assert star.name == "your last race (draft)" and (star.x[0], star.y[0]) == (0.09, 0.4)
    alphas, costs = list(contour.y), list(contour.x)
    i, j = alphas.index(0.8), costs.index(0.0)
    assert contour.z[i][j] == pytest.approx((1 - 0.8**5) / (1 - 0.8))  # τ at γ = 4, a free draft
    assert contour.z[0][j] == pytest.approx(1.0)  # α = 0: one token per step, no gain
    lookup = next(p for p in points if p.name == "prompt-lookup")
    assert max(lookup.x) < 0.01  # prompt lookup costs (almost) nothing to propose
    itself = next(p for p in points if p.name == "self-int8")  # the target in int8: right, but dear
    assert min(itself.y) > 0.9 and min(itself.x) > 0.5 and max(contour.x) > max(itself.x)
    go.Figure(figure)  # plotly validates the whole figure


def test_a_suffix_proposal_says_on_hover_where_it_was_seen():
    step = Step(0, drafted=[5, 6], q=[1.0, 1.0], p=[0.9, 0.1], accepted=1, correction=7, emitted=[5, 7])
    step.draft_source = {"from": "earlier answer", "ids": [1, 3, 5, 6]}
    html = tokens_html(token_spans([step], decode), greedy=True)
    assert html.count("proposed from an earlier answer: “ac&amp;ef”") == 2  # both drafted tokens, escaped
    plain = tokens_html(token_spans(spec_steps(), decode), greedy=True)
    assert "proposed from" not in plain  # a draft model's tokens have no source


def test_the_gamma_sweeps_theory_curve_spans_the_gammas_measured():
    def row(gamma, speedup):
        return {"engine": "specdemo-speculative", "gamma": gamma, "speedup_over_baseline": speedup,
                "predicted_speedup": speedup, "acceptance_rate": 0.6, "cost_ratio": 0.1}  # fmt: skip

    baseline = {"engine": "specdemo-baseline", "gamma": None}
    figure = gamma_sweep_figure([baseline, row(3, 1.1), row(1, 1.2), row(2, 1.3)])
    measured, predicted, theory = figure.data
    assert list(measured.x) == list(predicted.x) == [1, 2, 3]
    assert list(theory.x) == [1, 2, 3] and theory.mode == "lines"
    single = gamma_sweep_figure([baseline, row(2, 1.0)]).data[2]
    assert list(single.x) == [2] and single.mode == "markers"  # one γ: one point, no curve past it


def test_a_step_record_keeps_the_trace_format_with_its_views_beside_the_rule():
    """The inspector's rows live in ``Step.views``, yet a trace stays one flat record per step as
    before, and a record written before the split reads back into the same Step."""
    from specdemo.decoding.steps import StepViews

    step = Step(2, drafted=[1, 2], accepted=1, correction=5, emitted=[1, 5], views=StepViews(p_top=[(5, 0.7)]))
    record = step.to_dict()
    assert "views" not in record and record["p_top"] == [(5, 0.7)] and record["correction"] == 5
    old = dict(record, residual_top=[[5, 1.0]], unknown_key="ignored")  # an older trace's flat record
    back = Step.from_dict(old)
    assert back.views.p_top == [(5, 0.7)] and back.views.residual_top == [[5, 1.0]]
    assert back.accepted == 1 and back.emitted == [1, 5]
    assert Step.from_dict(step.to_dict()) == step  # control: the round trip changes nothing


def test_a_long_prompt_is_echoed_by_its_end_only():
    spans = token_spans([Step(0, emitted=[1])], decode)
    long = "x" * 4000 + " the end of the question"
    shown = tokens_html(spans, prompt=long)
    assert "…" in shown and "the end of the question" in shown and "x" * 300 not in shown
    assert "…" not in tokens_html(spans, prompt="a short question")  # control: a short one is whole


def test_a_race_on_a_busy_machine_says_its_speedup_moves():
    """The target's steps running unevenly (a browser on the same cores) gets the busy line; the
    control, even steps, does not (tools/race_stability.py measured both cases)."""

    def race(times):
        base = [Step(i, emitted=[1], verify_s=t) for i, t in enumerate(times)]
        spec = [Step(i, drafted=[1], accepted=1, emitted=[1, 1], verify_s=0.03) for i in range(20)]
        state = RaceState("draft", True, baseline=base, speculative=spec, done=True)
        return summary_html(state.summary(), greedy=True, lossless=True)

    assert "busy machine" in race([0.02] * 30 + [0.06] * 10)
    assert "busy machine" not in race([0.02] * 40)


def test_a_run_that_checked_no_draft_says_so_on_sane_axes():
    """The naive hand-off drafts nothing the target checks: its acceptance plots say so instead of
    showing empty axes from −1."""
    naive = [Step(i, emitted=[1], bonus=1, unverified=True) for i in range(4)]
    for figure in (acceptance_figure(naive), accepted_length_figure(naive)):
        go.Figure(figure.to_dict())  # valid
        assert "no drafted token was checked" in figure.layout.annotations[0].text
        assert tuple(figure.layout.yaxis.range) == (0, 1.05)
    checked = [Step(0, drafted=[1, 2], accepted=1, correction=3, emitted=[1, 3])]  # the control
    assert not acceptance_figure(checked).layout.annotations and not accepted_length_figure(checked).layout.annotations


def test_the_speedup_reads_each_sides_typical_step_and_says_when_the_summed_clocks_differ():
    """A few baseline steps slowed by something else on the cores move the summed clocks, not the
    headline (each side's steps after the first, the slowest tenth left out); the summary then shows
    both. The control: even steps, one figure."""

    def race(slow: int):
        base = [Step(i, emitted=[1], verify_s=0.03 * (5 if 0 < i <= slow else 1)) for i in range(21)]
        spec = [Step(i, drafted=[1], accepted=1, emitted=[1, 1], verify_s=0.03) for i in range(21)]
        state = RaceState("draft", True, baseline=base, speculative=spec, done=True)
        return state.summary()

    interfered, quiet = race(2), race(0)
    assert interfered["speedup"] == pytest.approx(2.0) and interfered["summed_speedup"] > 2.5
    assert "summed clocks" in summary_html(interfered, greedy=True, lossless=True)
    assert quiet["speedup"] == pytest.approx(quiet["summed_speedup"]) == pytest.approx(2.0)
    assert "summed clocks" not in summary_html(quiet, greedy=True, lossless=True)


def test_why_no_speedup_quotes_the_headlines_figure():
    """ "why no speedup?" reads the race's headline (each side's typical step), not the summed clocks: the
    summary said 0.98× above a line that said 1.01× (a story raced with auto)."""
    choice = {"source": "model", "gamma": 1, "bucket": 0, "expected": 1.4, "cost": 1.2, "reason": "γ 1 from draft"}
    base = [Step(i, emitted=[1], verify_s=0.03 * (5 if 0 < i <= 2 else 1)) for i in range(21)]
    spec = [Step(i, drafted=[1], emitted=[2], correction=2, verify_s=0.033, draft_choice=choice) for i in range(21)]
    s = RaceState("auto", True, baseline=base, speculative=spec, done=True).summary()
    assert s["summed_speedup"] > 1.15 > s["speedup"]  # the two clocks disagree: the slow baseline steps
    assert s["limited_by"]["text"].startswith(f"{s['speedup']:.2f}×: auto drafted on 21 of its 21 steps")
