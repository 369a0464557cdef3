"""The method registry: a new drafter is one class and one ``register`` call, and every layer finds it."""

from __future__ import annotations

import contextlib
import io

import pytest

from specdemo.decoding import methods
from specdemo.decoding.drafters import Draft
from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, eos_ids, run_all
from specdemo.errors import InputError


class RepeatDrafter:
    """A toy: propose the last token again, n times (q one-hot, as prompt lookup's)."""

    def propose(self, tokens, n, sampling, generator) -> Draft:
        return Draft([tokens[-1]] * n) if n > 0 else Draft()


TOY = methods.Method(
    "repeat-last",
    "repeat the last token (a toy)",
    "repeat-last toy",
    "speculative decoding with the last token repeated as the draft",
    draft_model=False,
    gamma=2,
    drafter=lambda config, draft_model, target, store=None: RepeatDrafter(),
    suggest=99,
    start=True,
    start_gammas=(3,),
    bench=True,
)


@pytest.fixture
def toy():
    methods.register(TOY)
    yield TOY
    del methods.REGISTRY[TOY.name]


def places() -> dict[str, bool]:
    """Where a method named repeat-last shows: the CLI, the app's dropdown, the bench, the tasks table."""
    from specdemo import cli
    from specdemo.app.settings import method_choices
    from specdemo.cli.bench import task_method_names
    from specdemo.measure.bench import all_engines
    from specdemo.measure.defaults import candidates

    shown = io.StringIO()
    with contextlib.redirect_stdout(shown), pytest.raises(SystemExit):
        cli.build_parser().parse_args(["generate", "--help"])
    return {
        "--help": "repeat-last" in shown.getvalue(),
        "described": TOY.description in " ".join(shown.getvalue().split()),  # --method's help, unwrapped
        "dropdown": TOY.label in [value for _, value in method_choices()],
        "bench": TOY.engine in all_engines(),
        "tasks": TOY.name in task_method_names(),
        "start candidates": f"{TOY.name}=3" in candidates().split(","),
        "suggested": TOY.name in [m.name for m in methods.suggestions()],
    }


def test_a_registered_method_appears_in_the_cli_the_app_the_bench_and_the_suggestions(toy):
    assert places() == dict.fromkeys(places(), True)


def test_without_registering_it_appears_nowhere():
    """The control: the same checks find nothing before the one registry entry."""
    assert places() == dict.fromkeys(places(), False)
    with pytest.raises(InputError, match="method must be one of"):
        methods.get("repeat-last")


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="registered already"):
        methods.register(methods.DRAFT)


def test_a_toy_method_races_losslessly_and_is_named_on_every_side(toy, llama_pair):
    """The race, the summary and the app's dropdown value all carry the registered method; greedy
    output is the target's own (the rule is untouched: only the proposal changed)."""
    from specdemo.app.live import run_race
    from specdemo.app.settings import Settings
    from specdemo.models.cache import Pair

    target, _ = llama_pair
    eos = eos_ids(target)
    prompt = [3, 3, 3, 40, 41, 42, 3, 3]
    config = DecodeConfig(max_new_tokens=24, gamma=3, method=TOY.name)
    run = run_all(decode_steps(target, None, prompt, config, eos))
    base = run_all(baseline_steps(target, prompt, config, eos))
    assert run.token_ids == base.token_ids
    assert all(s.drafted == [s.drafted[0]] * len(s.drafted) for s in run.steps if s.drafted)

    pair = Pair(target, None, None, "t", "", eos)
    final = list(run_race(pair, prompt, config))[-1]
    assert final.method == TOY.name and final.done
    assert final.summary()["identical_so_far"] and final.about is TOY
    assert Settings(method_label=TOY.label).config().method == TOY.name


def test_the_bench_times_a_registered_method(toy, llama_pair):
    from specdemo.measure.bench import run_bench
    from specdemo.models.cache import Pair

    target, draft = llama_pair
    pair = Pair(target, draft, None, "t", "d", eos_ids(target))
    result = run_bench(pair, [[1, 5, 7, 9]], [2], 8, 1, progress=False, engines=("specdemo-baseline", TOY.engine))
    rows = {r["engine"]: r for r in result["rows"]}
    assert rows[TOY.engine]["tokens"] > 0 and rows[TOY.engine]["gamma"] == 2


def test_engine_refuses_a_method_it_does_not_run(llama_pair):
    target, draft = llama_pair
    with pytest.raises(InputError, match="not run by this engine"):
        decode_steps(target, draft, [1, 2], DecodeConfig(method="naive"))
