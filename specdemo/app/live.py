"""A live side-by-side run: baseline vs a speculative, as a stream of growing states.

The app turns each state into components; this module knows nothing of gradio.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from specdemo.app import model_thread
from specdemo.decoding import methods
from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, interleave, naive_handoff_steps
from specdemo.errors import InputError
from specdemo.measure.divergence import dtype_name
from specdemo.measure.race import RaceState
from specdemo.models import vllm


def run_race(
    pair,
    prompt_ids: list[int],
    config: DecodeConfig,
    cancel: Callable[[], bool] | None = None,
    vllm_urls: dict[str, str] | None = None,
) -> Iterator[RaceState]:
    """Yield the state after every step of either side, until both finish (or ``cancel``); the
    right side runs ``config.method``.
    ``vllm_urls``: the vLLM method's servers (default: ``vllm.configured_urls()``)."""
    method = methods.get(config.method)
    if method.on_vllm:
        yield from vllm_race(pair, prompt_ids, config, cancel, vllm_urls or vllm.configured_urls())
        return
    if method.hand_off:
        speculative = naive_handoff_steps(pair.target, pair.draft, prompt_ids, config, pair.eos, cancel)
    else:
        speculative = decode_steps(pair.target, pair.draft, prompt_ids, config, pair.eos, cancel)
    baseline = baseline_steps(pair.target, prompt_ids, config, pair.eos, cancel)
    state = RaceState(config.method, config.sampling.greedy, dtype=dtype_name(pair.target))
    for side, step in interleave(baseline, speculative):
        (state.baseline if side == "baseline" else state.speculative).append(step)
        yield state
    state.done = True
    yield state


COUNTERS_EVERY_S = 0.5  # one /metrics request per half second: no load on the server worth measuring


def vllm_race(pair, prompt_ids, config: DecodeConfig, cancel, urls: dict[str, str]) -> Iterator[RaceState]:
    """The same race between two vLLM servers (baseline, speculative), both asked at once; or,
    ``config.method`` "vllm-vs-specdemo", vLLM's speculative server against specdemo's own engine (the
    draft model, greedy, fp32) on the same prompt: the server streams while this process decodes
    (on one machine they share its cores)."""
    if not config.sampling.greedy:
        raise InputError("the vLLM race is greedy (temperature 0): set the temperature to 0", field="temperature")
    method = config.method
    both_servers = methods.get(method).both_on_vllm
    if both_servers:
        baseline, speculative, counters = vllm.both_servers_steps(
            urls["baseline"], urls["speculative"], prompt_ids, config.max_new_tokens, pair.eos, cancel
        )
    else:
        baseline, counters = vllm.server_steps(urls["speculative"], prompt_ids, config.max_new_tokens, pair.eos, cancel)
        mine = replace(config, method=methods.DRAFT.name)  # specdemo's side: the draft model's chain
        speculative = decode_steps(pair.target, pair.draft, prompt_ids, mine, pair.eos, cancel)
    state = RaceState(method, True, dtype="float32" if both_servers else dtype_name(pair.target))

    def read_counters(mid_race: bool = False):  # the live acceptance: vLLM's counters so far
        try:
            delta = counters()
        except vllm.BackendError:
            if mid_race:  # a missed poll: the stream, read next, says whether the server is gone
                return
            raise
        state.server_counters = {
            "acceptance_rate": delta.acceptance_rate,
            "alpha_per_position": delta.alpha_per_position,
        }
        if delta.acceptance_rate is not None:
            server_side = state.speculative if both_servers else state.baseline
            state.server_acceptance.append((len(server_side), delta.acceptance_rate))

    last = time.perf_counter()
    for side, step in interleave(baseline, speculative):
        (state.baseline if side == "baseline" else state.speculative).append(step)
        if time.perf_counter() - last >= COUNTERS_EVERY_S:
            last = time.perf_counter()
            read_counters(mid_race=True)
        yield state
    read_counters()
    state.done = True
    yield state


class LiveRace:
    """The race on the model thread (the producer), so that whoever shows it (the consumer)
    renders the latest state at its own pace and never slows the models down.

        race = LiveRace(pair, ids, config)
        while not race.wait(0.1):
            show(race.snapshot())
        race.close()   # also stops a race still running (a closed browser tab, Stop)
    """

    def __init__(self, pair, prompt_ids: list[int], config: DecodeConfig, vllm_urls=None):
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._state = RaceState(config.method, config.sampling.greedy, dtype=dtype_name(pair.target))
        self.error: BaseException | None = None
        self.started = time.perf_counter()
        self.finished: float | None = None
        self._future = model_thread.submit(self._run, pair, prompt_ids, config, vllm_urls)

    def _run(self, pair, prompt_ids, config, vllm_urls) -> None:
        try:
            for state in run_race(pair, prompt_ids, config, self._cancel.is_set, vllm_urls):
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
        return replace(
            state,
            baseline=list(state.baseline),
            speculative=list(state.speculative),
            server_acceptance=list(state.server_acceptance),
        )

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
