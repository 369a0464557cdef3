"""Defaults chosen by measurement: the method, γ and length a preset's race starts with.

``python -m specdemo bench --defaults --preset NAME`` runs each candidate (a method at a γ)
against the baseline on the preset's example prompts, taking turns prompt by prompt
(``run_tasks``: the same clock, store and drift handling as methods × tasks), and keeps the
fastest by wall clock. ``store_defaults`` writes it to assets/defaults/NAME.json with every
candidate's figures and the machine it was measured on; the presets read it back
(``models.presets.start_settings``) and the app says so under the race's settings.
"""

from __future__ import annotations

import json
from pathlib import Path

from specdemo.decoding import methods
from specdemo.measure.tasks import run_tasks


def candidates() -> str:
    """What ``bench --defaults`` races, a method at a γ each, from the registry (e.g. "draft=1,draft=2,…")."""
    return ",".join(f"{m.name}={g}" for m in methods.REGISTRY.values() for g in m.start_gammas)


def label(method: str, gamma: int) -> str:
    return f"{method} γ={gamma}"


def choose_defaults(target, drafters: dict, prompts: list[list[int]], max_new_tokens: int, eos, progress=True) -> dict:
    """``drafters``: {(method, γ): (draft model or None, γ, engine method)}. Returns the fastest
    candidate and every candidate ranked by its speedup over the baseline (wall clock)."""
    by_label = {label(m, g): (m, g) for m, g in drafters}
    named = {label(m, g): drafter for (m, g), drafter in drafters.items()}
    result = run_tasks(target, named, {"examples": prompts}, max_new_tokens, eos, progress)
    ranked = []
    for row in sorted(result["rows"], key=lambda r: -r["speedup"]):
        method, gamma = by_label[row["method"]]
        ranked.append({"method": method, "gamma": gamma} | {k: row[k] for k in ("speedup", "alpha", "tau", "c")})
    best = ranked[0]
    return {
        "method": best["method"],
        "gamma": best["gamma"],
        "max_new_tokens": max_new_tokens,
        "ranked": ranked,
        "prompts": len(prompts),
        "seconds": result["seconds"],
    }


def format_defaults(chosen: dict) -> str:
    lines = [f"{'method':<16}{'γ':>3}{'× baseline':>12}{'α':>7}{'τ':>7}"]
    for r in chosen["ranked"]:
        lines.append(f"{r['method']:<16}{r['gamma']:>3}{r['speedup']:>12.2f}{r['alpha']:>7.2f}{r['tau']:>7.2f}")
    lines.append(
        f"→ starts with {chosen['method']} at γ = {chosen['gamma']}, {chosen['max_new_tokens']} new tokens "
        f"({chosen['prompts']} example prompts, {chosen['seconds'] / 60:.1f} minutes)"
    )
    return "\n".join(lines)


def store_defaults(path: Path, preset: str, chosen: dict, measured: str) -> Path:
    """Write the choice where ``models.presets.start_settings`` reads it (DEFAULTS_DIR/<preset>.json)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"preset": preset, "measured": measured} | chosen, indent=1, ensure_ascii=False) + "\n")
    return path
