"""Acceptance, τ, cost ratio c, and the speedup formulas of Leviathan et al. 2023."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def drafted_tokens(steps: Sequence) -> int:
    return sum(len(s.drafted) for s in steps)


def accepted_tokens(steps: Sequence) -> int:
    return sum(s.accepted for s in steps)


def emitted_tokens(steps: Sequence) -> int:
    return sum(len(s.emitted) for s in steps)


def acceptance_rate(steps: Sequence) -> float:
    """Accepted draft tokens / drafted tokens (0 when nothing was drafted)."""
    drafted = drafted_tokens(steps)
    return accepted_tokens(steps) / drafted if drafted else 0.0


def mean_accepted_tokens(steps: Sequence) -> float:
    """τ: emitted tokens per target verify forward (each step is one target forward)."""
    return emitted_tokens(steps) / len(steps) if steps else 0.0


def acceptance_per_position(steps) -> list[float]:
    """α_i: how often the i-th drafted token is kept, given the ones before it were (chains only)."""
    tested, kept = Counter(), Counter()
    for s in steps:
        if s.tree_parents:
            continue
        for i in range(min(len(s.drafted), s.accepted + 1)):
            tested[i] += 1
            kept[i] += i < s.accepted
    return [kept[i] / tested[i] for i in sorted(tested)]


def tokens_per_second(steps: Sequence) -> float:
    seconds = sum(s.seconds for s in steps)
    return emitted_tokens(steps) / seconds if seconds > 0 else 0.0


def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """E[tokens per target forward] = (1 − α^(γ+1)) / (1 − α)   (Leviathan et al., eq. 1)."""
    if alpha >= 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def theoretical_speedup(alpha: float, gamma: int, c: float) -> float:
    """Walltime improvement (1 − α^(γ+1)) / ((1 − α)(γc + 1)), assuming a verify costs one target step."""
    return expected_tokens_per_step(alpha, gamma) / (gamma * c + 1)


def predicted_speedup(tau: float, gamma: float, t_draft: float, t_target: float, t_verify: float) -> float:
    """The same prediction from measured times: τ·t_t / (γ·t_d + t_v)."""
    denominator = gamma * t_draft + t_verify
    return tau * t_target / denominator if denominator > 0 else 0.0


def best_gamma(alpha: float, c: float, max_gamma: int = 32) -> int:
    return max(range(1, max_gamma + 1), key=lambda g: theoretical_speedup(alpha, g, c))


def steady_speedup(baseline: Sequence, speculative: Sequence, trim: float = 0.1) -> float | None:
    """The speedup read off each side's typical step: tokens per second over its steps after the
    first (the prompt's prefill, the same work on both sides), the slowest ``trim`` of each side's
    steps left out: a step that something else on the machine slowed (a browser redrawing, the
    collector) moves a sum of clocks a lot and this little. None for a run too short to read."""
    base, spec = list(baseline[1:]), list(speculative[1:])
    if len(base) < 5 or len(spec) < 5:
        return None

    def rate(steps: list) -> float:
        kept = sorted(steps, key=lambda s: s.seconds)[: max(1, round(len(steps) * (1 - trim)))]
        seconds = sum(s.seconds for s in kept)
        return emitted_tokens(kept) / seconds if seconds > 0 else 0.0

    base_rate = rate(base)
    return rate(spec) / base_rate if base_rate else None


def step_jitter(steps: Sequence) -> float | None:
    """How unevenly a side's steps after the first ran: the 90th percentile of their times over the
    median (about 1 on a quiet machine; a browser or another job on the same cores raises it)."""
    times = sorted(s.seconds for s in steps[1:])
    if len(times) < 5 or times[len(times) // 2] <= 0:
        return None
    return times[int(0.9 * (len(times) - 1))] / times[len(times) // 2]


def choice_shares(steps: Sequence) -> dict[str, float]:
    """auto: the share of the emitted tokens made by the steps that drafted from each source (``LABELS``'
    words; a plain step's token counts for "no draft"). Empty where no step carries a choice."""
    from specdemo.decoding.auto import LABELS

    made: dict[str, int] = {}
    for s in steps:
        if s.draft_choice:
            label = LABELS[s.draft_choice["source"]]
            made[label] = made.get(label, 0) + len(s.emitted)
    total = sum(made.values())
    return {label: n / total for label, n in sorted(made.items(), key=lambda kv: -kv[1])} if total else {}
