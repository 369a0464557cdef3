"""auto: the choice of source and γ from the cost model and the acceptance estimates (fed numbers), greedy identity
on every path it takes, and lossless sampling with its choices in play."""

from __future__ import annotations

import math

import pytest
import torch
from test_engine import PROMPTS, reference
from test_sampling import DRAFTS, PROMPT, SAMPLES, TARGET, chi2_pvalue, exact_joint

from specdemo.decoding import auto, engine
from specdemo.decoding.auto import Acceptance, AutoDrafter, CostModel, choose
from specdemo.decoding.drafters import ModelDrafter, PromptLookupDrafter
from specdemo.decoding.engine import DecodeConfig, eos_ids, run_all, sample_many
from specdemo.decoding.sampling import SamplingConfig

CPU = CostModel([1.0, 1.09, 1.16, 1.26, 1.25, 1.27, 1.27], {"model": 0.25})  # SmolLM2-like, 2 cores
GPU = CostModel([1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06], {"model": 0.05})  # a memory-bound step


def taught(rates: dict[tuple, float], steps: int = 200) -> Acceptance:
    """Acceptance after ``steps`` drafts of 6 per key, each position kept with its rate (a seeded draw)."""
    import random

    draws, a = random.Random(0), Acceptance()
    for _ in range(steps):
        for key, rate in rates.items():
            kept = 0
            while kept < 6 and draws.random() < rate:
                kept += 1
            a.learn(key, 6, kept)
    return a


def test_a_steep_verify_and_a_draft_that_is_refused_mean_no_draft():
    acceptance = taught({("model", 0): 0.3})
    choice = choose(CPU, acceptance, {"model": (6, 0)})
    assert choice["source"] == auto.NONE and choice["gamma"] == 0
    assert "no draft" in choice["reason"] and "draft model γ 1 would give" in choice["reason"]


def test_the_same_draft_pays_on_a_flat_verify():
    acceptance = taught({("model", 0): 0.6})
    on_cpu, on_gpu = choose(CPU, acceptance, {"model": (6, 0)}), choose(GPU, acceptance, {"model": (6, 0)})
    assert on_gpu["source"] == "model" and on_gpu["gamma"] > max(on_cpu["gamma"], 1)


def test_a_long_copy_is_taken_over_the_model_and_its_length_bounds_gamma():
    acceptance = taught({("model", 0): 0.5, ("suffix", 4): 0.95})
    choice = choose(CPU, acceptance, {"model": (6, 0), "suffix": (3, 4)})
    assert (choice["source"], choice["gamma"]) == ("suffix", 3)
    assert choice["expected"] > 3 and choice["cost"] == pytest.approx(CPU.verify[3])


def test_a_draft_model_that_must_catch_up_on_a_long_copy_pays_for_it_first():
    """Its cache lags every token other sources drafted: a prefill of them comes before its first token. The
    same acceptance pays with a cache one token behind (a draft the step before) and not 20 behind."""
    acceptance = taught({("model", 0): 0.5})
    lagging = CostModel(CPU.verify, CPU.draft, {"model": 0.02})
    assert lagging.catch_up("model", 1) == 0 and lagging.catch_up("model", 21) == pytest.approx(0.4)
    assert lagging.catch_up("model", 500) == lagging.catch_up("model", auto.CATCH_UP)  # never priced out for good
    assert choose(lagging, acceptance, {"model": (6, 0)}, {"model": 1})["source"] == "model"
    behind = choose(lagging, acceptance, {"model": (6, 0)}, {"model": 21})
    assert behind["source"] == auto.NONE and "draft model γ 2 would give" in behind["reason"]
    assert choose(CPU, acceptance, {"model": (6, 0)}, {"model": 21})["source"] == "model"  # the control: f = 0


def test_a_switched_off_source_is_tried_again():
    """Its counts decay while it is not drafted and its optimism grows: exploration comes back to it."""
    acceptance = taught({("model", 0): 0.2}, steps=50)
    assert choose(CPU, acceptance, {"model": (6, 0)})["source"] == auto.NONE
    for _ in range(300):  # steps that drafted from another source
        acceptance.learn(("prompt", 1), 1, 1)
    assert choose(CPU, acceptance, {"model": (6, 0)})["source"] == "model"


def test_a_source_written_off_comes_back_after_plain_steps():
    """Every source refused: the plain steps that follow decay the counts too, so the model is asked again (when
    only drafted steps decayed them, a process that had written everything off never drafted again)."""
    a = Acceptance()
    for _ in range(10):
        a.learn_tokens("model", [0.3], 0, 1.34)
    drafter = AutoDrafter(CPU, model=Scripted([0.3] * 400), acceptance=a)
    chosen = [drafter.propose([1, 2], 6, SamplingConfig(), None).choice["source"] for _ in range(300)]
    assert chosen[0] == auto.NONE and "model" in chosen


def test_a_copy_not_taken_is_learned_from_once_the_text_reaches_it():
    """A copy source's proposal is free, so it is judged whether or not it was sent: on a steep verify auto takes
    plain steps, and prompt lookup's offers (2-gram matches of 1 2 → 3 4) are scored against the text's own
    tokens, waiting while the text has not reached a draft's end."""
    steep = CostModel([1.0] + [3.0] * 6)
    drafter = AutoDrafter(steep, prompt=PromptLookupDrafter(max_ngram=2))
    text = [1, 2, 3, 4, 1, 2]
    assert drafter.propose(text, 2, SamplingConfig(), None).choice["source"] == auto.NONE
    drafter.propose(text + [3], 2, SamplingConfig(), None)  # 3 kept, 4 not reached yet: waits; offers 4 1
    assert drafter.acceptance.pooled_tried == {}
    drafter.propose(text + [3, 5], 2, SamplingConfig(), None)  # 3 kept, 5 replaced 4; 5 replaced 4 of 4 1
    assert drafter.acceptance.pooled_tried == {("prompt", 1): 2, ("prompt", 2): 1}
    assert drafter.acceptance.pooled_kept == {("prompt", 1): 1, ("prompt", 2): 0}
    assert drafter.acceptance.steps == 3  # one step each call: the offers judged do not decay the counts again


def test_acceptance_counts_follow_the_rule():
    a = Acceptance()
    a.learn(("model", 0), 4, 2)  # kept 2, the third refused, the fourth never tested
    assert a.tried == {("model", 0, 1): 1, ("model", 0, 2): 1, ("model", 0, 3): 1}
    assert a.kept == {("model", 0, 1): 1, ("model", 0, 2): 1, ("model", 0, 3): 0}


def test_a_try_counts_once_and_a_bucket_borrows_only_the_others():
    """A one-bucket source (the draft model) is (kept + m·r₀)/(tried + m) plus the bonus: two refusals do not
    write it off (its own counts are not its prior too); a new bucket starts from the others' rate."""
    m, r0 = auto.PRIOR_WEIGHT, auto.FIRST_RATE
    a = Acceptance()
    for _ in range(2):
        a.learn(("model", 0), 4, 0)
    tried = 1 + auto.DECAY
    assert a.rate(("model", 0), 1) == pytest.approx(m * r0 / (tried + m) + auto.OPTIMISM / math.sqrt(1 + tried))
    b = Acceptance()
    for _ in range(2):
        b.learn(("suffix", 2), 4, 0)
    others = m * r0 / (tried + m)  # bucket 3 has no counts: its prior is bucket 2's
    assert b.rate(("suffix", 3), 1) == pytest.approx(others + auto.OPTIMISM / math.sqrt(1 + tried))
    assert b.rate(("suffix", 3), 1) < b.rate(("prompt", 3), 1)  # a refused source is doubted in new buckets
    # positions 2..4 were never reached: they start from position 1's rate, not from a fresh source's r₀
    fresh = Acceptance().rate(("suffix", 2), 3)
    assert fresh == pytest.approx(r0 + auto.OPTIMISM)
    assert b.rate(("suffix", 2), 3) == pytest.approx(others + auto.OPTIMISM)
    assert b.rate(("suffix", 2), 3) < fresh


class Scripted(ModelDrafter):
    """A draft model fed numbers: token i drafted with top probability ``tops[i]`` (its q one row a call)."""

    def __init__(self, tops: list[float], vocab: int = 100):
        self.tops, self.vocab, self.calls = list(tops), vocab, 0

    def propose(self, tokens, n, sampling, generator):
        top = self.tops[self.calls]
        self.calls += 1
        q = torch.full((1, self.vocab), (1 - top) / (self.vocab - 1))
        q[0, 3] = top
        return engine.Draft([3], q)

    def lag(self, tokens):
        return 1  # its cache always holds all but the last token


def paying(steps: int = 50) -> Acceptance:
    """A draft model whose token-by-token steps have been paying: two confident tokens kept each step."""
    a = Acceptance()
    for _ in range(steps):
        a.learn_tokens("model", [0.95, 0.95], 2, 1.5)
    return a


def test_a_confident_draft_goes_on_and_an_unsure_one_stops_it():
    """The draft model, token by token, on a CPU's costs: confident tokens (π 0.95) are drafted to γ 6; an unsure
    one (π 0.05) is the last; on a steep verify an unsure first token is not sent (its c is paid, shown)."""
    confident = AutoDrafter(CPU, model=Scripted([0.95] * 6), acceptance=paying())
    drafted = confident.propose([1, 2], 6, SamplingConfig(), None)
    assert drafted.ids == [3] * 6 and drafted.choice["gamma"] == 6
    assert drafted.probs.shape == (6, 100) and "token by token" in drafted.choice["reason"]
    model = Scripted([0.95, 0.95, 0.05, 0.95])
    stopped = AutoDrafter(CPU, model=model, acceptance=paying()).propose([1, 2], 6, SamplingConfig(), None)
    assert model.calls == 3 and len(stopped.ids) in (2, 3) and "0.95, 0.95, 0.05)" in stopped.choice["reason"]
    steep = CostModel([1.0, 1.5, 1.7, 1.8], {"model": 0.25})
    dropped = AutoDrafter(steep, model=Scripted([0.05]), acceptance=paying()).propose([1, 2], 3, SamplingConfig(), None)
    assert dropped.ids == [] and dropped.choice["source"] == "model" and dropped.choice["gamma"] == 0
    assert dropped.choice["cost"] == pytest.approx(1.25)


def test_each_token_is_learned_in_its_confidence_bucket():
    drafter = AutoDrafter(GPU, model=Scripted([0.95, 0.3] + [0.95] * 10))
    drafted = drafter.propose([1, 2], 6, SamplingConfig(), None)
    assert len(drafted.ids) >= 2
    drafter.propose([1, 2, 3, 9], 6, SamplingConfig(), None)  # the first kept, the second (π 0.3) refused
    kept, tried = drafter.acceptance.kept, drafter.acceptance.tried
    assert kept[("model", 5, 1)] == tried[("model", 5, 1)] == 1
    assert (kept[("model", 1, 1)], tried[("model", 1, 1)]) == (0, 1)
    assert len(tried) == 2 and drafter.acceptance.pooled_tried[("model", 1)] == 2  # the third on: never tested
    assert drafter.acceptance.made["model"] == (1, 2, pytest.approx(drafted.choice["cost"]))  # 1 kept + the target's
    assert drafter.acceptance.token_rate("model", 0.95) > drafter.acceptance.token_rate("model", 0.3)


def test_auto_learns_what_was_kept_from_how_the_text_went_on():
    class Fixed:
        def propose(self, tokens, n, sampling, generator):
            return engine.Draft([5, 6, 7][:n])

    drafter = AutoDrafter(GPU, model=Fixed())
    first = drafter.propose([1, 2], 3, SamplingConfig(), None)
    assert first.ids == [5, 6, 7] and first.choice["source"] == "model"
    drafter.propose([1, 2, 5, 6, 9], 3, SamplingConfig(), None)  # 5, 6 kept; 9 replaced 7
    assert drafter.acceptance.kept[("model", 0, 2)] == pytest.approx(auto.DECAY**0)
    assert drafter.acceptance.kept[("model", 0, 3)] == 0


def test_a_request_starts_from_what_the_earlier_ones_kept(tiny_pair, monkeypatch):
    """The counts are the process's, per pair, as the suffix store's answers are; forgetting them starts afresh."""
    target, draft = tiny_pair
    monkeypatch.setattr(auto, "measure_costs", lambda *a, **k: GPU)
    cfg = DecodeConfig(max_new_tokens=30, gamma=6, method="auto")
    first = lambda: next(engine.speculative_steps(target, draft, PROMPTS[0], cfg)).draft_choice  # noqa: E731
    fresh = first()
    run_all(engine.speculative_steps(target, draft, PROMPTS[1], cfg))
    assert auto.shared_acceptance(auto.pair_name(target, draft)).steps > 1
    assert first()["reason"] != fresh["reason"]  # the same first step, other expectations
    auto.forget()
    assert first() == fresh


@pytest.mark.parametrize("steps", ["eager", "static"])
def test_greedy_auto_is_token_identical_to_generate(tiny_pair, steps, monkeypatch):
    """Every source it can take, at every γ: costs that make each choice happen (flat: it drafts; steep: it
    does not), on a dynamic and a static cache."""
    target, draft = tiny_pair
    for cost in (GPU, CPU, CostModel([1.0] + [3.0] * 8, {"model": 1.0})):
        monkeypatch.setattr(auto, "measure_costs", lambda *a, c=cost, **k: c)
        sources = set()
        for prompt in PROMPTS:
            expected = reference(target, prompt, 40)
            cfg = DecodeConfig(max_new_tokens=40, gamma=6, method="auto", steps=steps)
            run = run_all(engine.speculative_steps(target, draft, prompt, cfg, eos=eos_ids(target)))
            assert run.token_ids == expected, (prompt, cost)
            sources |= {s.draft_choice["source"] for s in run.steps}
        assert sources != {auto.NONE} or cost.verify[1] == 3.0  # flat costs draft; steep ones never do


def test_the_start_up_measurement_is_timed_and_cached(tmp_path, llama_pair):
    target, draft = llama_pair
    cost = auto.measure_costs(target, draft, 6)
    assert len(cost.verify) == 7 and cost.verify[0] == 1.0 and all(v > 0 for v in cost.verify)
    assert 0 < cost.draft["model"] < 2 and cost.seconds > 0 and f"in {cost.seconds:.1f} s" in cost.where
    assert 0 <= cost.feed["model"] < cost.draft["model"]  # a token taken in with others costs less than alone
    assert auto.measure_costs(target, draft, 6) is cost  # once per process


def test_the_verify_curve_is_the_line_through_every_k_not_each_k_alone():
    """A step of 1 + k tokens costs t_t + b·k: one k's noise (k = 3 read 20% high) moves the line a little, not that
    k's ratio, and a running max would have carried it on to every k after; a falling line is noise, read flat."""
    t_t, curve = auto.verify_curve([40.0, 43.0, 46.0, 58.0, 52.0, 55.0, 58.0])  # ms: 40 + 3·k, but k = 3
    assert t_t == pytest.approx(40, abs=1.5) and curve[0] == 1.0
    assert curve == sorted(curve) and curve[3] < 1.3 < 58 / 40 and curve[6] == pytest.approx(58 / 40, abs=0.03)
    assert auto.verify_curve([40.0, 39.0, 38.0])[1] == [1.0, 1.0, 1.0]


FREE = CostModel([1.0] * 7, {"model": 0.0, "prompt": 5.0, "suffix": 5.0})  # every token the model can draft, always
AUTO_CASES = [
    # the #32867 class: q must be the distribution the draft was drawn from, after temperature / top-k / top-p
    ("far", FREE, SamplingConfig(temperature=0.8, top_k=5, top_p=0.9, seed=21)),
    # copies and the model's drafts, mixed
    pytest.param("near", GPU, SamplingConfig(temperature=1.0, seed=22), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("draft_name, cost, sampling", AUTO_CASES, ids=str)
def test_auto_samples_the_target_distribution_with_its_choices_in_play(draft_name, cost, sampling, monkeypatch):
    monkeypatch.setattr(auto, "measure_costs", lambda *a, **k: cost)
    draft = DRAFTS[draft_name]()
    cfg = DecodeConfig(max_new_tokens=3, gamma=4, method="auto", sampling=sampling)
    first = next(engine.speculative_steps(TARGET, draft, PROMPT, cfg))
    assert first.draft_choice["source"] != auto.NONE and len(first.drafted) == 2
    if cost is FREE:  # the same costs as the control below: the only difference is the q
        assert first.draft_choice["source"] == "model"
    samples = sample_many(TARGET, draft, PROMPT, cfg, SAMPLES // 2)  # the control fails with a quarter
    assert chi2_pvalue(samples, exact_joint(TARGET, PROMPT, sampling)) > 1e-3


def test_the_chi2_check_catches_auto_with_a_q_that_is_not_the_sampled_one(monkeypatch):
    """The control, the #32867 bug class: the draft drawn from one distribution, the rule handed another q."""
    from specdemo.decoding.drafters import ModelDrafter

    # free drafts: the samples' refusals, which auto carries from one sample to the next, must not stop it drafting
    monkeypatch.setattr(auto, "measure_costs", lambda *a, **k: FREE)
    real = ModelDrafter.propose

    def flattened_q(self, *args):
        d = real(self, *args)
        if d.probs is not None:
            d.probs = torch.full_like(d.probs, 1 / d.probs.shape[-1])  # not the q x was drawn from
        return d

    monkeypatch.setattr(ModelDrafter, "propose", flattened_q)
    sampling = SamplingConfig(temperature=0.8, top_k=5, top_p=0.9, seed=21)
    cfg = DecodeConfig(max_new_tokens=3, gamma=4, method="auto", sampling=sampling)
    samples = sample_many(TARGET, DRAFTS["far"](), PROMPT, cfg, SAMPLES // 4)
    assert chi2_pvalue(samples, exact_joint(TARGET, PROMPT, sampling)) < 1e-3
