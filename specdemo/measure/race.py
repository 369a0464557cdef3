"""A race's record: both sides' steps so far and what they add up to (speedup, acceptance, identity)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specdemo.decoding import methods
from specdemo.decoding.engine import Step
from specdemo.measure.diagnosis import limited_by
from specdemo.measure.divergence import explain, first_difference
from specdemo.measure.metrics import (
    acceptance_per_position,
    acceptance_rate,
    choice_shares,
    mean_accepted_tokens,
    steady_speedup,
    step_jitter,
    tokens_per_second,
)

# Said under a vLLM race: what its colours can and cannot know.
VLLM_LEGEND = (
    "vLLM streams what each step emitted: green (kept drafts) and blue (bonus, all kept) are exact; "
    "yellow is inferred (the target's token after a shorter run: a rejection, or a shorter proposal); "
    "vLLM never sends rejected drafts, so none are struck; acceptance is from its /metrics"
)


MIN_TIMED_TOKENS = 8  # fewer tokens a side than this: too short to time
# The target's steps varied more than this (90th percentile over median): something else ran on the
# cores. tools/race_stability.py: 1.07–1.22 with no browser, 2.2–2.6 with chromium on the same 2 cores.
BUSY_JITTER = 1.6


@dataclass
class RaceState:
    method: str
    greedy: bool
    baseline: list[Step] = field(default_factory=list)
    speculative: list[Step] = field(default_factory=list)
    done: bool = False
    dtype: str = "float32"  # the target's weights: where greedy outputs may differ, this is why
    # A vLLM race: the speculative server's /metrics deltas (drafts, draft tokens, accepted, α per
    # position), which its stream cannot show. None for specdemo's own engine.
    server_counters: dict | None = None
    server_acceptance: list[tuple[int, float]] = field(default_factory=list)  # (steps so far, acceptance)

    @property
    def lossless(self) -> bool:
        return self.about.lossless

    @property
    def about(self) -> methods.Method:
        return methods.get(self.method)

    def tokens(self, side: str) -> list[int]:
        steps = self.baseline if side == "baseline" else self.speculative
        return [t for s in steps for t in s.emitted]

    @property
    def compute_s(self) -> float:
        """Both sides' own compute clocks added up: the race's time with nothing else running."""
        return sum(steps[-1].elapsed_s for steps in (self.baseline, self.speculative) if steps)

    def first_difference(self) -> int | None:
        """Index of the first token where the two outputs differ so far (None: none yet)."""
        return first_difference(self.tokens("baseline"), self.tokens("speculative"))

    def summary(self) -> dict:
        base, spec = self.baseline, self.speculative
        base_tps, spec_tps = tokens_per_second(base), tokens_per_second(spec)
        spec_tokens = sum(len(s.emitted) for s in spec)
        base_tokens = sum(len(s.emitted) for s in base)
        summed = spec_tps / base_tps if base_tps else 0.0
        # the headline: each side's typical step (a step something else on the cores slowed is left out);
        # in a browser on the same cores the summed clocks moved up to ±25% between identical races, this ±6%
        # (two interleaved A/B runs: docs/benchmarks.md)
        steady = steady_speedup(base, spec) if self.about.on_engine else None
        out = {
            "baseline_tokens_per_second": base_tps,
            "speculative_tokens_per_second": spec_tps,
            "speedup": steady if steady is not None else summed,
            "summed_speedup": summed,
            "baseline_tokens": base_tokens,
            "speculative_tokens": spec_tokens,
            "done": self.done,
            # a step's jitter is the whole figure below this: no speedup is claimed
            "too_short": min(base_tokens, spec_tokens) < MIN_TIMED_TOKENS,
            "nothing": not base and not spec,  # stopped before either side made a step
            "busy": (step_jitter(base) or 0.0) > BUSY_JITTER,  # the speedup then moves run to run
        }
        if not self.about.hand_off:
            out |= {
                "acceptance_rate": acceptance_rate(spec),
                "mean_accepted_tokens": mean_accepted_tokens(spec),
                "target_forwards": len(spec),
                # the baseline needs one target forward per token
                "target_forwards_saved": spec_tokens - len(spec),
            }
            out["alpha_per_position"] = acceptance_per_position(spec)  # [] for a tree: no positions
            if shares := choice_shares(spec):  # auto: where its tokens came from
                out["choice_shares"] = shares
            if self.server_counters is not None and self.about.both_on_vllm:  # its stream never shows rejections
                out["acceptance_rate"] = self.server_counters["acceptance_rate"]
                out["alpha_per_position"] = self.server_counters["alpha_per_position"]
            elif self.server_counters is not None:  # the left side is vLLM's: its acceptance beside ours
                out["server_acceptance_rate"] = self.server_counters["acceptance_rate"]
            # said once the race is over: "why no speedup?" from this run's own numbers (specdemo's
            # steps only: a vLLM stream has no draft or verify clocks to read it from)
            if self.done and self.server_counters is None and self.about.on_engine:
                why = limited_by(base, spec, self.method, out["speedup"])  # the headline's figure, not another clock
                out["limited_by"] = {"term": why["term"], "text": why["text"]} if why else None
        out["sides"] = self.about.sides
        diff = self.first_difference()
        out["identical_so_far"] = diff is None
        out["first_difference"] = diff
        out["dtype"] = self.dtype
        if diff is not None and self.greedy and self.lossless:
            out["divergence"] = explain(base, spec, self.dtype)
        return out
