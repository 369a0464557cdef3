""" "Why no speedup?": which term of a run held it back, from the run's own step records.

A speculative step costs γ·t_d (drafting) + t_v (the verify) and emits τ tokens; the baseline pays
t_t per token. In units of one target step:

    speedup ≈ τ / (γ·c + t_v/t_t)          c = t_d / t_t   (Leviathan et al. 2023, with a real t_v)

So a run loses for one of three reasons, each with its own remedy:
- **acceptance** α too low: τ stays near 1 whatever the costs (another drafter for this task);
- **draft cost** γ·c too high: drafting eats the saving (a cheaper drafter, a shorter γ);
- **verify cost** t_v/t_t well above 1: checking γ+1 tokens costs several steps (a shorter γ).
Each term is compared with the value at which it stops being the problem (``GOOD``); the one
furthest past it is named. When none is, the time outside draft and verify is.

The other way round, a run that kept no drafted token (τ = 1: as many target forwards as the
baseline, each a verify at least as dear as a step) cannot be faster: a speedup measured there is
the machine's speed changing between the two sides' steps, and the summary says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from specdemo.decoding import methods
from specdemo.measure.metrics import (
    acceptance_per_position,
    acceptance_rate,
    choice_shares,
    mean_accepted_tokens,
    tokens_per_second,
)

SLOW = 1.15  # below this measured speedup the summary says why
GOOD = {"acceptance": 0.6, "draft cost": 0.25, "verify cost": 1.2}


def run_terms(baseline: Sequence, speculative: Sequence) -> dict | None:
    """α, τ, c, t_v/t_t, γ and the measured speedup of a race (None without drafts or baseline)."""
    drafting = [s for s in speculative[1:] if s.drafted]  # the first step also encodes the prompt
    base = baseline[1:]
    if not drafting or not base:
        return None
    t_t = statistics.median(s.verify_s for s in base)
    if t_t <= 0:
        return None
    drafted = sum(len(s.drafted) for s in drafting)
    gamma = drafted / len(drafting)
    base_tps = tokens_per_second(baseline)
    return {
        "speedup": tokens_per_second(speculative) / base_tps if base_tps else 0.0,
        "alpha": acceptance_rate(speculative),
        "per_position": acceptance_per_position(speculative),
        "tau": mean_accepted_tokens(speculative),
        "gamma": gamma,
        "c": sum(s.draft_s for s in drafting) / drafted / t_t,
        "verify_ratio": statistics.median(s.verify_s for s in drafting) / t_t,
        "rest_ratio": statistics.median(s.rest_s for s in drafting) / t_t,
    }


def shortfalls(terms: dict) -> dict[str, float]:
    """How far past its GOOD value each term is (> 0: it is part of the problem)."""
    return {
        "acceptance": (GOOD["acceptance"] - terms["alpha"]) / GOOD["acceptance"],
        "draft cost": (terms["gamma"] * terms["c"] - GOOD["draft cost"]) / GOOD["draft cost"],
        "verify cost": (terms["verify_ratio"] - GOOD["verify cost"]) / GOOD["verify cost"],
    }


def fewer_drafts(t: dict, method: str) -> str:
    """The advice to draft less, where this run's setting allows it: a chain that drafted more
    than one token a step has a γ to shorten; a tree's size is its own setting."""
    if methods.get(method).tree:
        return "a smaller tree (fewer nodes)"
    return "a shorter γ" if t["gamma"] > 1.5 else ""


def explain_term(term: str, t: dict, method: str) -> str:
    speedup = f"{t['speedup']:.2f}×"
    shorter = fewer_drafts(t, method)
    if term == "acceptance":
        positions = ", ".join(f"{share:.0%}" for share in t["per_position"][:4])
        m = methods.get(method)
        if m.draft_model:
            other = "prompt lookup or suffix decoding (for text that copies the prompt or earlier answers) or"
        elif m.suffix_store:
            other = "a draft model (for new text) or"
        else:
            other = "suffix decoding (it also remembers earlier answers), a draft model for new text, or"
        return (
            f"{speedup}: held back by acceptance. The target kept {t['alpha']:.0%} of the drafted tokens "
            f"(by position: {positions}), so each target forward emitted only τ = {t['tau']:.2f} tokens. "
            f"Try {other} {shorter + ', or ' if shorter else ''}a draft that knows this target better."
        )
    if term == "draft cost":
        return (
            f"{speedup}: held back by the draft's cost. Drafting {t['gamma']:.1f} tokens cost "
            f"{t['gamma'] * t['c']:.2f} target steps (c = {t['c']:.2f} per token) for τ = {t['tau']:.2f} tokens. "
            f"Try {shorter + ' or ' if shorter else ''}a cheaper drafter (prompt lookup and suffix decoding cost "
            "almost nothing)."
        )
    if term == "verify cost":
        return (
            f"{speedup}: held back by the verify's cost. Checking {t['gamma'] + 1:.0f} tokens in one forward cost "
            f"{t['verify_ratio']:.2f} target steps (ideal: 1) for τ = {t['tau']:.2f} tokens. "
            + (f"Try {shorter} " if shorter else "On this machine even a short verify costs more than a step ")
            + "(`python -m specdemo profile` shows where the forward grows with the number of tokens)."
        )
    return (
        f"{speedup}: acceptance ({t['alpha']:.0%}), draft cost (γ·c = {t['gamma'] * t['c']:.2f}) and verify cost "
        f"({t['verify_ratio']:.2f} steps) are each fair, but together with the step's other work "
        f"({t['rest_ratio']:.2f} steps) they leave τ = {t['tau']:.2f} tokens too little margin: a longer "
        "answer or a better draft would show the gain."
    )


def question(term: str, speedup: float) -> str:
    """What the summary's line answers: whether a gain is real, why a run did not gain, or why it
    did not gain more."""
    if term == "noise":
        return "is that speedup real?"
    return "why not more?" if speedup >= 1.0 else "why no speedup?"


def explain_noise(t: dict) -> str:
    return (
        f"{t['speedup']:.2f}× with no drafted token kept (τ = {t['tau']:.2f}): this run made as many target "
        "forwards as the baseline, so it cannot have been faster. The gain is the machine's speed changing "
        "between the two sides' steps (a shared CPU, another job); run it again to see the clocks agree."
    )


def explain_auto(speculative: Sequence, speedup: float, held_back: str = "") -> str:
    """auto's own numbers: on how many steps it drafted and from where, and the reason of its last choice (the
    expected tokens and the cost it weighed, from the costs measured at start-up)."""
    chosen = [s.draft_choice for s in speculative if s.draft_choice]
    drafted = sum(1 for c in chosen if c["gamma"])
    shares = ", ".join(f"{label} {share:.0%}" for label, share in choice_shares(speculative).items())
    text = (
        f"{speedup:.2f}×: auto drafted on {drafted} of its {len(chosen)} steps (tokens by source: {shares}). It "
        "drafts only where the tokens it expects beat the cost of the wider step on this machine; its last "
        f"choice was {chosen[-1]['reason']}."
    )
    return text + (f" Where it drafted, it was held back by {held_back}." if held_back else "")


def limited_by(
    baseline: Sequence, speculative: Sequence, method: str = methods.DRAFT.name, speedup: float | None = None
) -> dict | None:
    """When a run's measured speedup is below SLOW: {term, text, terms}; when a run that kept nothing
    shows one at or above it: the same, term "noise"; otherwise None.
    ``speedup``: the run's wall-clock speedup where the caller has one (else from the step clocks).
    auto's runs are explained by its own choices (term "auto"), a run that never drafted included."""
    terms = run_terms(baseline, speculative)
    chooses = method == methods.AUTO.name and any(s.draft_choice for s in speculative)
    if terms is None and chooses and baseline:
        base_tps = tokens_per_second(baseline)
        measured = speedup if speedup is not None else tokens_per_second(speculative) / base_tps if base_tps else 0.0
        if measured >= SLOW:
            return None
        return {"term": "auto", "text": explain_auto(speculative, measured), "terms": {"speedup": measured}}
    if terms is None:
        return None
    if speedup is not None:
        terms["speedup"] = speedup
    if terms["tau"] <= 1.0 and terms["speedup"] > 1.0:  # as many target forwards as the baseline
        return {"term": "noise", "text": explain_noise(terms), "terms": terms}
    if terms["speedup"] >= SLOW:
        return None
    past = shortfalls(terms)
    term = max(past, key=past.get)
    if past[term] <= 0:
        term = "overheads"
    if chooses:
        held = {
            "acceptance": f"acceptance (α {terms['alpha']:.0%})",
            "draft cost": f"the draft's cost (c = {terms['c']:.2f})",
            "verify cost": f"the verify's cost ({terms['verify_ratio']:.2f} steps)",
        }
        return {"term": "auto", "text": explain_auto(speculative, terms["speedup"], held.get(term, "")), "terms": terms}
    return {"term": term, "text": explain_term(term, terms, method), "terms": terms}
