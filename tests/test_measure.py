"""Benchmark smoke test, the paper's formulas, the two-sample χ² check, the Spaces GPU wrapper."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections import Counter

import pytest

from specdemo.measure.lossless import two_sample_pvalue
from specdemo.measure.metrics import best_gamma, expected_tokens_per_step, predicted_speedup, theoretical_speedup
from specdemo.models import PRESETS


def test_paper_formulas():
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    # Leviathan et al. Table: α = 0.8, γ = 4, c = 0.1 → about 2.4x
    assert theoretical_speedup(0.8, 4, 0.1) == pytest.approx(3.3616 / 1.4, rel=1e-3)
    assert predicted_speedup(3.0, 4, 0.001, 0.005, 0.006) == pytest.approx(3.0 * 0.005 / 0.010)
    assert best_gamma(0.9, 0.05) > best_gamma(0.5, 0.05)


def test_two_sample_pvalue_tells_same_from_different():
    same_a = Counter({("a",): 500, ("b",): 300, ("c",): 200})
    same_b = Counter({("a",): 490, ("b",): 310, ("c",): 200})
    other = Counter({("a",): 200, ("b",): 300, ("c",): 500})
    assert two_sample_pvalue(same_a, same_b) > 0.5
    assert two_sample_pvalue(same_a, other) < 1e-6
    assert two_sample_pvalue(Counter({("a",): 10}), Counter({("a",): 10})) == 1.0


@pytest.mark.slow
def test_bench_smoke_on_the_bundled_pair(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("once upon a time, there was a little\ntom had a red ball.\n")
    csv_path, plot_path = tmp_path / "bench.csv", tmp_path / "bench.html"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "specdemo",
            "bench",
            "--prompts",
            str(prompts),
            "--gammas",
            "2,4",
            "--max-new-tokens",
            "16",
            "--repeats",
            "1",
            "--json",
            "--csv",
            str(csv_path),
            "--plot",
            str(plot_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    engines = {(row["engine"], row["gamma"]) for row in rows}
    assert ("specdemo-baseline", None) in engines and ("transformers-generate", None) in engines
    for g in (2, 4):
        for e in (
            "specdemo-speculative",
            "specdemo-prompt-lookup",
            "specdemo-tree",
            "transformers-assisted",
            "transformers-prompt-lookup",
        ):
            assert (e, g) in engines
    assert {row["same_tokens"] for row in rows} == {"2/2"}  # greedy fp32: every engine writes the baseline's tokens
    spec = [row for row in rows if row["engine"] == "specdemo-speculative"]
    for row in spec:
        assert 0 <= row["acceptance_rate"] <= 1 and row["cost_ratio"] > 0
        assert row["measured_over_predicted"] > 0 and row["tokens_per_second"] > 0
    assert csv_path.read_text().startswith("acceptance_rate") and "plotly" in plot_path.read_text()


def test_same_tokens_counts_the_prompts_whose_tokens_are_the_references():
    """A trailing end-of-sequence token is no difference (vLLM's stream leaves it out); one token
    changed, or one missing mid-answer, is."""
    from specdemo.measure.bench import Timed, same_tokens

    def runs(*answers):
        return [Timed(len(a), 1.0, token_ids=a) for a in answers]

    reference = runs([5, 6, 7, 2], [8, 9], [1, 2, 3])
    assert same_tokens(runs([5, 6, 7], [8, 9, 2], [1, 2, 3]), reference, eos={2}) == (3, 3)
    assert same_tokens(runs([5, 6, 7, 2], [8, 4], [1, 3]), reference, eos={2}) == (1, 3)  # the control
    assert same_tokens(runs([5, 6, 7], [8, 9], [1, 2, 3]), reference) == (2, 3)  # without eos, 2 is a token


def test_the_bench_table_leaves_out_the_columns_no_engine_has_a_figure_for():
    from specdemo.measure.bench import Row, summarise, table_cells

    base = Row("specdemo-baseline", None, 100, 4.0, t_target=0.04)
    spec = Row("specdemo-speculative", 2, 100, 3.0, acceptance_rate=0.5, mean_accepted_tokens=2.0)
    spec.t_draft, spec.t_verify, spec.same_tokens = 0.004, 0.05, (3, 3)
    headers, rows = table_cells(summarise([base, spec], "cpu"))
    assert headers[:5] == ["engine", "γ", "tokens/s", "× baseline", "same tokens"]
    assert "acceptance" in headers and "× transformers generate" not in headers and "× vLLM baseline" not in headers
    assert all(len(row) == len(headers) for row in rows) and rows[1][4] == "3/3"
    hf = Row("transformers-generate", None, 100, 5.0)
    headers, _ = table_cells(summarise([base, hf, spec], "cpu"))
    assert "× transformers generate" in headers  # the control: a row with that figure brings its column


def test_bench_rejects_bad_gammas():
    r = subprocess.run(
        [sys.executable, "-m", "specdemo", "bench", "--gammas", "0,40"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "between 1 and 32" in r.stderr


@pytest.mark.slow
def test_profile_command_prints_the_verify_cost_curve_split_by_part():
    r = subprocess.run(
        [sys.executable, "-m", "specdemo", "profile", "--preset", "bundled-tinystories"]
        + ["--ks", "2,4", "--contexts", "20,40", "--repeats", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["dtype"] == "float32" and out["threads"] >= 1
    for model in ("target", "draft"):
        rows = out[model]
        assert [(row["context"], row["k"]) for row in rows] == [(c, k) for c in (20, 40) for k in (1, 2, 4)]
        for row in rows:
            assert row["ms"] > 0
            assert set(row["parts"]) == {"layers", "attention", "other ops", "mask", "lm_head", "sampling", "python"}
            assert all(v >= 0 for v in row["parts"].values()) and row["parts"]["lm_head"] > 0
    human = subprocess.run(
        [sys.executable, "-m", "specdemo", "profile", "--preset", "bundled-tinystories"]
        + ["--ks", "3", "--contexts", "20", "--repeats", "2", "--no-split"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert human.returncode == 0, human.stderr
    assert "t_t = " in human.stdout and "t_v(k)/t_t: k=3:" in human.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "specdemo", "profile", "--ks", "0,x"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--ks" in bad.stderr


def test_profile_times_a_forward_and_crops_the_cache_back(tiny_folders):
    from specdemo.measure.profile import ProfileRow, ratio_curve, time_forward, warm_cache
    from specdemo.models import load_model

    model, _ = load_model(str(tiny_folders["target"]))
    lm, prefix = warm_cache(model, 30)
    assert lm.cache.get_seq_length() == 30 == len(lm.fed)
    assert time_forward(lm, prefix, prefix[:5]) > 0
    assert lm.cache.get_seq_length() == 30 == len(lm.fed)  # the 5 new positions are gone again
    rows = [ProfileRow(1, 30, 10.0), ProfileRow(3, 30, 12.5), ProfileRow(1, 60, 20.0), ProfileRow(3, 60, 30.0)]
    assert ratio_curve(rows) == {30: {1: 1.0, 3: 1.25}, 60: {1: 1.0, 3: 1.5}}


def test_the_profile_times_the_ks_in_turns_so_drift_is_no_curve(monkeypatch):
    """Every k costing the same on a machine that slows with every forward: in turns, t(k)/t(1)
    stays within one round's drift of 1; the control, each k's forwards one after another, shows
    the drift as a verify cost that grows with k."""
    from specdemo.measure import profile

    calls = []

    def drifting_forward(lm, prefix, new):
        calls.append(len(new))
        return 1.0 + 0.01 * len(calls)  # seconds: the same work, a little slower each time

    monkeypatch.setattr(profile, "time_forward", drifting_forward)
    ks = (1, 3, 9)
    walls, masks = profile.interleaved_walls(None, list(range(20)), ks, repeats=10)
    assert calls[9:15] == [1, 3, 9, 9, 3, 1]  # after the warm-up: turns, reversed every second round
    assert all(len(walls[k]) == 10 for k in ks) and set(masks) == set(ks)
    curve = {k: statistics.median(walls[k]) / statistics.median(walls[1]) for k in ks}
    assert all(abs(r - 1) < 0.02 for r in curve.values())
    calls.clear()
    one_after_another = {k: statistics.median(drifting_forward(None, [], [0] * k) for _ in range(10)) for k in ks}
    assert one_after_another[9] / one_after_another[1] > 1.15  # the control: drift read as a cost


def test_the_task_suite_has_every_task_type_with_at_least_eight_prompts():
    from specdemo.measure.tasks import load_tasks

    tasks = load_tasks()
    expected = {"chat", "story", "explain-to-a-child", "code-write", "code-edit", "rewrite", "extract"}
    assert expected | {"list-continuation", "multi-turn"} == set(tasks)
    assert all(len(entries) >= 8 for entries in tasks.values())
    assert all(isinstance(e, list) and e[-1]["role"] == "user" for e in tasks["multi-turn"])
    assert all("def " in e for e in tasks["code-edit"]) and all("Text:" in e for e in tasks["extract"])


@pytest.mark.slow
def test_bench_tasks_prints_methods_by_task_and_marks_the_best(tmp_path):
    out = tmp_path / "tasks.json"
    r = subprocess.run(
        [sys.executable, "-m", "specdemo", "bench", "--tasks", "--preset", "bundled-tinystories"]
        + ["--task-names", "story,chat", "--methods", "draft,prompt-lookup=2,self-int8", "--max-new-tokens", "8"]
        + ["--json", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert json.loads(out.read_text()) == result
    assert result["gammas"] == {"draft": PRESETS["bundled-tinystories"].gamma, "prompt-lookup": 2, "self-int8": 2}
    lookup = [row for row in result["rows"] if row["method"] == "prompt-lookup"]
    assert all(len(row["alpha_per_position"]) <= 2 for row in lookup)  # at most γ = 2 drafts a step
    assert {(row["task"], row["method"]) for row in result["rows"]} == {
        (t, m) for t in ("story", "chat") for m in ("draft", "prompt-lookup", "self-int8")
    }
    # the target drafting for itself in int8: the same weights, right more often than the trained draft
    alpha = {(row["task"], row["method"]): row["alpha"] for row in result["rows"]}
    assert all(alpha[(t, "self-int8")] > max(0.6, alpha[(t, "draft")]) for t in ("story", "chat"))
    for task, best in result["best"].items():
        rows = [row for row in result["rows"] if row["task"] == task]
        assert best == max(rows, key=lambda row: row["speedup"])["method"]
    for methods in ("magic", "draft=0", "suffix=six", "draft,draft=2"):
        bad = subprocess.run(
            [sys.executable, "-m", "specdemo", "bench", "--tasks", "--methods", methods],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert bad.returncode == 2 and "--methods" in bad.stderr and "Traceback" not in bad.stderr, methods


def test_tasks_ask_the_chat_prompts_again_and_only_suffix_decoding_remembers(llama_pair):
    """chat-again: the chat prompts a second time with the store the chat row filled; every other
    task, and every repeat of one, starts empty (the control: the same prompts under another task name, or in
    the chat row's own second and third passes, gain nothing: the kept pass is the median of three)."""
    from specdemo.measure.tasks import REPEATED, format_tasks, run_tasks

    target, draft = llama_pair
    prompts = [[1, 5, 7, 9, 11], [3, 3, 40, 41, 42]]
    drafters = {"draft": (draft, 2, "draft"), "suffix": (None, 8, "suffix")}
    result = run_tasks(target, drafters, {"chat": prompts, "story": prompts}, 40, set(), progress=False, repeats=3)
    rows = {(r["task"], r["method"]): r for r in result["rows"]}
    assert (REPEATED, "suffix") in rows and (REPEATED, "draft") not in rows
    assert rows[(REPEATED, "suffix")]["tau"] > 2 * rows[("chat", "suffix")]["tau"]
    assert rows[("story", "suffix")]["tau"] < 1.5 * rows[("chat", "suffix")]["tau"]  # reset: no memory
    assert result["best"][REPEATED] == "suffix" and "as in chat" in format_tasks(result)


def test_bench_engines_take_turns_prompt_by_prompt_so_drift_lands_on_all_alike():
    """Two engines doing the same work on a machine that slows down as it goes: timed in turns,
    their ratio stays 1; the control, one engine over all prompts and then the other, shows the
    drift as a false speedup. The kept repeat is the one with the median total."""
    from specdemo.measure.bench import Job, Timed, time_interleaved

    clock = {"work": 0}
    log = []

    class Engine(Job):
        def __init__(self, name):
            self.engine, self.gamma, self.starts = name, None, 0

        def start(self):
            self.starts += 1

        def once(self, prompt):
            log.append((self.engine, prompt))
            clock["work"] += 1
            return Timed(10, 1.0 + 0.1 * clock["work"])  # each call a little slower than the last

    class Bar:  # tqdm's update(): one tick a generation, so one long prompt still shows progress
        ticks: list = []

        def update(self):
            self.ticks.append(len(log))

    a, b = Engine("a"), Engine("b")
    rows = time_interleaved([a, b], [0, 1, 2, 3], repeats=3, bar=Bar())
    assert Bar.ticks == list(range(1, 25))  # 2 engines × 4 prompts × 3 repeats, each as it ends
    assert log[:8] == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2), ("b", 3), ("a", 3)]
    assert a.starts == b.starts == 3
    ratio = rows[0].seconds / rows[1].seconds
    assert ratio == pytest.approx(1.0)
    assert rows[0].seconds == pytest.approx(sum(1.0 + 0.1 * w for w in (9, 12, 13, 16)))  # the middle repeat
    clock["work"] = 0
    one_then_other = [time_interleaved([e], [0, 1, 2, 3])[0] for e in (Engine("a"), Engine("b"))]
    assert one_then_other[1].seconds / one_then_other[0].seconds > 1.2  # the control: drift as a "speedup"
