"""A live side-by-side run: baseline vs a contender, as a stream of growing states.

The app turns each state into components; this module knows nothing of gradio.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from . import model_thread
from .divergence import dtype_name, explain, first_difference
from .engine import DecodeConfig, Step, baseline_steps, decode_steps, naive_handoff_steps, race
from .metrics import acceptance_rate, mean_accepted_tokens, tokens_per_second

# method shown in the UI → (description, lossless?)
METHODS = {
    "draft": ("speculative decoding with the draft model", True),
    "prompt-lookup": ("speculative decoding with prompt lookup (no draft model)", True),
    "tree": ("speculative decoding with a token tree drafted by the draft model", True),
    "naive": ("NOT speculative decoding: the draft writes the first half, the target continues", False),
}


@dataclass
class RaceState:
    method: str
    greedy: bool
    baseline: list[Step] = field(default_factory=list)
    contender: list[Step] = field(default_factory=list)
    done: bool = False
    dtype: str = "float32"  # the target's weights: where greedy outputs may differ, this is why

    @property
    def lossless(self) -> bool:
        return METHODS[self.method][1]

    def tokens(self, side: str) -> list[int]:
        steps = self.baseline if side == "baseline" else self.contender
        return [t for s in steps for t in s.emitted]

    @property
    def compute_s(self) -> float:
        """Both sides' own compute clocks added up: the race's time with nothing else running."""
        return sum(steps[-1].elapsed_s for steps in (self.baseline, self.contender) if steps)

    def first_difference(self) -> int | None:
        """Index of the first token where the two outputs differ so far (None: none yet)."""
        return first_difference(self.tokens("baseline"), self.tokens("speculative"))

    def summary(self) -> dict:
        base, spec = self.baseline, self.contender
        base_tps, spec_tps = tokens_per_second(base), tokens_per_second(spec)
        spec_tokens = sum(len(s.emitted) for s in spec)
        out = {
            "baseline_tokens_per_second": base_tps,
            "speculative_tokens_per_second": spec_tps,
            "speedup": spec_tps / base_tps if base_tps else 0.0,
            "baseline_tokens": sum(len(s.emitted) for s in base),
            "speculative_tokens": spec_tokens,
        }
        if self.method != "naive":
            out |= {
                "acceptance_rate": acceptance_rate(spec),
                "mean_accepted_tokens": mean_accepted_tokens(spec),
                "target_forwards": len(spec),
                # the baseline needs one target forward per token
                "target_forwards_saved": spec_tokens - len(spec),
            }
        diff = self.first_difference()
        out["identical_so_far"] = diff is None
        out["first_difference"] = diff
        out["dtype"] = self.dtype
        if diff is not None and self.greedy and self.lossless:
            out["divergence"] = explain(base, spec, self.dtype)
        return out


def run_race(
    pair, prompt_ids: list[int], config: DecodeConfig, method: str, cancel: Callable[[], bool] | None = None
) -> Iterator[RaceState]:
    """Yield the state after every step of either side, until both finish (or ``cancel``)."""
    if method == "naive":
        contender = naive_handoff_steps(pair.target, pair.draft, prompt_ids, config, pair.eos, cancel)
    else:
        cfg = replace(config, method=method)
        contender = decode_steps(pair.target, pair.draft, prompt_ids, cfg, pair.eos, cancel)
    baseline = baseline_steps(pair.target, prompt_ids, config, pair.eos, cancel)
    state = RaceState(method, config.sampling.greedy, dtype=dtype_name(pair.target))
    for side, step in race(baseline, contender):
        (state.baseline if side == "baseline" else state.contender).append(step)
        yield state
    state.done = True
    yield state


class LiveRace:
    """The race on the model thread (the producer), so that whoever shows it (the consumer)
    renders the latest state at its own pace and never slows the models down.

        race = LiveRace(pair, ids, config, "draft")
        while not race.wait(0.1):
            show(race.snapshot())
        race.close()   # also stops a race still running (a closed browser tab, Stop)
    """

    def __init__(self, pair, prompt_ids: list[int], config: DecodeConfig, method: str):
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._state = RaceState(method, config.sampling.greedy, dtype=dtype_name(pair.target))
        self.error: BaseException | None = None
        self.started = time.perf_counter()
        self.finished: float | None = None
        self._future = model_thread.submit(self._run, pair, prompt_ids, config, method)

    def _run(self, pair, prompt_ids, config, method) -> None:
        try:
            for state in run_race(pair, prompt_ids, config, method, cancel=self._cancel.is_set):
                self._state = state
        except BaseException as error:  # handed to the consumer, which shows it
            self.error = error
        finally:
            self.finished = time.perf_counter()
            self._done.set()

    def wait(self, seconds: float) -> bool:
        """Block up to ``seconds``; True once the race is over (finished, stopped or failed)."""
        return self._done.wait(seconds)

    def snapshot(self) -> RaceState:
        """A copy of the state so far that the producer will not change under the reader."""
        state = self._state
        return replace(state, baseline=list(state.baseline), contender=list(state.contender))

    @property
    def wall_s(self) -> float:
        return (self.finished or time.perf_counter()) - self.started

    def cancel(self) -> None:
        """Stop at the next step (the state keeps what was done)."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def close(self) -> None:
        self.cancel()
        self._done.wait(timeout=30)
