"""auto: one drafter over the drafters, choosing each step where to draft from and how much (γ 0 included).

Each step it asks the model-free sources (prompt lookup, the suffix store) what they would propose (free: text
matching), then picks the (source, k) with the most expected tokens per unit of time:

    E(s, k)    = 1 + Σ_{i=1..k} Π_{j=1..i} â_s,j          (the kept drafts, plus the target's own token)
    cost(s, k) = t_v(1+k)/t_t + k·c_s                     (in target steps; k = 0 is a plain step: E = cost = 1)
    â_s,b,j    = (kept + m·p̄_s,b,j)/(tried + m) + κ/sqrt(1 + T_s,j)   (counts decay by λ per step)
    p̄_s,b,j    = (K_s,j − kept + m·r_s,j−1)/(T_s,j − tried + m)  (the source's other buckets: this one's prior)
    r_s,j      = (K_s,j + m·r_s,j−1)/(T_s,j + m),  r_s,0 = 0.5     (the source's rate, shrunk to the last position's)

where â_s,b,j is source s's chance of keeping position j given positions < j were kept, in signal bucket b (the
suffix match's length, prompt lookup's n-gram size), and K, T are the source's counts over all its buckets: a
source refused in one bucket is doubted in the others, and a bucket's own counts take over after m tries. The
prior leaves the bucket's own counts out, or each try would count twice (a one-bucket source, the draft model,
would be written off after two refusals); with one bucket, â is Laplace's (kept + 1)/(tried + 2) plus the bonus.
A position never reached starts from the position before's rate r, not from 0.5.
The decay lets a source that was
switched off come back: its counts shrink, its bonus grows, and it is tried again (optimism in the face of
uncertainty, as UCB). The choice reads only the past, so the proposal's q is the q it was drawn with and the
rule (``engine.verify_draft``) keeps sampling lossless. The token tree is not among the sources: it is another
kind of step (``tree.py``), not a chain this loop verifies.
"""

from __future__ import annotations

import itertools
import json
import math
import platform
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specdemo.decoding.drafters import Draft
from specdemo.decoding.kv import CachedLM, synchronize
from specdemo.decoding.sampling import SamplingConfig, to_probs

NONE = "none"  # the choice not to draft: a plain target step
DECAY = 0.97  # λ: a count seen 33 steps ago weighs 1/e
OPTIMISM = 0.15  # κ: an untried position counts as 0.5 + 0.15 (a probe about every 60 steps of disuse)
PRIOR_WEIGHT = 2.0  # m: tries of a bucket's own before they outweigh the source's pooled rate
MOST = 6  # auto's γ where none is chosen: the most tokens it may draft (it chooses fewer, 0 included)
LABELS = {NONE: "no draft", "prompt": "prompt lookup", "suffix": "suffix store", "model": "draft model"}


@dataclass
class CostModel:
    """A step's cost in target steps: ``verify[k]`` = t_v(1+k)/t_t (verify[0] = 1), ``draft[s]`` = c of one
    drafted token by source s (a model-free source's matching is ≈ 0). Measured at start-up, or given."""

    verify: list[float]
    draft: dict[str, float] = field(default_factory=dict)
    where: str = "given"  # what measured it

    def step(self, source: str, k: int) -> float:
        return self.verify[min(k, len(self.verify) - 1)] + k * self.draft.get(source, 0.0)


@dataclass
class Acceptance:
    """Decayed counts of kept / tried drafts per (source, bucket, position), and pooled per (source, position)."""

    kept: dict = field(default_factory=dict)
    tried: dict = field(default_factory=dict)
    pooled_kept: dict = field(default_factory=dict)
    pooled_tried: dict = field(default_factory=dict)
    steps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)  # sessions share one

    def pooled(self, source: str, position: int) -> float:
        """The source's rate over all its buckets, shrunk towards its rate one position earlier (0.5 before
        the first): a source refused at position 1 is not trusted with a 0.5 at the positions never reached."""
        if position == 0:
            return 0.5
        at, earlier = (source, position), PRIOR_WEIGHT * self.pooled(source, position - 1)
        return (self.pooled_kept.get(at, 0.0) + earlier) / (self.pooled_tried.get(at, 0.0) + PRIOR_WEIGHT)

    def rate(self, key: tuple, position: int) -> float:
        source = key[0]
        kept, tried = self.kept.get((*key, position), 0.0), self.tried.get((*key, position), 0.0)
        pooled_kept = self.pooled_kept.get((source, position), 0.0)
        pooled_tried = self.pooled_tried.get((source, position), 0.0)
        # the prior is the source's other buckets only: the bucket's own counts would count each try twice
        earlier = PRIOR_WEIGHT * self.pooled(source, position - 1)
        prior = (pooled_kept - kept + earlier) / (pooled_tried - tried + PRIOR_WEIGHT)
        bonus = OPTIMISM / math.sqrt(1 + pooled_tried)
        return min(1.0, (kept + PRIOR_WEIGHT * prior) / (tried + PRIOR_WEIGHT) + bonus)

    def learn(self, key: tuple, drafted: int, accepted: int) -> None:
        with self.lock:
            self.steps += 1
            for table in (self.kept, self.tried, self.pooled_kept, self.pooled_tried):
                for k in table:
                    table[k] *= DECAY
            # positions 1..accepted were kept; position accepted+1 was tried and refused; later ones never tested
            for j in range(1, min(drafted, accepted + 1) + 1):
                for kept, tried, at in (
                    (self.kept, self.tried, (*key, j)),
                    (self.pooled_kept, self.pooled_tried, (key[0], j)),
                ):
                    tried[at] = tried.get(at, 0.0) + 1
                    kept[at] = kept.get(at, 0.0) + (j <= accepted)

    def expected(self, key: tuple, k: int) -> float:
        total, alive = 1.0, 1.0
        for j in range(1, k + 1):
            alive *= self.rate(key, j)
            total += alive
        return total


def choose(cost: CostModel, acceptance: Acceptance, offers: dict[str, tuple[int, int]]) -> dict:
    """The best (source, k) by expected tokens per target step. ``offers``: source → (most tokens it can
    draft, its signal bucket). Returns the choice with its reason, in words an attendee reads."""
    options = [(1.0, 1.0, NONE, 0, 0)]
    for source, (most, bucket) in offers.items():
        for k in range(1, most + 1):
            e, c = acceptance.expected((source, bucket), k), cost.step(source, k)
            options.append((e / c, e, source, k, bucket))
    rate, e, source, k, bucket = max(options, key=lambda o: o[0])
    steps = cost.step(source, k)
    runner_up = max((o for o in options if o[2] != source), key=lambda o: o[0], default=None)
    reason = f"γ {k} from {LABELS[source]}: expected" if k else "γ 0 (no draft):"
    reason += f" {e:.2f} tokens for {steps:.2f} steps"
    if runner_up:
        _, e2, s2, k2, _ = runner_up
        instead = f"{LABELS[s2]} γ {k2}" if k2 else LABELS[s2]
        reason += f"; {instead} would give {e2:.2f} for {cost.step(s2, k2):.2f}"
    return {"source": source, "gamma": k, "bucket": bucket, "expected": e, "cost": steps, "reason": reason}


class AutoDrafter:
    """Proposes from the source ``choose`` picks; learns what each kept from how the text went on."""

    def __init__(self, cost: CostModel, prompt=None, suffix=None, model=None, acceptance: Acceptance | None = None):
        self.cost, self.acceptance = cost, acceptance if acceptance is not None else Acceptance()
        self.sources = {name: d for name, d in (("prompt", prompt), ("suffix", suffix), ("model", model)) if d}
        self.last: tuple | None = None  # (key, drafted ids, len(tokens) when drafted)

    def learn(self, tokens: list[int]) -> None:
        """The last draft's kept prefix is what the text went on with (a refused token is never emitted: the
        residual max(0, p − q) is 0 where p < q, and greedy's correction is another token)."""
        if self.last is None:
            return
        key, ids, at = self.last
        went_on = tokens[at : at + len(ids)]
        accepted = next((i for i, (a, b) in enumerate(zip(ids, went_on, strict=False)) if a != b), len(went_on))
        self.acceptance.learn(key, len(ids), accepted)
        self.last = None

    def propose(self, tokens: list[int], n: int, sampling: SamplingConfig, generator) -> Draft:
        self.learn(tokens)
        found, offers = {}, {}
        for name in ("prompt", "suffix"):
            if name in self.sources and n > 0:
                draft = self.sources[name].propose(tokens, n, sampling, None)
                if draft:
                    found[name] = draft
                    offers[name] = (len(draft), min(getattr(self.sources[name], "match_len", 0), 4))
        if "model" in self.sources and n > 0:
            offers["model"] = (n, 0)
        choice = choose(self.cost, self.acceptance, offers)
        k = choice["gamma"]
        if k == 0:
            draft = Draft()
        elif choice["source"] == "model":
            draft = self.sources["model"].propose(tokens, k, sampling, generator)
        else:
            whole = found[choice["source"]]
            draft = Draft(whole.ids[:k], None if whole.probs is None else whole.probs[:k], whole.source)
        if draft:
            self.last = ((choice["source"], choice["bucket"]), list(draft.ids), len(tokens))
        draft.choice = choice
        return draft

    def capture(self, first_feed: int) -> None:
        if hasattr(self.sources.get("model"), "capture"):
            self.sources["model"].capture(first_feed)

    def close(self) -> None:
        for d in self.sources.values():
            if hasattr(d, "close"):
                d.close()


# --- what each source kept, carried across a process's requests (as the suffix store carries their answers) ---

_LEARNED: dict[str, Acceptance] = {}


def shared_acceptance(pair: str) -> Acceptance:
    """The process's counts for one pair: a request starts where the last one left off, not from the prior (a
    48-token answer is ~35 steps, too few to learn in); the decay lets this request's text take over."""
    return _LEARNED.setdefault(pair, Acceptance())


def forget() -> None:
    _LEARNED.clear()


# --- the start-up measurement: t_v(1+k)/t_t and the draft's c on this machine, cached per machine and pair ---

_MEASURED: dict[str, CostModel] = {}


def model_name(model) -> str | None:
    return getattr(getattr(model, "config", None), "_name_or_path", None) or None


def pair_name(target_model, draft_model) -> str:
    """The pair (a model without a name, built in a test, by its identity in this process)."""
    name = lambda m: model_name(m) or f"unnamed-{id(m)}"  # noqa: E731
    return f"{name(target_model)} + {name(draft_model)}"


def cost_key(target_model, draft_model, most: int) -> str:
    """This machine and pair."""
    pair = pair_name(target_model, draft_model)
    return f"{platform.machine()} {platform.processor()} | {pair} | k≤{most} | {CONTEXT} cached"


CONTEXT = 128  # tokens cached before a timed step: a chat prompt and part of its answer (attention grows with it)
ROUNDS = 7  # interleaved rounds: every k timed once a round, so a machine's drift slows every k alike


def step_seconds(lm: CachedLM, new: int) -> float:
    """One step as the engine takes it: a forward of ``new`` tokens, their probabilities and argmax (the
    acceptance rule's work), the cache rolled back after."""
    synchronize(lm.device)
    start = time.perf_counter()
    to_probs(lm.forward(list(range(1, new + 1)), keep=new), SamplingConfig()).argmax(-1).tolist()
    synchronize(lm.device)
    seconds = time.perf_counter() - start
    lm.rollback_to(CONTEXT)
    return seconds


def measure_costs(target_model, draft_model, most: int, cache_file: Path | None = None) -> CostModel:
    """t_v(1+k)/t_t for k ≤ ``most`` and c of a draft step, on eager steps after a CONTEXT-token cache (a second
    or two on a CPU; once per process, and once per machine with ``cache_file``)."""
    key = cost_key(target_model, draft_model, most)
    if not (model_name(target_model) and model_name(draft_model)):
        cache_file = None  # an unnamed pair's key holds only in this process
    if key in _MEASURED:
        return _MEASURED[key]
    stored = json.loads(cache_file.read_text()) if cache_file and cache_file.exists() else {}
    if key in stored:
        _MEASURED[key] = CostModel(**stored[key])
        return _MEASURED[key]
    started = time.perf_counter()
    lms = {"target": CachedLM(target_model)}
    if draft_model is not None and hasattr(draft_model, "config"):
        lms["model"] = CachedLM(draft_model)
    shapes = [("target", 1 + k) for k in range(most + 1)] + [(name, 1) for name in lms if name != "target"]
    for lm in lms.values():
        lm.forward([1 + i % 7 for i in range(CONTEXT)])  # any small ids: the cost is the shape's
    for name, new in shapes:  # warm-up: a new shape's first call pays allocation
        step_seconds(lms[name], new)
    times = {shape: [] for shape in shapes}
    for round_ in range(ROUNDS):
        for shape in shapes if round_ % 2 == 0 else shapes[::-1]:
            times[shape].append(step_seconds(lms[shape[0]], shape[1]))
    median = {shape: statistics.median(t) for shape, t in times.items()}
    t_t = median[("target", 1)]
    measured = [median[("target", 1 + k)] / t_t for k in range(most + 1)]
    verify = list(itertools.accumulate(measured, max))  # more tokens never cost less: a dip is noise
    draft = {name: median[(name, 1)] / t_t for name in lms if name != "target"}
    where = f"measured at start-up in {time.perf_counter() - started:.1f} s ({key})"
    _MEASURED[key] = CostModel(verify, draft, where)
    if cache_file:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps(stored | {key: asdict(_MEASURED[key])}, indent=1))
    return _MEASURED[key]
