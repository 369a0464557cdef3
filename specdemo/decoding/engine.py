"""Baseline and speculative decoding, as generators of plain per-step records.

Speculative sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023): a drafter
proposes x_1..x_k with distributions q_i; ONE target forward over [pending tokens, x_1..x_k]
gives p_1..p_{k+1}; each x_i is kept with probability min(1, p_i(x_i) / q_i(x_i)); at the first
rejection a token is drawn from norm(max(0, p_i − q_i)); if all k are kept, a bonus token is
drawn from p_{k+1}. Every emitted token is then distributed exactly as the target alone
would have drawn it. Greedy decoding is the limit in which p and q are one-hot: keep x_i
while it equals the target's argmax, then emit the target's argmax.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import torch

from specdemo.decoding import methods
from specdemo.decoding.drafters import SCHEDULES, Draft
from specdemo.decoding.kv import CachedLM, Stopwatch
from specdemo.decoding.sampling import SamplingConfig, draw, draw_uniform, make_generator, to_probs
from specdemo.decoding.steps import (  # noqa: F401  (re-exported: the engine's public names)
    DecodeConfig,
    Run,
    Step,
    TreeConfig,
    cache_room,
    closing_drafter,
    context_length,
    drive,
    eos_ids,
    finish_emitted,
    run_all,
    run_timed,
    settle,
    top_two,
    validate_config,
    validate_request,
)
from specdemo.decoding.suffix import SuffixStore, shared_store, vocabulary_of
from specdemo.decoding.tree import tree_steps
from specdemo.errors import InputError


def top_entries(probs: torch.Tensor, n: int = 10) -> list[tuple[int, float]]:
    values, ids = probs.topk(min(n, probs.shape[-1]))
    return [(int(i), float(v)) for i, v in zip(ids.tolist(), values.tolist(), strict=False)]


def verify_draft(
    logits: torch.Tensor, draft: Draft, sampling: SamplingConfig, generator, step: Step
) -> tuple[int, int]:
    """Apply the acceptance rule to ``draft`` given the target's logits [k+1, V]: (how many drafts
    are kept, the token emitted after them). Records p, q and the draws in ``step``; ``settle``
    records the verdict once the token budget and EOS have had their say."""
    k = len(draft)
    probs = to_probs(logits, sampling)  # p_1..p_{k+1}; plain softmax in greedy mode (display)
    step.drafted = list(draft.ids)
    if k:
        step.p = probs[torch.arange(k), torch.tensor(draft.ids)].tolist()
        step.q = draft.q_of_drafted()
    residual = None
    if sampling.greedy:
        # Greedy: keep x_i while it is the target's argmax; then emit the target's argmax.
        target_choice = logits.argmax(dim=-1).tolist()
        n = 0
        while n < k and draft.ids[n] == target_choice[n]:
            n += 1
        token = target_choice[n]
    else:
        n = 0
        while n < k:
            # Keep x with probability min(1, p(x)/q(x)): u ~ U[0,1) and keep iff u·q(x) < p(x).
            u = draw_uniform(generator)
            step.draws.append(u)
            if u * step.q[n] < step.p[n]:
                n += 1
                continue
            # First rejection: draw from the residual norm(max(0, p − q)), which puts back the
            # probability mass the draft under-proposed; this makes the output exactly ~ p.
            residual = (probs[n] - draft.q_row(n, probs.shape[-1], probs.device)).clamp_min(0)
            total = residual.sum()
            residual = residual / total if total > 0 else probs[n]
            break
        # All k kept: the bonus token comes from p_{k+1}, the one verify forward's last row.
        token = draw(residual if n < k else probs[k], generator)
    record_views(step, logits, probs, draft, n, residual, sampling.greedy)
    return n, token


def record_views(step: Step, logits, probs, draft: Draft, n: int, residual, greedy: bool) -> None:
    """What only the inspector and the divergence explainer show, read off the rows the rule used:
    the target's two best tokens at each emitted position (greedy), and at a rejection the top
    entries of p, q and the residual."""
    views = step.views
    if greedy:
        views.top2 = top_two(logits[: n + 1])
    if n < len(draft):
        views.p_top = top_entries(probs[n])
        views.q_top = top_entries(draft.q_row(n, probs.shape[-1], probs.device))
        if residual is not None:
            views.residual_top = top_entries(residual)


def make_drafter(config: DecodeConfig, draft_model, target: CachedLM, store: SuffixStore | None = None):
    """The chain drafter of ``config.method`` (its registry entry builds it)."""
    method = methods.get(config.method)
    methods.check_draft(method, draft_model)
    if method.suffix_store:
        store = store or shared_store(vocabulary_of(target.model))
    return method.drafter(config, draft_model, target, store)


def speculative_steps(
    target_model,
    draft_model,
    prompt_ids: list[int],
    config: DecodeConfig,
    eos: set[int] = frozenset(),
    cancel: Callable[[], bool] | None = None,
    store: SuffixStore | None = None,
) -> Iterator[Step]:
    """Speculative decoding; yields one Step per target verify forward. ``store``: suffix
    decoding's earlier answers (default: the process's)."""
    validate_request(prompt_ids, config, context_length(target_model))
    target = CachedLM(target_model, steps=config.steps, room=cache_room(config))
    drafter = make_drafter(config, draft_model, target, store)  # a feature drafter asks target for its layers
    # compiled steps: every verify of 1 + k drafts (k ≤ γ), and the draft model's steps, before any is timed
    target.capture(len(prompt_ids), [(1 + k, 1 + k) for k in range(config.gamma + 1)])
    if hasattr(drafter, "capture"):
        drafter.capture(len(prompt_ids))
    schedule = SCHEDULES[config.schedule](config.gamma)
    generator = make_generator(config.sampling.seed)

    def one_step(step: Step, tokens: list[int], budget: int) -> None:
        # Draft at most budget−1 tokens: with the bonus that fills the budget exactly.
        with Stopwatch(target.device) as t_draft:
            draft = drafter.propose(tokens, min(schedule.gamma, budget - 1), config.sampling, generator)
        with Stopwatch(target.device) as t_verify:
            # ONE target forward over [uncached tokens, x_1..x_k]: logits for p_1..p_{k+1}.
            logits = target.logits_after(tokens, draft.ids)
        with Stopwatch(target.device) as t_rest:
            accepted, token = verify_draft(logits, draft, config.sampling, generator, step)
            # Roll the target's cache back to the accepted prefix (the rejected drafts go).
            target.rollback_to(len(tokens) + accepted)
            schedule.update(len(draft), accepted)
            settle(step, draft.ids[:accepted], token, budget, eos, bonus=accepted == len(draft))
            tokens.extend(step.emitted)
        step.draft_s, step.verify_s, step.rest_s = t_draft.seconds, t_verify.seconds, t_rest.seconds
        step.draft_source, step.draft_choice = draft.source, draft.choice

    return closing_drafter(drive(one_step, prompt_ids, config, cancel), drafter)


def decode_steps(
    target_model,
    draft_model,
    prompt_ids: list[int],
    config: DecodeConfig,
    eos: set[int] = frozenset(),
    cancel: Callable[[], bool] | None = None,
    store: SuffixStore | None = None,
) -> Iterator[Step]:
    """Speculative decoding by ``config.method``: a chain (draft model, prompt lookup, suffix) or a tree."""
    method = methods.get(config.method)
    if not method.on_engine:
        raise InputError(f"{method.label} is not run by this engine", field="method")
    if method.tree:
        methods.check_draft(method, draft_model)
        return tree_steps(target_model, draft_model, prompt_ids, config, config.tree, eos, cancel, store)
    return speculative_steps(target_model, draft_model, prompt_ids, config, eos, cancel, store)


def baseline_steps(
    target_model,
    prompt_ids: list[int],
    config: DecodeConfig,
    eos: set[int] = frozenset(),
    cancel: Callable[[], bool] | None = None,
) -> Iterator[Step]:
    """The target alone, KV-cached, one token per forward, through the same sampling code."""
    validate_request(prompt_ids, config, context_length(target_model))
    target = CachedLM(target_model, steps=config.steps, room=cache_room(config))
    target.capture(len(prompt_ids), [(1, 1)])
    generator = make_generator(config.sampling.seed)

    def one_step(step: Step, tokens: list[int], budget: int) -> None:
        with Stopwatch(target.device) as t_verify:
            logits = target.logits_after(tokens)
        with Stopwatch(target.device) as t_rest:
            _, token = verify_draft(logits, Draft(), config.sampling, generator, step)
            settle(step, [], token, budget, eos, bonus=True)
            tokens.extend(step.emitted)
        step.verify_s, step.rest_s = t_verify.seconds, t_rest.seconds

    return drive(one_step, prompt_ids, config, cancel)


def naive_handoff_steps(
    target_model,
    draft_model,
    prompt_ids: list[int],
    config: DecodeConfig,
    eos: set[int] = frozenset(),
    cancel: Callable[[], bool] | None = None,
) -> Iterator[Step]:
    """NOT speculative decoding: the comparison from the script the project started from.

    The draft writes the first half of the tokens alone, then the target continues from
    there. Nothing the draft wrote is checked, so the output is not the target's: it is shown
    only to contrast it with real (lossless) speculative decoding. Unlike the original
    script it stays in token space (no decode and re-encode), so what differs is the method."""
    methods.check_draft(methods.NAIVE, draft_model)
    tokens = list(prompt_ids)
    last = None
    half = max(1, config.max_new_tokens // 2)
    for last in baseline_steps(draft_model, prompt_ids, replace(config, max_new_tokens=half), eos, cancel):
        last.unverified = True
        tokens += last.emitted
        yield last
    if last is None or last.emitted[-1] in eos or last.new_tokens >= config.max_new_tokens:
        return
    rest = replace(config, max_new_tokens=config.max_new_tokens - last.new_tokens)
    for step in baseline_steps(target_model, tokens, rest, eos, cancel):
        step.index += last.index + 1
        step.new_tokens += last.new_tokens
        step.elapsed_s += last.elapsed_s
        yield step


def interleave(baseline: Iterator[Step], speculative: Iterator[Step]) -> Iterator[tuple[str, Step]]:
    """Interleave two step streams in one thread, each step timed alone.

    The side whose own compute clock is behind runs next, so at every moment both sides have
    spent about the same compute time: what each has written is what it would have written by
    then running alone. Yields ("baseline" | "speculative", step)."""
    streams = {"baseline": baseline, "speculative": speculative}
    clocks = {"baseline": 0.0, "speculative": 0.0}
    while streams:
        side = min(streams, key=clocks.get)
        step = next(streams[side], None)
        if step is None:
            del streams[side]
            continue
        clocks[side] = step.elapsed_s
        yield side, step


def sample_many(target_model, draft_model, prompt_ids, config: DecodeConfig, samples: int, eos=frozenset()):
    """``samples`` independent speculative samples (seeds seed, seed+1, …) with the models loaded once."""
    runs = []
    for i in range(samples):
        cfg = replace(config, sampling=replace(config.sampling, seed=config.sampling.seed + i))
        runs.append(run_all(decode_steps(target_model, draft_model, prompt_ids, cfg, eos)).token_ids)
    return runs
