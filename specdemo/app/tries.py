"""“Try another method on this prompt”: one click races the same prompt with another method, and
every race on that prompt stays listed next to the others (the panes show only the latest).

The list is plain data in a per-browser ``gr.State``: one row per finished race, read from its
trace (method, γ, speedup by wall clock, acceptance, τ, what held it back). A new prompt (or
another pair) starts a new list."""

from __future__ import annotations

from specdemo.app.settings import KEEP
from specdemo.app.tabs import gamma_for_method
from specdemo.decoding import methods
from specdemo.view.render import table_html

# What to suggest next is the registry's ``suggest`` order, skipping the ones already raced on this
# prompt: the model-free methods first (they cost nothing and win wherever the answer repeats text),
# then the combination, then the trees. Naive (not lossless) and vLLM (needs servers) are never suggested.


def label_of(name: str) -> str:
    return methods.REGISTRY[name].label if name in methods.REGISTRY else name


def tried_row(trace: dict) -> dict:
    """A finished race's trace → the row kept for it."""
    summary, settings = trace.get("summary", {}), trace.get("settings", {})
    why = summary.get("limited_by") or {}
    return {
        "on": [settings.get(k, "") for k in ("prompt", "target_id", "draft_id")],  # what the list is about
        "method": trace.get("method", ""),
        "gamma": settings.get("gamma"),
        "tokens": summary.get("speculative_tokens", 0),
        "speedup": summary.get("speedup", 0.0),
        "alpha": summary.get("acceptance_rate"),
        "tau": summary.get("mean_accepted_tokens"),
        "identical": summary.get("identical_so_far", True),
        "too_short": summary.get("too_short", False),
        # the ★ goes only to a run that counts: lossless and long enough to time
        "counts": not summary.get("too_short", False) and trace.get("method") in methods.names(lossless=True),
        "limited_by": why.get("term", ""),
    }


def keep_try(tries: list[dict] | None, trace: dict | None) -> list[dict]:
    """Add the last race to this prompt's list (a new prompt or pair starts a new list; a race
    that failed before its first step adds nothing: the last trace is still the earlier race's)."""
    tries = list(tries or [])
    if not isinstance(trace, dict) or not trace.get("speculative"):
        return tries
    row = tried_row(trace)
    if tries and tries[-1] == row:
        return tries
    if tries and tries[-1]["on"] != row["on"]:
        tries = []
    return [*tries, row]


def suggest(tries: list[dict]) -> str | None:
    """The next method to try: the first suggestion not raced on this prompt yet that runs here."""
    done = {t["method"] for t in tries}
    return next((m.name for m in methods.suggestions() if m.name not in done), None)


def tries_html(tries: list[dict]) -> str:
    if len(tries) < 2:
        return ""  # one race: the summary above says it all
    counted = [i for i, t in enumerate(tries) if t.get("counts", True)]
    best = max(counted, key=lambda i: tries[i]["speedup"]) if counted else None
    rows = []
    for i, t in enumerate(tries):
        alpha = "–" if t["alpha"] is None else f"{t['alpha']:.0%}"
        tau = "–" if t["tau"] is None else f"{t['tau']:.2f}"
        speedup = "– (too short)" if t.get("too_short") else f"{t['speedup']:.2f}×"
        speedup += " ★" if i == best else ""
        same = "yes" if t["identical"] else "no (see the divergence note)"
        rows.append([label_of(t["method"]), str(t["gamma"]), speedup, alpha, tau, same])
    return table_html(
        ["method", "γ", "× baseline (wall clock)", "drafts kept", "tokens per target forward", "same text"],
        rows,
        note=(
            f"Every race on this prompt ({len(tries)}), each against its own baseline run; ★ the fastest lossless "
            "run long enough to time."
        ),
    )


def after_race(tries: list[dict] | None, trace: dict | None) -> tuple:
    """After every race: the kept list, its table, and the suggestion for the next one."""
    tries = keep_try(tries, trace)
    nxt = suggest(tries)
    return tries, tries_html(tries), label_of(nxt) if nxt else KEEP


def pick(label: str | None, preset: str) -> tuple:
    """The one-click button: set the method (and its γ) to the suggestion, then the race runs."""
    if not label:
        return KEEP, KEEP
    return label, gamma_for_method(label, preset)
