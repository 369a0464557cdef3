"""What every decoder shares: the settings, the per-step record, the loop, validation.

Nothing here knows a particular decoding method: ``engine.py`` (chain drafting) and ``tree.py``
(token trees) both build on it, and neither imports the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields

import torch

from specdemo.decoding import methods
from specdemo.decoding.drafters import MAX_GAMMA, SCHEDULES
from specdemo.decoding.kv import synchronize
from specdemo.decoding.sampling import SamplingConfig, validate_sampling
from specdemo.decoding.shapes import STEPS
from specdemo.decoding.suffix import SuffixConfig, validate_suffix
from specdemo.errors import InputError


@dataclass(frozen=True)
class TreeConfig:
    k: int = 2  # children per node
    depth: int = 4
    max_nodes: int = 12
    min_prob: float = 0.0  # prune nodes whose cumulative draft probability is below this


TREE_LIMITS = TreeConfig(k=8, depth=16, max_nodes=64)  # the largest tree a request may ask for


@dataclass
class DecodeConfig:
    max_new_tokens: int = 64
    gamma: int = 4
    schedule: str = "constant"  # or "heuristic"
    min_confidence: float = 0.0  # draft-confidence stop; 0 = off
    method: str = methods.DRAFT.name  # a name in ``methods.REGISTRY``
    max_ngram: int = 3
    suffix: SuffixConfig = field(default_factory=SuffixConfig)  # the methods that draft from suffix decoding
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens_cap: int = 2048
    tree: TreeConfig = field(default_factory=TreeConfig)  # the draft model's token tree: k, depth, nodes, threshold
    steps: str = "eager"  # eager | static (a preallocated KV cache) | compiled (static + torch.compile): kv.py


@dataclass
class Step:
    """One decoding step. A baseline step drafts nothing and emits one token."""

    index: int
    drafted: list[int] = field(default_factory=list)
    q: list[float] = field(default_factory=list)  # q(x) of each drafted x
    p: list[float] = field(default_factory=list)  # p(x) of each drafted x
    draws: list[float] = field(default_factory=list)  # the uniform u of each test (sampling only)
    accepted: int = 0
    correction: int | None = None  # the target's token at the first rejection
    bonus: int | None = None  # the extra token from p when every draft was kept (or baseline's token)
    emitted: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0
    rest_s: float = 0.0
    new_tokens: int = 0  # tokens generated so far, this step's included
    elapsed_s: float = 0.0  # compute time so far, this step's included
    finished: bool = False
    unverified: bool = False  # emitted by the draft alone, never checked (naive comparison only)
    # Tree drafting: each drafted node's parent (−1 = root) and the accepted path of node indices.
    tree_parents: list[int] = field(default_factory=list)
    tree_path: list[int] = field(default_factory=list)
    # Suffix decoding: where the proposal was seen (prompt, answer, an earlier answer) and its ids there.
    draft_source: dict | None = None
    # auto: this step's choice of source and γ, with its reason (decoding/auto.py)
    draft_choice: dict | None = None
    views: StepViews = field(default_factory=lambda: StepViews())  # what only the inspector shows

    @property
    def seconds(self) -> float:
        return self.draft_s + self.verify_s + self.rest_s

    @property
    def accept_prob(self) -> list[float]:
        """min(1, p(x)/q(x)) of each drafted x: the chance the rule keeps it."""
        return [min(1.0, p / q) if q > 0 else 0.0 for p, q in zip(self.p, self.q, strict=False)]

    def to_dict(self) -> dict:
        """The flat record a trace keeps (the views' fields beside the rule's, as traces always had)."""
        record = asdict(self)
        return record | record.pop("views")

    @classmethod
    def from_dict(cls, record: dict) -> Step:
        """A trace's record back into a Step (unknown keys ignored: an older or newer trace)."""
        own = {f.name for f in fields(cls)} - {"views"}
        views = StepViews(**{k: v for k, v in record.items() if k in VIEW_FIELDS})
        return cls(**{k: v for k, v in record.items() if k in own}, views=views)


@dataclass
class StepViews:
    """Read off the rows the rule used, for people only (the rule never reads them)."""

    # At a rejection, for the step inspector: top-10 (id, prob) of the residual, p and q.
    residual_top: list[tuple[int, float]] = field(default_factory=list)
    p_top: list[tuple[int, float]] = field(default_factory=list)
    q_top: list[tuple[int, float]] = field(default_factory=list)
    # Greedy only, for the divergence explainer: at each emitted position, the target's two best
    # tokens and their logits in THIS computation (a 1-token step or a batched verify row).
    top2: list[tuple[int, float, int, float]] = field(default_factory=list)


VIEW_FIELDS = {f.name for f in fields(StepViews)}


def validate_config(config: DecodeConfig) -> None:
    """Every check that needs no model: run it before loading anything."""
    n = config.max_new_tokens
    if not isinstance(n, int) or n <= 0:
        raise InputError(f"max new tokens must be a whole number ≥ 1, got {n}", field="max_new_tokens")
    if n > config.max_new_tokens_cap:
        raise InputError(f"max new tokens must be at most {config.max_new_tokens_cap}, got {n}", field="max_new_tokens")
    if not 1 <= config.gamma <= MAX_GAMMA:
        raise InputError(f"γ (draft length) must be between 1 and {MAX_GAMMA}, got {config.gamma}", field="gamma")
    if config.schedule not in SCHEDULES:
        raise InputError(f"schedule must be one of {', '.join(SCHEDULES)}, got {config.schedule!r}", field="schedule")
    method = methods.get(config.method)  # an unknown name is refused here
    if not 0 <= config.min_confidence < 1:
        raise InputError(f"min_confidence must be in [0, 1), got {config.min_confidence}", field="min_confidence")
    validate_sampling(config.sampling)
    if method.suffix_store:
        validate_suffix(config.suffix)
    if config.steps not in STEPS:
        raise InputError(f"steps must be one of {', '.join(STEPS)}, got {config.steps!r}", field="steps")
    if config.steps == "aot" and not method.ahead_of_time:
        raise InputError(f"steps compiled ahead of time run chains only: {method.short} needs static or compiled")


def cache_room(config: DecodeConfig) -> int:
    """What a static cache holds beyond the prompt: the answer, then the longest draft or tree on top."""
    return config.max_new_tokens + max(MAX_GAMMA, config.tree.max_nodes) + 2


def whole_numbers(text: str, what: str, low: int = 1, high: int = MAX_GAMMA) -> list[int]:
    """ "1,2,4" → [1, 2, 4], each in [low, high]; anything else refused in one line naming ``what``.
    The one parser of comma lists (γ sweeps, the profile's k and context lengths)."""
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{what} takes whole numbers separated by commas, got {text!r}", field=what) from None
    if not values or not all(low <= v <= high for v in values):
        raise InputError(f"every value in {what} must be between {low} and {high}", field=what)
    return values


def method_gammas(text: str, what: str, known: list[str]) -> list[tuple[str, int | None]]:
    """ "draft,suffix=6" → [("draft", None), ("suffix", 6)]: names from ``known``, each γ in 1…MAX_GAMMA."""
    chosen = []
    for item in filter(None, (part.strip() for part in str(text).split(","))):
        name, _, gamma = item.partition("=")
        if name not in known or (gamma and not (gamma.isdigit() and 1 <= int(gamma) <= MAX_GAMMA)):
            raise InputError(
                f"{what} takes some of {', '.join(known)}, optionally each with a γ of 1–{MAX_GAMMA} "
                f"(e.g. {known[0]}=2), got {text!r}",
                field=what,
            )
        chosen.append((name, int(gamma) if gamma else None))
    if not chosen:
        raise InputError(f"{what} names no method: some of {', '.join(known)}", field=what)
    return chosen


def validate_request(prompt_ids: list[int], config: DecodeConfig, context_length: int | None) -> None:
    if not prompt_ids:
        raise InputError("the prompt is empty: type some text to continue")
    validate_config(config)
    n = config.max_new_tokens
    if context_length:
        if len(prompt_ids) >= context_length:
            raise InputError(
                f"the prompt is {len(prompt_ids)} tokens, longer than the model's context of "
                f"{context_length} tokens: shorten it"
            )
        # Drafts never run past the token budget, so prompt + budget is the longest sequence.
        if len(prompt_ids) + n > context_length:
            raise InputError(
                f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({n}) exceed the model's context of "
                f"{context_length} tokens: ask for at most {context_length - len(prompt_ids)} new tokens"
            )


def context_length(model) -> int | None:
    return getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)


def eos_ids(model, tokenizer=None) -> set[int]:
    """Every id that ends generation for the target: its generation_config's and the tokenizer's."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is None:
            continue
        ids.update(value if isinstance(value, (list, tuple, set)) else [value])
    return ids


def finish_emitted(emitted: list[int], budget: int, eos: set[int]) -> tuple[list[int], bool]:
    """Cut a step's tokens at the first EOS (kept) and at the token budget."""
    for i, tok in enumerate(emitted[:budget]):
        if tok in eos:
            return emitted[: i + 1], True
    return emitted[:budget], len(emitted) >= budget


def top_two(rows: torch.Tensor) -> list[tuple[int, float, int, float]]:
    """(the argmax id, its logit, the runner-up id, its logit) of each row of logits. In half
    precision exact ties happen: the runner-up is then the tied token ``argmax`` did not pick."""
    values, ids = rows.float().topk(2, dim=-1)
    out = []
    for best, i, v in zip(rows.argmax(dim=-1).tolist(), ids.tolist(), values.tolist(), strict=True):
        first = 0 if i[0] == best else 1
        out.append((i[first], v[first], i[1 - first], v[1 - first]))
    return out


def settle(step: Step, kept: list[int], token: int, budget: int, eos: set[int], bonus: bool) -> None:
    """The step's verdict, set once: emit the kept drafts and the target's token (a bonus when
    every draft was kept, else a correction), cut at an EOS and at the budget. An EOS among the
    kept drafts ends the text there: the drafts after it and the target's token are not emitted,
    so they count neither as accepted nor as a correction or bonus."""
    step.emitted, step.finished = finish_emitted(kept + [token], budget, eos)
    step.accepted = min(len(kept), len(step.emitted))
    if len(step.emitted) > len(kept):
        if bonus:
            step.bonus = token
        else:
            step.correction = token


def drive(step_fn, prompt_ids: list[int], config: DecodeConfig, cancel=None) -> Iterator[Step]:
    """The loop every decoder shares: token budget, cancel hook, running totals, stop at EOS.

    ``step_fn(step, tokens, budget)`` does one target forward's worth of work: it fills
    ``step`` (emitted ids, finished, timings, the rest) and appends the emitted ids to ``tokens``."""
    tokens = list(prompt_ids)
    new, elapsed, index = 0, 0.0, 0
    while new < config.max_new_tokens and not (cancel and cancel()):
        step = Step(index=index)
        step_fn(step, tokens, config.max_new_tokens - new)
        new += len(step.emitted)
        elapsed += step.seconds
        step.new_tokens, step.elapsed_s = new, elapsed
        index += 1
        yield step
        if step.finished:
            return


def closing_drafter(steps: Iterator[Step], drafter) -> Iterator[Step]:
    """The steps, then the drafter's ``close()`` (suffix decoding files the answer), also when
    the caller stops early (Stop, an error, a dropped generator)."""
    try:
        yield from steps
    finally:
        if hasattr(drafter, "close"):
            drafter.close()


@dataclass
class Run:
    """All the steps of one generation, and what follows from them."""

    steps: list[Step]
    wall_s: float = 0.0  # wall clock around the whole generation, setup included (``run_timed``)

    @property
    def token_ids(self) -> list[int]:
        return [t for s in self.steps for t in s.emitted]

    @property
    def seconds(self) -> float:
        """Compute time: the sum of the steps' own stopwatches (for breakdowns, not comparisons)."""
        return sum(s.seconds for s in self.steps)


def run_all(steps: Iterator[Step]) -> Run:
    return Run(list(steps))


def run_timed(make_steps: Callable[[], Iterator[Step]], device) -> Run:
    """Run a whole generation under one wall clock, setup (validation, caches) included, synced
    on CUDA: the clock every engine is compared with, ours and transformers' alike."""
    synchronize(device)
    start = time.perf_counter()
    steps = list(make_steps())
    synchronize(device)
    return Run(steps, time.perf_counter() - start)
