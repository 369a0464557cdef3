""" "Why no speedup?" on synthetic step records: each term is named when it is the one at fault."""

from __future__ import annotations

import pytest

from specdemo.decoding.steps import Step
from specdemo.measure.diagnosis import limited_by, question, run_terms
from specdemo.measure.metrics import acceptance_per_position

T_T = 0.030  # one target step


def baseline(n: int = 40) -> list[Step]:
    return [Step(i, emitted=[1], verify_s=T_T) for i in range(n)]


def speculative(n: int, gamma: int, accepted: list[int], draft_s: float, verify_ratio: float, rest_s=0.0):
    """n steps drafting γ tokens, keeping accepted[i % len] of them, at the given costs."""
    steps = []
    for i in range(n):
        kept = accepted[i % len(accepted)]
        steps.append(
            Step(
                i,
                drafted=[7] * gamma,
                accepted=kept,
                emitted=[7] * (kept + 1),
                draft_s=draft_s * gamma,
                verify_s=T_T * verify_ratio,
                rest_s=rest_s,
            )
        )
    return steps


def test_acceptance_per_position_is_conditional_on_the_positions_before():
    steps = [Step(0, drafted=[1, 2, 3], accepted=0), Step(1, drafted=[1, 2, 3], accepted=2), Step(2, drafted=[1])]
    assert acceptance_per_position(steps) == [pytest.approx(1 / 3), 1.0, 0.0]


def test_low_acceptance_is_named_with_the_positions_where_drafts_fail():
    why = limited_by(baseline(), speculative(30, 3, [0, 0, 1], draft_s=0.002, verify_ratio=1.1))
    assert why["term"] == "acceptance"
    assert "kept 11%" in why["text"] and "by position: 33%, 0%)" in why["text"]
    assert "prompt lookup or suffix decoding" in why["text"]
    # a model-free method that found too little is pointed to a draft model instead
    from_suffix = limited_by(baseline(), speculative(30, 3, [0, 0, 1], draft_s=0.002, verify_ratio=1.1), "suffix")
    assert "Try a draft model (for new text)" in from_suffix["text"]


def test_an_expensive_draft_is_named():
    why = limited_by(baseline(), speculative(30, 4, [3, 4, 2], draft_s=0.7 * T_T, verify_ratio=1.1))
    assert why["term"] == "draft cost" and "c = 0.70" in why["text"]


def test_an_expensive_verify_is_named():
    why = limited_by(baseline(), speculative(30, 4, [2, 3, 1], draft_s=0.02 * T_T, verify_ratio=2.6))
    assert why["term"] == "verify cost" and "2.60 target steps" in why["text"]


def test_when_no_term_is_at_fault_the_overheads_are():
    why = limited_by(baseline(), speculative(30, 2, [2, 1], draft_s=0.05 * T_T, verify_ratio=1.1, rest_s=1.5 * T_T))
    assert why["term"] == "overheads"


def test_control_a_fast_run_says_nothing_and_a_wall_clock_speedup_overrides():
    fast = speculative(30, 4, [4, 3, 4], draft_s=0.02 * T_T, verify_ratio=1.1)
    assert run_terms(baseline(), fast)["speedup"] > 2
    assert limited_by(baseline(), fast) is None
    assert limited_by(baseline(), fast, speedup=0.9)["term"] == "overheads"
    assert limited_by(baseline(), []) is None  # nothing drafted: nothing to say


def test_a_speedup_from_a_run_that_kept_nothing_is_called_noise():
    """τ = 1: as many target forwards as the baseline, so a measured gain is the clock's, not the method's."""
    kept_nothing = speculative(30, 2, [0], draft_s=0.0, verify_ratio=0.8)  # a quicker machine on this side
    why = limited_by(baseline(), kept_nothing)
    assert why["term"] == "noise" and "1.25× with no drafted token kept (τ = 1.00)" in why["text"]
    assert limited_by(baseline(), kept_nothing, speedup=0.9)["term"] == "acceptance"  # slower: the usual reason
    # control: the same clocks with one token in two kept is a real gain, and nothing is said
    assert limited_by(baseline(), speculative(30, 2, [1, 0], draft_s=0.0, verify_ratio=0.8)) is None


def test_any_gain_from_a_run_that_kept_nothing_is_called_noise():
    """Not only past 1.15×: a 1.05× with τ = 1 is the clock's too (the summary used to say nothing)."""
    slightly = speculative(30, 1, [0], draft_s=0.0, verify_ratio=0.95)
    assert limited_by(baseline(), slightly)["term"] == "noise"
    # control: the same run a little slower than the baseline is read as a slow run, not noise
    assert limited_by(baseline(), speculative(30, 1, [0], draft_s=0.0, verify_ratio=1.05))["term"] != "noise"


def test_the_question_fits_the_number():
    assert question("noise", 1.3) == "is that speedup real?"
    assert question("acceptance", 0.9) == "why no speedup?"
    assert question("acceptance", 1.1) == "why not more?"


def test_advice_to_draft_less_only_where_the_run_has_something_to_shorten():
    low = [0, 0, 1]
    at_one = limited_by(baseline(), speculative(30, 1, low, draft_s=0.002, verify_ratio=1.1))
    at_three = limited_by(baseline(), speculative(30, 3, low, draft_s=0.002, verify_ratio=1.1))
    as_tree = limited_by(baseline(), speculative(30, 3, low, draft_s=0.002, verify_ratio=1.1), "tree")
    assert at_one["term"] == at_three["term"] == as_tree["term"] == "acceptance"
    assert "shorter γ" not in at_one["text"]  # γ = 1 has nothing shorter
    assert "shorter γ" in at_three["text"]  # control: the same advice where γ is 3
    assert "shorter γ" not in as_tree["text"] and "smaller tree" in as_tree["text"]  # a tree's size is not γ
    costly = limited_by(baseline(), speculative(30, 1, [1, 1, 0], draft_s=0.02 * T_T, verify_ratio=2.6))
    assert costly["term"] == "verify cost" and "shorter γ" not in costly["text"]


def auto_steps(n: int, drafting: int) -> list[Step]:
    """auto's records: ``drafting`` of n steps draft 1 token from the draft model (kept every third time), the
    rest choose γ 0, each with its reason."""
    from specdemo.decoding.auto import NONE

    steps = []
    for i in range(n):
        if i < drafting:
            kept = int(i % 3 == 0)
            reason = "γ 1 from draft model: expected 1.40 tokens for 1.30 steps"
            choice = {"source": "model", "gamma": 1, "reason": reason}
            steps.append(Step(i, drafted=[7], accepted=kept, emitted=[7] * (kept + 1), draft_s=0.3 * T_T,
                              verify_s=1.1 * T_T, draft_choice=choice))  # fmt: skip
        else:
            choice = {"source": NONE, "gamma": 0, "reason": "γ 0 (no draft): 1.00 tokens for 1.00 steps"}
            steps.append(Step(i, emitted=[7], verify_s=T_T, draft_choice=choice))
    return steps


def test_auto_is_explained_by_its_own_choices_a_run_that_never_drafted_included():
    never = limited_by(baseline(), auto_steps(40, 0), "auto", speedup=0.98)
    assert never["term"] == "auto" and "drafted on 0 of its 40 steps" in never["text"]
    assert "no draft 100%" in never["text"] and never["text"].endswith("γ 0 (no draft): 1.00 tokens for 1.00 steps.")
    some = limited_by(baseline(), auto_steps(40, 20), "auto", speedup=1.02)
    assert "drafted on 20 of its 40 steps" in some["text"] and "held back by acceptance (α 35%)" in some["text"]
    # the control: the same records under a fixed method get the fixed method's analysis, and a fast auto run none
    assert limited_by(baseline(), auto_steps(40, 20), "draft", speedup=1.02)["term"] == "acceptance"
    assert limited_by(baseline(), auto_steps(40, 0), "auto", speedup=1.3) is None
