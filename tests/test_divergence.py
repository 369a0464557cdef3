"""The divergence explainer on hand-built step records (no model)."""

from __future__ import annotations

import torch

from specdemo.decoding.steps import Step, StepViews, top_two
from specdemo.measure.divergence import explain, rounding_unit


def steps_of(tokens_and_rows, per_step=1):
    """Steps emitting the given tokens, each with its (argmax, logit, runner-up, logit) row."""
    steps = []
    for i in range(0, len(tokens_and_rows), per_step):
        chunk = tokens_and_rows[i : i + per_step]
        steps.append(Step(index=len(steps), emitted=[t for t, _ in chunk], views=StepViews(top2=[r for _, r in chunk])))
    return steps


def test_identical_outputs_have_no_divergence():
    rows = [(5, (5, 20.0, 6, 18.0)), (7, (7, 21.0, 3, 19.5))]
    assert explain(steps_of(rows), steps_of(rows, per_step=2), "bfloat16") is None


def test_a_bfloat16_near_tie_is_explained_at_the_first_difference():
    base = [(5, (5, 20.0, 6, 18.0)), (7, (7, 21.0, 9, 21.0)), (8, (8, 20.0, 1, 19.0))]
    spec = [(5, (5, 20.0, 6, 18.0)), (9, (9, 21.125, 7, 21.0)), (4, (4, 20.0, 1, 19.0))]
    why = explain(steps_of(base), steps_of(spec, per_step=3), "bfloat16", decode=str)
    assert why["position"] == 1 and why["baseline_token"] == 7 and why["speculative_token"] == 9
    assert why["baseline_top2_gap"] == 0.0 and why["verify_top2_gap"] == 0.125
    assert why["near_tie"] and why["rounding_tolerance"] == 4 * 0.125
    assert why["verdict"].startswith("near-tie flipped by bfloat16 rounding")
    assert why["typical_top2_gap"] == 1.0 and why["speculative_text"] == "9"


def test_a_wide_gap_is_flagged_as_a_bug_not_excused():
    base = [(7, (7, 21.0, 9, 18.0))]
    spec = [(9, (9, 21.0, 7, 19.0))]
    why = explain(steps_of(base), steps_of(spec), "float32")
    assert not why["near_tie"] and "this would be a bug" in why["verdict"]


def test_top_two_names_the_token_argmax_picked_even_on_an_exact_tie():
    rows = torch.tensor([[1.0, 3.0, 3.0, 0.0], [0.0, 1.0, 2.0, 5.0]])
    picked = rows.argmax(-1).tolist()
    assert [r[0] for r in top_two(rows)] == picked
    assert top_two(rows)[1] == (3, 5.0, 2, 2.0)
    assert rounding_unit(20.0, "bfloat16") == 0.125 and rounding_unit(20.0, "float32") < 1e-5
