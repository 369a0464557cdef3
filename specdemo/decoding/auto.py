"""auto: one drafter over the drafters, choosing each step where to draft from and how much (γ 0 included).

Each step it asks the model-free sources (prompt lookup, the suffix store) what they would propose (free: text
matching), then picks the (source, k) with the most expected tokens per unit of time:

    E(s, k)    = 1 + Σ_{i=1..k} Π_{j=1..i} â_s,j          (the kept drafts, plus the target's own token)
    cost(s, k) = t_v(1+k)/t_t + k·c_s + (L_s − 1)⁺·f_s      (in target steps; k = 0 is a plain step: E = cost = 1)
    â_s,b,j    = (kept + m·p̄_s,b,j)/(tried + m) + κ/sqrt(1 + T_s,j)   (counts decay by λ per step)
    p̄_s,b,j    = (K_s,j − kept + m·r_s,j−1)/(T_s,j − tried + m)  (the source's other buckets: this one's prior)
    r_s,j      = (K_s,j + m·r_s,j−1)/(T_s,j + m),  r_s,0 = r₀      (the source's rate, shrunk to the last position's)

where L_s is how many tokens the draft model's cache must take in first (one or two when it drafted the step
before; every token since, when other sources drafted; at most 32) and f_s what each token past the first adds
(measured at start-up with c: a prefill, far cheaper a token than c, but a model idle for 40 tokens pays about 2c
on SmolLM2),
â_s,b,j is source s's chance of keeping position j given positions < j were kept, in signal bucket b (the
suffix match's length, prompt lookup's n-gram size), and K, T are the source's counts over all its buckets: a
source refused in one bucket is doubted in the others, and a bucket's own counts take over after m tries. The
prior leaves the bucket's own counts out, or each try would count twice (a one-bucket source, the draft model,
would be written off after two refusals); with one bucket, â is (kept + m·r₀)/(tried + m) plus the bonus.
A position never reached starts from the position before's rate r, not from r₀. The copy sources are counted
on every offer, sent or not (off-policy, and free: their proposals cost nothing): a one-hot token x is kept with
chance p(x), the chance the target's text goes on with x, so the text's own tokens score it once they are out.
A copy that is never right is then known without refused probes, and one that starts to be is seen at once.

The draft model drafts one token at a time, and its own signal decides each next one: its top probability
π_i (known before its token is drawn, so stopping on it keeps q the q drawn from). Token i's chance is
â_i = (kept + m·π_i)/(tried + m) + κ/sqrt(1 + T) in π_i's bucket (a calibrated draft keeps about π of its
tokens; the bucket's counts correct it), and with E_i, A_i = Π â over the tokens taken so far:

    take token i   if (E_{i−1} + A_{i−1}·â_i) / (t_v(1+i)/t_t + i·c)  ≥  E_{i−1} / (t_v(i)/t_t + i·c)
    draft another  if some k > i, the rest at the model's average rate r̄, beats what is taken

(token i's c is paid either way: a confident draft goes on, an unsure one stops). Whether to ask the model at
all weighs what its steps have made (decayed tokens and cost a step, a fixed prior of 1 + r₀ tokens for a
one-token step's cost) against the other sources' E/cost. The decay lets a source that was
switched off come back: its counts shrink, its bonus grows, and it is tried again (optimism in the face of
uncertainty, as UCB). The choice reads only the past, so the proposal's q is the q it was drawn with and the
rule (``engine.verify_draft``) keeps sampling lossless. The token tree is not among the sources: it is another
kind of step (``tree.py``), not a chain this loop verifies.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from specdemo.decoding.drafters import Draft, ModelDrafter
from specdemo.decoding.kv import CachedLM, synchronize
from specdemo.decoding.sampling import SamplingConfig, to_probs
from specdemo.files import written_whole

NONE = "none"  # the choice not to draft: a plain target step
DECAY = 0.97  # λ: a count seen 33 steps ago weighs 1/e
OPTIMISM = 0.15  # κ: an untried position counts as r₀ + 0.15 (a probe about every 60 steps of disuse)
FIRST_RATE = 0.5  # r₀: a fresh source's rate, before any of its tries (0.3, the tune split's, wrote the model off)
PRIOR_WEIGHT = 2.0  # m: tries of a bucket's own before they outweigh the source's pooled rate
MOST = 6  # auto's γ where none is chosen: the most tokens it may draft (it chooses fewer, 0 included)
LABELS = {NONE: "no draft", "prompt": "prompt lookup", "suffix": "suffix store", "model": "draft model"}
# the draft's top probability, bucketed (SmolLM2's draft keeps ≈ 6, 25, 39, 56, 84, 92% of its tokens in them)
CONFIDENCE = (0.2, 0.4, 0.6, 0.8, 0.9)


def confidence_bucket(top: float) -> int:
    return sum(top >= edge for edge in CONFIDENCE)


@dataclass
class CostModel:
    """A step's cost in target steps: ``verify[k]`` = t_v(1+k)/t_t (verify[0] = 1), ``draft[s]`` = c of one
    drafted token by source s (a model-free source's matching is ≈ 0). Measured at start-up, or given."""

    verify: list[float]
    draft: dict[str, float] = field(default_factory=dict)
    feed: dict[str, float] = field(default_factory=dict)  # f_s: a token its cache catches up on, past the first
    where: str = "given"  # what measured it
    seconds: float = 0.0  # what measuring it took (the start-up's target: ≤ 3 s; printed by bench --tasks)

    def step(self, source: str, k: int, drafted: int | None = None) -> float:
        """k tokens verified; ``drafted`` tokens paid for (default k: a drafted token not sent is paid too)."""
        drafted = k if drafted is None else drafted
        return self.verify[min(k, len(self.verify) - 1)] + drafted * self.draft.get(source, 0.0)

    def catch_up(self, source: str, lag: int) -> float:
        """What drafting from ``source`` first costs when its cache lags ``lag`` tokens (one is in c), at most the
        timed CATCH_UP: uncharged past it, an idle model is never priced out for good (the prompt's prefill made
        the first step a plain one, each plain step lengthened the lag, and held-out chat fell to 0.84×)."""
        return max(0, min(lag, CATCH_UP) - 1) * self.feed.get(source, 0.0)


@dataclass
class Acceptance:
    """Decayed counts of kept / tried drafts per (source, bucket, position), and pooled per (source, position)."""

    kept: dict = field(default_factory=dict)
    tried: dict = field(default_factory=dict)
    pooled_kept: dict = field(default_factory=dict)
    pooled_tried: dict = field(default_factory=dict)
    made: dict = field(default_factory=dict)  # a token-by-token source → decayed [its steps, tokens made, cost]
    steps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)  # sessions share one

    def pooled(self, source: str, position: int) -> float:
        """The source's rate over all its buckets, shrunk towards its rate one position earlier (r₀ before
        the first): a source refused at position 1 is not trusted with r₀ at the positions never reached."""
        if position == 0:
            return FIRST_RATE
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
        return min(1.0, (kept + PRIOR_WEIGHT * prior) / (tried + PRIOR_WEIGHT) + self.bonus(source, position))

    def bonus(self, source: str, position: int) -> float:
        """κ/sqrt(1 + T_s,j): optimism that shrinks as the source's tries at the position add up."""
        return OPTIMISM / math.sqrt(1 + self.pooled_tried.get((source, position), 0.0))

    def token_rate(self, source: str, top: float) -> float:
        """A one-at-a-time source's chance of keeping a token drafted with top probability ``top``: the
        bucket's counts, ``top`` itself as their prior."""
        at = (source, confidence_bucket(top), 1)
        kept, tried = self.kept.get(at, 0.0), self.tried.get(at, 0.0)
        return min(1.0, (kept + PRIOR_WEIGHT * top) / (tried + PRIOR_WEIGHT) + self.bonus(source, 1))

    def average_rate(self, source: str) -> float:
        """A one-at-a-time source's rate over all its tokens (its next token's, before its top probability is
        known), with the bonus."""
        return min(1.0, self.pooled(source, 1) + self.bonus(source, 1))

    def learn(self, key: tuple, drafted: int, accepted: int, step: bool = True) -> None:
        """A chain drafted under one bucket: its positions 1..drafted. ``step``: a new step (the counts decay
        first); False: one more chain proposed at the same step."""
        self.learn_each([(key, j) for j in range(1, drafted + 1)], accepted, step)

    def learn_tokens(self, source: str, tops: list[float], accepted: int, cost: float) -> None:
        """A one-at-a-time draft: each token in its own confidence bucket, all at position 1; and the step's
        tokens (the kept drafts and the target's own) and cost."""
        self.learn_each([((source, confidence_bucket(top)), 1) for top in tops], accepted)
        with self.lock:
            steps, made, spent = self.made.get(source, (0.0, 0.0, 0.0))
            self.made[source] = (steps + 1, made + accepted + 1, spent + cost)

    def step_value(self, source: str, tokens: float, cost: float) -> tuple[float, float]:
        """A token-by-token source's expected tokens and cost a step: what its steps made, with ``tokens`` and
        ``cost`` (a one-token draft at a fresh source's rate) as the prior, and the bonus. Its drafts stop where
        they stop paying, so its steps are worth more than a fixed chain at its average rate. The prior is
        fixed: one shrunk by the same refusals would count each twice and starve the source."""
        steps, made, spent = self.made.get(source, (0.0, 0.0, 0.0))
        bonus = OPTIMISM / math.sqrt(1 + steps)
        return (made + PRIOR_WEIGHT * tokens) / (steps + PRIOR_WEIGHT) + bonus, (spent + PRIOR_WEIGHT * cost) / (
            steps + PRIOR_WEIGHT
        )

    def learn_each(self, tokens: list[tuple], accepted: int, step: bool = True) -> None:
        with self.lock:
            if step:
                self.steps += 1
                for table in (self.kept, self.tried, self.pooled_kept, self.pooled_tried):
                    for k in table:
                        table[k] *= DECAY
                self.made = {source: tuple(DECAY * x for x in row) for source, row in self.made.items()}
            # tokens 1..accepted were kept; token accepted+1 was tried and refused; later ones never tested
            for i, (key, j) in enumerate(tokens[: accepted + 1], start=1):
                for kept, tried, at in (
                    (self.kept, self.tried, (*key, j)),
                    (self.pooled_kept, self.pooled_tried, (key[0], j)),
                ):
                    tried[at] = tried.get(at, 0.0) + 1
                    kept[at] = kept.get(at, 0.0) + (i <= accepted)

    def expected(self, key: tuple, k: int) -> float:
        return expected_tokens([self.rate(key, j) for j in range(1, k + 1)])


def kept_prefix(ids: list[int], went_on: list[int]) -> int:
    """How many of the drafted ``ids`` the text went on with."""
    return next((i for i, (a, b) in enumerate(zip(ids, went_on, strict=False)) if a != b), min(len(ids), len(went_on)))


def expected_tokens(rates: list[float], alive: float = 1.0, total: float = 1.0) -> float:
    """1 + Σ_i Π_{j≤i} â_j: the kept drafts (each needs every one before it kept), plus the target's own token.
    ``alive``, ``total``: where a draft already taken leaves off."""
    for rate in rates:
        alive *= rate
        total += alive
    return total


def choose(cost: CostModel, acceptance: Acceptance, offers: dict[str, tuple[int, int]], lags=None) -> dict:
    """The best (source, k) by expected tokens per target step. ``offers``: source → (most tokens it can
    draft, its signal bucket); ``lags``: source → tokens its cache lags. Returns the choice with its reason, in
    words an attendee reads."""
    lags = lags or {}
    options = [(1.0, 1.0, 1.0, NONE, 0, 0)]  # (tokens per step, tokens, steps, source, k, bucket)
    for source, (most, bucket) in offers.items():
        first = cost.catch_up(source, lags.get(source, 1))
        if bucket is None:  # token by token: its γ is chosen as it drafts
            e, c = acceptance.step_value(source, 1 + FIRST_RATE, cost.step(source, 1))
            options.append((e / (c + first), e, c + first, source, 1, None))
            continue
        for k in range(1, most + 1):
            e, c = acceptance.expected((source, bucket), k), cost.step(source, k) + first
            options.append((e / c, e, c, source, k, bucket))
    rate, e, steps, source, k, bucket = max(options, key=lambda o: o[0])
    runner_up = max((o for o in options if o[3] != source), key=lambda o: o[0], default=None)
    reason = f"γ {k} from {LABELS[source]}: expected" if k else "γ 0 (no draft):"
    reason += f" {e:.2f} tokens for {steps:.2f} steps"
    if runner_up:
        _, e2, c2, s2, k2, b2 = runner_up
        instead = LABELS[s2] + (", token by token" if b2 is None else f" γ {k2}" if k2 else "")
        reason += f"; {instead} would give {e2:.2f} for {c2:.2f}"
    return {"source": source, "gamma": k, "bucket": bucket, "expected": e, "cost": steps, "reason": reason}


class AutoDrafter:
    """Proposes from the source ``choose`` picks; learns what each kept from how the text went on."""

    def __init__(self, cost: CostModel, prompt=None, suffix=None, model=None, acceptance: Acceptance | None = None):
        self.cost, self.acceptance = cost, acceptance if acceptance is not None else Acceptance()
        self.sources = {name: d for name, d in (("prompt", prompt), ("suffix", suffix), ("model", model)) if d}
        # the draft model's last token-by-token draft: (ids, len(tokens) when drafted, each one's top prob., cost)
        self.last: tuple | None = None
        # every copy offered, taken or not, and a drafted chain: (key, ids, len(tokens) then), judged once the
        # text reaches its end
        self.offered: list[tuple] = []

    def learn(self, tokens: list[int]) -> None:
        """A draft's kept prefix is what the text went on with (a refused token is never emitted: the residual
        max(0, p − q) is 0 where p < q, and greedy's correction is another token). That holds for a draft never
        sent too: a copy source's one-hot token x would be kept with chance p(x), the chance the target's text
        goes on with x. So every copy offered is learned from, for free (the draft model's, only when drafted)."""
        if self.last is None:  # time passes on every step, so a source written off comes back
            self.acceptance.learn_each([], 0)
        else:
            ids, at, tops, cost = self.last
            self.acceptance.learn_tokens("model", tops, kept_prefix(ids, tokens[at:]), cost)
            self.last = None
        waiting = []
        for key, ids, at in self.offered:
            went_on = tokens[at : at + len(ids)]
            accepted = kept_prefix(ids, went_on)
            if accepted == len(went_on) < len(ids):  # the text has not reached its end yet
                waiting.append((key, ids, at))
            else:
                self.acceptance.learn(key, len(ids), accepted, step=False)
        self.offered = waiting

    def propose(self, tokens: list[int], n: int, sampling: SamplingConfig, generator) -> Draft:
        self.learn(tokens)
        found, offers = {}, {}
        for name in ("prompt", "suffix"):
            if name in self.sources and n > 0:
                draft = self.sources[name].propose(tokens, n, sampling, None)
                if draft:
                    found[name] = draft
                    offers[name] = (len(draft), min(getattr(self.sources[name], "match_len", 0), 4))
        lags = {}
        if "model" in self.sources and n > 0:
            offers["model"] = (n, None if self.one_at_a_time else 0)  # None: by its top probability, token by token
            if self.one_at_a_time:
                lags["model"] = self.sources["model"].lag(tokens)
        choice = choose(self.cost, self.acceptance, offers, lags)
        k = choice["gamma"]
        if k == 0:
            draft = Draft()
        elif choice["source"] == "model" and self.one_at_a_time:
            draft = self.draft_while_it_pays(tokens, n, sampling, generator, choice, lags["model"])
        elif choice["source"] == "model":
            draft = self.sources["model"].propose(tokens, k, sampling, generator)
        else:
            whole = found[choice["source"]]
            draft = Draft(whole.ids[:k], None if whole.probs is None else whole.probs[:k], whole.source)
        chains = [((name, offers[name][1]), d) for name, d in found.items()]
        if choice["source"] == "model" and choice["bucket"] is not None:  # a chain from a drafter without a cache
            chains.append((("model", choice["bucket"]), draft))
        self.offered += [(key, list(d.ids), len(tokens)) for key, d in chains if d]
        draft.choice = choice
        return draft

    @property
    def one_at_a_time(self) -> bool:
        """A draft model with its own cache drafts a token a call: its top probability decides the next one."""
        return isinstance(self.sources.get("model"), ModelDrafter)

    def draft_while_it_pays(self, tokens: list[int], most: int, sampling, generator, choice, lag: int) -> Draft:
        """The draft model, a token at a time, while the expected tokens per step grow (the rule in the module's
        docstring). Each stop reads π_i, known before token i is drawn: q stays the q it was drawn from. Its
        catch-up is paid whatever it drafts: in every step's cost alike, it only makes a longer draft pay sooner."""
        model, a = self.sources["model"], self.acceptance
        first = self.cost.catch_up("model", lag)
        step = lambda sent, drafted: self.cost.step("model", sent, drafted) + first  # noqa: E731
        ids, rows, tops = [], [], []
        e, alive = 1.0, 1.0  # E and A over the tokens taken
        later = a.average_rate("model")  # a token not yet drafted: the model's average
        while len(ids) < most:
            one = model.propose(tokens + ids, 1, sampling, generator)
            if not one:  # its own confidence stop (``min_confidence``)
                break
            top = float(one.probs[0].max())
            rate, i = a.token_rate("model", top), len(ids) + 1
            # token i's c is paid either way; taking it adds a verify position and its expected token
            if (e + alive * rate) / step(i, i) < e / step(i - 1, i):
                tops.append(top)  # drafted, not sent: shown in the reason, not learned from
                break
            ids.append(one.ids[0])
            rows.append(one.probs[0])
            tops.append(top)
            alive *= rate
            e += alive
            now = e / step(i, i)
            going_on = (expected_tokens([later] * (k - i), alive, e) / step(k, k) for k in range(i + 1, most + 1))
            ahead = max(going_on, default=0.0)
            if ahead <= now:
                break
        cost = step(len(ids), len(tops))
        caught_up = f", {lag} tokens caught up on first" if first else ""
        shown = ", ".join(f"{t:.2f}" for t in tops)
        _, *runner_up = choice["reason"].split("; ", 1)
        reason = f"γ {len(ids)} from {LABELS['model']}, token by token while sure enough (its top probabilities "
        reason += f"{shown}{caught_up}): expected {e:.2f} tokens for {cost:.2f} steps"
        choice.update(gamma=len(ids), expected=e, cost=cost, reason=reason)
        choice["reason"] += "".join(f"; {r}" for r in runner_up)
        # sent none too: its drafted token was paid for; the catch-up is not its steps' own (choose adds it anew)
        self.last = (ids, len(tokens), tops[: len(ids)], cost - first)
        return Draft(ids, torch.stack(rows)) if ids else Draft()

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
    return f"{platform.machine()} {platform.processor()} | {pair} | k≤{most} | {CONTEXT} cached | fed {CATCH_UP} | line"


CONTEXT = 128  # tokens cached before a timed step: a chat prompt and part of its answer (attention grows with it)
CATCH_UP = 32  # tokens a draft takes in at once, timed for f: about what it lags after a few copied steps
ROUNDS = 4  # interleaved rounds: every k timed once a round, so a machine's drift slows every k alike


def step_seconds(lm: CachedLM, new: int, keep: int | None = None) -> float:
    """One step as the engine takes it: a forward of ``new`` tokens, the probabilities and argmax of the last
    ``keep`` (all: the acceptance rule's work; 1: a draft's), the cache rolled back after."""
    synchronize(lm.device)
    start = time.perf_counter()
    to_probs(lm.forward(list(range(1, new + 1)), keep=keep or new), SamplingConfig()).argmax(-1).tolist()
    synchronize(lm.device)
    seconds = time.perf_counter() - start
    lm.rollback_to(CONTEXT)
    return seconds


def verify_curve(seconds: list[float]) -> tuple[float, list[float]]:
    """t_t and t_v(1+k)/t_t from the median seconds of verifying 1 + k tokens, k = 0, 1, …: the least-squares
    line through them (two numbers fitted from every timing), not each k over the k = 0 median with a running max
    (one cached curve of that kind read k = 4–6 at 1.39, 1.50 and 1.65, the engine's own steps 1.32, 1.43 and
    1.52 on the tune split: a high k was carried on to every k after). A line that falls is noise: read flat."""
    slope, t_t = statistics.linear_regression(range(len(seconds)), seconds)
    slope = max(slope, 0.0)
    return t_t, [1 + slope * k / t_t for k in range(len(seconds))]


def timed_shapes(target_model, draft_model, most: int) -> dict[tuple[str, int], float]:
    """(model, tokens fed) → the median seconds of its step: the target verifying 1 + k tokens for k ≤ ``most``,
    the draft model's one-token step and its CATCH_UP-token feed, ROUNDS interleaved rounds after a warm-up."""
    lms = {"target": CachedLM(target_model)}
    if draft_model is not None and hasattr(draft_model, "config"):
        lms["model"] = CachedLM(draft_model)
    # (model, tokens fed, rows kept): the target verifies all it is fed; a draft keeps its last row
    shapes = [("target", 1 + k, None) for k in range(most + 1)]
    shapes += [(name, new, 1) for name in lms if name != "target" for new in (1, CATCH_UP)]
    for lm in lms.values():
        lm.forward([1 + i % 7 for i in range(CONTEXT)])  # any small ids: the cost is the shape's
    for name, new, keep in shapes:  # warm-up: a new shape's first call pays allocation
        step_seconds(lms[name], new, keep)
    times = {shape: [] for shape in shapes}
    for round_ in range(ROUNDS):
        for shape in shapes if round_ % 2 == 0 else shapes[::-1]:
            times[shape].append(step_seconds(lms[shape[0]], shape[1], shape[2]))
    return {shape[:2]: statistics.median(t) for shape, t in times.items()}


def measure_costs(target_model, draft_model, most: int, cache_file: Path | None = None) -> CostModel:
    """t_v(1+k)/t_t for k ≤ ``most``, c of a draft step and f of a token it catches up on, on eager steps after a
    CONTEXT-token cache (a second or two on a CPU; once per process, and once per machine with ``cache_file``)."""
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
    median = timed_shapes(target_model, draft_model, most)
    t_t, verify = verify_curve([median[("target", 1 + k)] for k in range(most + 1)])
    drafters = [name for name, new in median if name != "target" and new == 1]
    draft = {name: median[(name, 1)] / t_t for name in drafters}
    feed = {name: max(0.0, median[(name, CATCH_UP)] - median[(name, 1)]) / (CATCH_UP - 1) / t_t for name in drafters}
    seconds = time.perf_counter() - started
    _MEASURED[key] = CostModel(verify, draft, feed, f"measured at start-up in {seconds:.1f} s ({key})", seconds)
    if cache_file:
        with written_whole(cache_file) as partial:  # processes share it
            partial.write_text(json.dumps(stored | {key: asdict(_MEASURED[key])}, indent=1))
    return _MEASURED[key]
