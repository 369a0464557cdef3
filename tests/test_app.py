"""The app's behaviour: the handlers called directly (plain values in and out), the wiring
through gradio_client, and the contract a ZeroGPU Space imposes (everything pickles)."""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go
import pytest
from tqdm import tqdm

from specdemo.app import api, durations, inspector, model_thread, race_tab, sessions, tabs
from specdemo.app import settings as app_settings
from specdemo.app.race_tab import RACE_OUTPUTS
from specdemo.app.settings import Settings
from specdemo.decoding import methods, suffix
from specdemo.decoding.drafters import PROMPT_LOOKUP_GAMMA
from specdemo.models import BUNDLED_DRAFT, BUNDLED_TARGET, PRESETS

STORY = "once upon a time, there was a little"
BASE = Settings(
    prompt=STORY,
    target_id=BUNDLED_TARGET,
    draft_id=BUNDLED_DRAFT,
    gamma=4,
    max_new_tokens=24,
    chat_template=False,
)


def settings(**changes) -> Settings:
    return replace(BASE, **changes)


def last_race_output(**changes) -> dict:
    outputs = list(race_tab.stream(settings(**changes)))
    assert outputs
    return dict(zip(RACE_OUTPUTS, outputs[-1]))


def test_run_streams_both_panes_and_finishes():
    out = last_race_output()
    assert out["status"].startswith("✓ done: speedup ") and "× · 24 + 24 tokens" in out["status"]
    assert "tok-target" in out["baseline_pane"] and "tok-accepted" in out["speculative_pane"]
    assert "identical to baseline" in out["summary"] and "✓" in out["summary"]
    figures = [out[name] for name in RACE_OUTPUTS if name.endswith("_plot")]
    assert len(figures) == 5 and all(isinstance(f, go.Figure) for f in figures)
    for figure in figures:  # built without validation for speed: check them here
        go.Figure(figure.to_dict())
    assert out["race_plot"].data[0].y[-1] == out["race_plot"].data[1].y[-1] == 24
    assert out["trace"]["specdemo_trace"] == 1 and len(out["trace"]["baseline"]) == 24


def test_the_race_is_shown_while_it_runs_without_slowing_it(monkeypatch):
    """Updates come from a consumer that renders the latest state at a fixed rate: many steps
    per update, figures at most once a second, the trace kept along the way (a stopped run can
    still be inspected)."""
    monkeypatch.setattr(race_tab, "PANES_EVERY_S", 0.01)
    monkeypatch.setattr(race_tab, "PLOTS_EVERY_S", 0.0)
    updates = list(race_tab.stream(settings(max_new_tokens=200, prompt=STORY + " dog")))
    assert len(updates) >= 3
    running = [dict(zip(RACE_OUTPUTS, u)) for u in updates[1:-1]]
    assert all(u["status"].startswith("● running") for u in running)
    assert any(isinstance(u["trace"], dict) for u in running)


def test_stop_ends_the_race_showing_what_it_has():
    race = race_tab.stream(settings(max_new_tokens=400), session="s-stop")
    next(race), next(race)  # starting, then running
    assert sessions.request_stop("s-stop") == "■ stopping…"
    last = dict(zip(RACE_OUTPUTS, list(race)[-1]))
    assert last["status"].startswith("■ stopped")
    assert 0 < len(last["trace"]["baseline"]) < 400  # the stopped run can be inspected and exported
    assert not sessions.stop_requested("s-stop")  # the next run starts afresh
    assert dict(zip(RACE_OUTPUTS, list(race_tab.stream(settings(max_new_tokens=4), "s-stop"))[-1]))[
        "status"
    ].startswith("✓ done")


def test_closing_the_race_stops_it_at_its_next_step():
    """Gradio closes the generator when the browser goes away."""
    race = race_tab.stream(settings(max_new_tokens=400))
    next(race)
    race.close()  # must return promptly: the race is cancelled at its next step
    start = time.perf_counter()
    model_thread.call(lambda: None)  # and the model thread is free again
    assert time.perf_counter() - start < 1.0


def test_tree_method_runs_in_the_app():
    out = last_race_output(method_label="token tree")
    assert out["status"].startswith("✓ done") and "✓" in out["summary"]
    assert any(step["tree_parents"] for step in out["trace"]["speculative"])
    sampled = last_race_output(method_label="token tree", temperature=1.0, seed=1)["speculative_pane"]
    assert "kept with probability p′(x)" in sampled and "min(1, p/q)" not in sampled  # the tree's own rule


def test_naive_method_is_labelled_not_lossless():
    naive = methods.get("naive").label
    out = last_race_output(method_label=naive)
    assert out["status"].startswith("✓ done") and "NOT lossless" in out["summary"]


def test_the_bundled_pair_lower_cases_the_prompt_and_says_so():
    out = last_race_output(prompt="Once upon a time, there was a little", max_new_tokens=4)
    assert "lower-cased" in out["status"] and "once upon a time" in out["baseline_pane"]


@pytest.mark.parametrize(
    "changes, field, message",
    [
        ({"prompt": "   "}, "prompt", "prompt is empty"),
        ({"gamma": 0}, "gamma", "between 1 and 32"),
        ({"temperature": -1.0}, "temperature", "temperature must be"),
        ({"top_p": None}, "top_p", "top_p must be a number"),
        ({"max_new_tokens": 100000}, "max_new_tokens", "max new tokens must be at most"),
        ({"method_label": "token tree", "tree_depth": 99}, "tree_depth", "tree depth"),
        ({"method_label": methods.FEATURE.label}, "method_label", "needs a feature drafter as the draft"),
        ({"draft_id": ""}, "method_label", "needs a draft model"),
    ],
)
def test_bad_input_is_refused_before_loading_next_to_its_field(changes, field, message):
    at_fault, text = app_settings.find_problem(settings(**changes))
    assert at_fault == field and message in text
    status = list(race_tab.stream(settings(**changes)))[-1][RACE_OUTPUTS.index("status")]
    assert status.startswith("⚠") and message in status


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"target_id": "no such/model!"}, "neither a local folder nor"),
        ({"quantization": "4bit"}, "CUDA GPU"),
    ],
)
def test_load_errors_are_one_status_line_and_nothing_is_lost(changes, message, caplog):
    caplog.set_level(logging.INFO, logger="specdemo.app")
    outputs = list(race_tab.stream(settings(**changes)))
    assert outputs[0] == race_tab.status_only("● loading the pair (its first run)…")
    assert all(o[-2].startswith("● loading the pair (its first run)… ") for o in outputs[1:-1])  # ticking
    out = dict(zip(RACE_OUTPUTS, outputs[-1]))
    assert out["status"].startswith("⚠") and message in out["status"] and "Traceback" not in out["status"]
    assert all(out[name] == app_settings.KEEP for name in RACE_OUTPUTS if name != "status")  # panes stay as they were
    refused = [r for r in caplog.records if r.name == "specdemo.app"]
    assert refused and all(r.exc_info is None for r in refused)  # one line, no traceback


def test_the_status_line_says_what_a_first_run_waits_for_and_ticks(monkeypatch):
    list(race_tab.stream(settings(max_new_tokens=2)))  # the bundled pair is loaded now
    assert app_settings.loading_text(settings()) == "starting"
    assert app_settings.loading_text(settings(target_id="not/loaded")) == "loading the pair (its first run)"
    smollm2_first = settings(target_id=PRESETS["smollm2-135m"].target, dtype="float16")  # a key not loaded
    monkeypatch.setattr(app_settings.smollm2, "needs_conversion", lambda: True)
    assert app_settings.loading_text(smollm2_first) == "converting SmolLM2's GGUF once (≈ 30 s), then loading the pair"
    monkeypatch.setitem(app_settings.smollm2.converting, "stages_done", 1)  # what convert_gguf reports
    assert "(≈ 30 s) ▰▰▱▱▱▱▱▱▱▱ 25%," in app_settings.loading_text(smollm2_first)  # the tokenizer read
    # then transformers reads the GGUF under its own tqdm bar, whose count the line follows
    with tqdm(total=272, desc=app_settings.smollm2.GGUF_BAR, disable=False, file=io.StringIO()) as bar:
        bar.update(136)
        assert "(≈ 30 s) ▰▰▰▰▰▰▱▱▱▱ 57%," in app_settings.loading_text(smollm2_first)
    monkeypatch.setitem(app_settings.smollm2.converting, "stages_done", 2)
    assert "▰▰▰▰▰▰▰▰▰▱ 90%," in app_settings.loading_text(smollm2_first)

    def slow_prepare(s):
        time.sleep(1.6)
        return app_settings.prepare(s)

    monkeypatch.setattr(race_tab, "prepare", slow_prepare)
    statuses = [o[-2] for o in race_tab.stream(settings(max_new_tokens=2))]
    assert statuses[0] == "● starting…" and statuses[-1].startswith("✓ done")
    ticks = [t for t in statuses if re.fullmatch(r"● starting… \d+ s", t)]
    seconds = [int(t.split()[-2]) for t in ticks]
    assert len(ticks) >= 2 and seconds == sorted(seconds) and seconds[-1] >= 1


def test_an_unexpected_error_inside_the_model_is_a_status_line(monkeypatch, caplog):
    """A model that raises mid-race (out of memory, simulated): one status line in the UI."""
    import specdemo.app.live

    def explode(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        yield

    monkeypatch.setattr(specdemo.app.live, "run_race", explode)
    status = list(race_tab.stream(settings()))[-1][RACE_OUTPUTS.index("status")]
    assert status.startswith("⚠ the device ran out of memory")
    monkeypatch.setattr(specdemo.app.live, "run_race", lambda *a, **k: iter([1 / 0]))
    status = list(race_tab.stream(settings()))[-1][RACE_OUTPUTS.index("status")]
    assert status.startswith("⚠ unexpected error (ZeroDivisionError)")
    assert any(r.exc_info for r in caplog.records if r.name == "specdemo.app")  # the log has the traceback


def test_validator_marks_the_field_at_fault():
    import app

    values = {name: getattr(settings(gamma=0), name) for name in app_settings.SETTING_NAMES}
    verdicts = dict(zip(values, app.validate(**values)))
    assert not verdicts["gamma"]["is_valid"] and "between 1" in verdicts["gamma"]["message"]
    assert all(v["is_valid"] for name, v in verdicts.items() if name != "gamma")
    ok = {name: getattr(settings(), name) for name in app_settings.SETTING_NAMES} | {"samples": 10}
    assert all(v["is_valid"] for v in app.validate(**ok))


def test_keep_and_update_are_gradios_own_values():
    assert app_settings.KEEP == gr.skip()
    assert app_settings.update(minimum=0, maximum=3, value=1) == gr.update(minimum=0, maximum=3, value=1)


def test_trace_export_and_replay_without_a_model(tmp_path):
    trace = last_race_output(max_new_tokens=12)["trace"]
    path = sessions.export_trace(trace, "session-1")
    replayed = dict(zip(RACE_OUTPUTS, list(race_tab.replay(path))[-1]))
    assert "no model ran" in replayed["status"] and "tok-accepted" in replayed["speculative_pane"]
    assert replayed["trace"]["speculative"] == trace["speculative"]
    older = tmp_path / "older.json"  # a trace downloaded before the side was renamed still replays
    data = json.loads(open(path).read())
    older.write_text(json.dumps({k if k != "speculative" else "contender": v for k, v in data.items()}))
    assert "tok-accepted" in dict(zip(RACE_OUTPUTS, list(race_tab.replay(str(older)))[-1]))["speculative_pane"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    assert "not a specdemo trace" in list(race_tab.replay(str(bad)))[-1][RACE_OUTPUTS.index("status")]
    sessions.forget_session("session-1")  # the browser session ended: its files go
    assert not os.path.exists(path)
    assert sessions.export_trace(None, "session-1") == app_settings.KEEP


def test_step_inspector_walks_one_step_at_a_time():
    session, html, figure, slider = inspector.stepper_start(settings(temperature=1.0, seed=3))
    assert "Step 0" in html and session["shown"] == 0 and len(session["steps"]) > 1
    pickle.loads(pickle.dumps(session))  # plain records: nothing live crosses a (ZeroGPU) call
    for _ in range(30):
        session, html, figure, slider = inspector.stepper_next(session)
        if session["steps"][session["shown"]].correction is not None:
            break
    assert "correction" in html and "the target's draw from norm(max(0, p − q))" in html
    assert figure is not None  # the residual, p and q bars at the rejection


def test_step_inspector_handles_a_one_step_run_and_a_stopped_one():
    session, html, _, slider = inspector.stepper_start(settings(max_new_tokens=1))
    assert len(session["steps"]) == 1 and "Finished" in html and "⚠" not in html
    assert slider["maximum"] > slider["minimum"]
    assert inspector.stepper_next(session)[1] == html  # stays on the last step
    stopped = last_race_output(max_new_tokens=1)["trace"] | {"speculative": []}
    assert "stopped before its first step" in inspector.inspect_last(stopped)[1]


def test_theory_uses_the_last_run():
    trace = last_race_output()["trace"]
    alpha, gamma, cost, note = tabs.theory_from_last(trace)
    assert 0 < alpha <= 1 and gamma == 4 and 0 < cost < 1
    figure = tabs.theory(alpha, gamma, cost, trace)
    assert any(trace_.name == "last run" for trace_ in figure.data)
    assert tabs.theory_from_last(None)[-1].startswith("⚠")


def test_the_zoo_marks_the_last_race():
    trace = last_race_output()["trace"]
    zoo = tabs.methods_view("smollm2-135m", trace)[2]
    star = zoo.data[-1]
    assert star.name == "your last race (draft)" and star.y[0] == tabs.measured_point(trace)["alpha"]
    assert not any("last race" in (t.name or "") for t in tabs.methods_view("smollm2-135m")[2].data)


def test_losslessness_check_in_the_app():
    updates = list(tabs.lossless_stream(settings(), samples=30, k=1, temperature=1.0))
    assert len(updates) == 3  # every 10 samples per side: two running states, then the verdict
    assert "10 of 30 per side, χ² p-value so far" in updates[0][1] and updates[0][0] is not None
    figure, text = updates[-1]
    assert "p-value" in text and figure is not None


@pytest.mark.slow
def test_losslessness_check_flags_a_wrong_sampler(monkeypatch):
    """A speculative side that samples from the wrong distribution (a colder temperature)
    must be caught: the check is not a rubber stamp."""
    import specdemo.measure.lossless

    real = specdemo.measure.lossless.decode_steps

    def too_cold(target, draft, ids, config, eos):
        cold = replace(config, sampling=replace(config.sampling, temperature=0.3))
        return real(target, draft, ids, cold, eos)

    monkeypatch.setattr(specdemo.measure.lossless, "decode_steps", too_cold)
    _, text = list(tabs.lossless_stream(settings(), samples=300, k=1, temperature=1.0))[-1]
    assert "the distributions differ" in text


def test_benchmark_tab():
    figure, table = tabs.benchmark(settings(max_new_tokens=12), gammas="1,3", repeats=1)
    assert "specdemo-speculative" in table and figure is not None
    assert "<table class='bench'>" in table and "<pre" not in table  # a real table, not fixed-width text
    headers = table.split("</tr>")[0]
    assert headers.index("× baseline") < headers.index("acceptance")  # the figure that matters comes first
    rows = table.split("</tr>")[1:-1]
    assert all("–" not in row.split("</td>")[3] for row in rows)  # every row has its × baseline
    assert "⚠" in tabs.benchmark(settings(), gammas="x")[1]


def test_gpu_durations_follow_the_work_and_stay_within_a_free_quota():
    assert durations.race_seconds(max_new_tokens=16) < durations.race_seconds(max_new_tokens=400) <= 120
    assert durations.benchmark_seconds(gammas="1,2", max_new_tokens=64) < durations.benchmark_seconds(
        gammas="1,2,3,4,6,8", max_new_tokens=64, repeats=3
    )
    assert durations.lossless_seconds(samples=50, k=1) < durations.lossless_seconds(samples=2000, k=4) <= 120
    assert durations.compare_seconds("a prompt", 16) < durations.compare_seconds("a prompt", 400)


# ---------------------------------------------------------------- through the server


@pytest.fixture(scope="module")
def client(server):
    from gradio_client import Client

    return Client(server, verbose=False)


def compare_call(client, prompt=STORY, **kwargs):
    args = dict(max_new_tokens=8, gamma=3, temperature=0.0, seed=0) | kwargs
    return client.predict(prompt=prompt, api_name="/compare", **args)


def test_compare_endpoint_returns_the_cli_json(client):
    out = compare_call(client, max_new_tokens=20, gamma=4)
    assert set(out) >= {"prompt_ids", "baseline", "speculative", "speedup", "first_divergence"}
    assert out["speculative"]["token_ids"] == out["baseline"]["token_ids"]
    assert len(out["baseline"]["token_ids"]) == 20
    assert 0 <= out["speculative"]["acceptance_rate"] <= 1


def test_sixteen_concurrent_calls_all_complete_correctly(client):
    words = "cat dog bird girl boy tree car ball sun moon fish cake park hat box cup".split()
    with ThreadPoolExecutor(16) as pool:
        jobs = [pool.submit(compare_call, client, f"{STORY} {w}", seed=i) for i, w in enumerate(words)]
        results = [j.result(timeout=300) for j in jobs]
    assert all(r["speculative"]["token_ids"] == r["baseline"]["token_ids"] for r in results)
    assert len({tuple(r["prompt_ids"]) for r in results}) == 16


def test_bad_api_input_is_a_clear_error_and_the_next_call_works(client):
    with pytest.raises(Exception, match="between 1 and 32"):
        compare_call(client, gamma=99)
    assert len(compare_call(client, gamma=2)["speculative"]["token_ids"]) == 8


@pytest.mark.slow
def test_a_full_queue_refuses_clearly_and_the_server_carries_on(client):
    """48 calls at once against a queue of 32 (SPECDEMO_MAX_QUEUE's default): each one either
    succeeds, correct, or is refused with "Queue is full"; then the server answers normally."""
    assert app_queue_size() == 32
    with ThreadPoolExecutor(48) as pool:
        jobs = [pool.submit(compare_call, client, f"{STORY} {i}", max_new_tokens=16) for i in range(48)]
        served, refused = 0, 0
        for job in jobs:
            try:
                result = job.result(timeout=600)
                assert result["speculative"]["token_ids"] == result["baseline"]["token_ids"]
                served += 1
            except Exception as error:  # noqa: BLE001 (gradio_client's error types vary)
                assert "Queue is full" in str(error), error
                refused += 1
    assert served + refused == 48 and served >= 32
    assert len(compare_call(client)["baseline"]["token_ids"]) == 8


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1]) * 1024


@pytest.mark.slow
def test_memory_stays_flat_over_120_sequential_calls(client):
    for _ in range(10):  # warm up: allocator pools, caches
        compare_call(client, max_new_tokens=4)
    before = rss_bytes()
    for i in range(120):
        compare_call(client, f"{STORY} {i % 7}", max_new_tokens=4, seed=i)
    assert rss_bytes() <= 1.15 * before, (before, rss_bytes())


def test_a_client_that_cancels_mid_stream_frees_its_slot(client):
    import time

    job = client.submit(**(asdict(settings(max_new_tokens=400))), api_name="/race")
    while not job.outputs():  # the race is streaming
        time.sleep(0.05)
    job.cancel()
    start = time.perf_counter()
    compare_call(client, max_new_tokens=4)  # waits for the one slot (concurrency 1)
    assert time.perf_counter() - start < 1.5


def test_a_model_that_fails_mid_call_leaves_the_server_serving(client, monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB (simulated)")

    monkeypatch.setattr(api, "compare", out_of_memory)
    with pytest.raises(Exception, match="ran out of memory"):
        compare_call(client)
    monkeypatch.undo()
    assert len(compare_call(client)["baseline"]["token_ids"]) == 8


def app_queue_size() -> int:
    import app

    return app.demo._queue.max_size


def test_the_api_page_lists_only_the_public_endpoints(client):
    endpoints = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert endpoints == {"/race", "/compare"}


@pytest.mark.slow
def test_which_method_when_tab_measures_and_explains_each_task():
    figure, table, zoo = tabs.methods_remeasure(settings(), max_new_tokens=8)
    assert figure is not None and "<table class='tasks'>" in table
    points = {trace.name: len(trace.x) for trace in zoo.data[1:]}  # after the contours: one trace per method
    # one point per task; suffix decoding also on the chat prompts asked again
    assert points == {"draft": 9, "prompt-lookup": 9, "suffix": 10}
    for task in ("chat", "code-edit", "rewrite", "extract", "multi-turn", "chat-again"):
        assert f"<td>{task}</td>" in table
    assert table.count(" wins on ") + table.count("Nothing pays on ") == 10  # one sentence per row
    assert "No stored table" in tabs.methods_view("no-such-preset")[1]


def test_why_sentences_name_the_deciding_term():
    from specdemo.measure.tasks import why_sentence

    def row(task, method, speedup, alpha):
        return {"task": task, "method": method, "speedup": speedup, "alpha": alpha, "tau": 1 + alpha, "c": 0.05}

    result = {
        "rows": [row("edit", "draft", 0.9, 0.3), row("edit", "prompt-lookup", 2.1, 0.8)]
        + [row("chat", "draft", 1.3, 0.6), row("chat", "prompt-lookup", 0.95, 0.1)]
        + [row("story", "draft", 0.8, 0.2), row("story", "prompt-lookup", 0.9, 0.05)]
        + [row("chat-again", "suffix", 2.4, 0.9), row("code", "suffix", 1.4, 0.5), row("code", "draft", 0.9, 0.3)],
        "best": {"edit": "prompt-lookup", "chat": "draft", "story": "prompt-lookup", "chat-again": "suffix"}
        | {"code": "suffix"},
    }
    assert "copies the prompt" in why_sentence("edit", result)
    assert "answered before" in why_sentence("chat-again", result)
    assert "spans of the prompt or of earlier answers" in why_sentence("code", result)
    hybrid = {"rows": [row("story", "hybrid", 1.3, 0.43)], "best": {"story": "hybrid"}}
    assert "the draft model the rest" in why_sentence("story", hybrid)
    assert "finds little to copy" in why_sentence("chat", result)
    assert why_sentence("story", result).startswith("Nothing pays on story")


def test_a_refused_input_is_one_line_in_the_server_log(caplog):
    caplog.set_level(logging.INFO, logger="specdemo.app")
    assert app_settings.find_problem(settings(prompt="   "))[0] == "prompt"
    lines = [r.getMessage() for r in caplog.records if r.name == "specdemo.app"]
    assert lines == ["refused: the prompt is empty: type some text to continue"]


def test_suffix_decodings_memory_is_shown_and_forgotten():
    for other in suffix.shared_stores():  # (an earlier test's race on another tokenizer filed its answers there)
        other.reset()
    store = suffix.shared_store()
    store.remember([5, 6, 7])
    assert "**1 earlier answer** (3 tokens" in tabs.suffix_memory()
    assert "**0 earlier answers** (0 tokens" in tabs.forget_answers() and store.stats()["answers"] == 0


def test_picking_a_method_picks_its_gamma():
    preset = "bundled-tinystories"
    assert tabs.gamma_for_method("suffix decoding (prompt + earlier answers)", preset) == suffix.DEFAULT_GAMMA
    assert tabs.gamma_for_method("prompt lookup", preset) == PROMPT_LOOKUP_GAMMA
    assert tabs.gamma_for_method("draft model", preset) == PRESETS[preset].gamma


def test_trying_another_method_keeps_every_race_on_the_prompt():
    from specdemo.app import tries

    first = last_race_output()["trace"]
    kept, table, suggestion = tries.after_race([], first)
    assert [t["method"] for t in kept] == ["draft"] and table == ""  # one race: nothing to compare yet
    assert suggestion == methods.get("suffix").label  # the first method not raced on this prompt
    label, gamma = tries.pick(suggestion, "bundled-tinystories")
    assert (label, gamma) == (suggestion, suffix.DEFAULT_GAMMA)
    second = last_race_output(method_label=label, gamma=gamma)["trace"]
    kept, table, suggestion = tries.after_race(kept, second)
    assert [t["method"] for t in kept] == ["draft", "suffix"]
    assert table.count("<tr>") == 3 and "★" in table and suggestion == methods.get("prompt-lookup").label
    speedups = [t["speedup"] for t in kept]
    assert f"{max(speedups):.2f}× ★" in table and f"{min(speedups):.2f}× ★" not in table
    # another prompt starts a new list; a race that never started adds nothing
    other = last_race_output(prompt="the dog ran to the")["trace"]
    assert [t["method"] for t in tries.keep_try(kept, other)] == ["draft"]
    assert tries.keep_try(kept, None) == kept
    assert tries.keep_try(kept, second) == kept  # a failed race leaves the last trace as it was: not kept twice
    tabs.forget_answers()  # the suffix race filed its answer in the process's store


def test_a_run_too_short_to_time_claims_no_speedup_and_gets_no_star():
    """One token a side is jitter, not a measurement: the summary says so and the tries table stars
    only lossless runs long enough to time (the naive hand-off never)."""
    from specdemo.app import tries

    short = last_race_output(max_new_tokens=1)
    assert "too short to time: 1 token" in short["summary"] and "×</td>" not in short["summary"].split("speedup")[1]
    long = last_race_output()
    assert "too short" not in long["summary"]  # control: 24 tokens are timed
    naive = last_race_output(method_label=methods.get("naive").label)
    kept = [tries.tried_row(out["trace"]) for out in (short, long, naive)]
    table = tries.tries_html(kept)
    rows = [row.split("</tr>")[0] for row in table.split("<tr>")[2:]]  # the header row first
    assert "★" not in rows[0] and "– (too short)" in rows[0]
    assert "★" in rows[1] and "★" not in rows[2]


def test_a_race_stopped_before_any_step_has_nothing_to_compare():
    from specdemo.measure.race import RaceState
    from specdemo.view.render import summary_html

    empty = RaceState(methods.DRAFT.name, True, done=True)
    html = summary_html(empty.summary(), greedy=True, lossless=True)
    assert "nothing to compare" in html and "0.00×" not in html and "identical" not in html


def test_sampled_panes_do_not_flag_differences_and_say_why():
    sampled = last_race_output(temperature=0.8, seed=3)
    sides = [[t for step in sampled["trace"][side] for t in step["emitted"]] for side in ("baseline", "speculative")]
    assert sides[0] != sides[1]  # the two samples do differ…
    assert "differs from the baseline here" not in sampled["speculative_pane"]  # …and no token is flagged
    assert "both sides draw their own random tokens" in sampled["summary"]
    greedy = last_race_output(draft_id=BUNDLED_TARGET)  # control: greedy marks a difference if there is one
    assert "both sides draw" not in greedy["summary"]


def test_special_tokens_show_as_a_readable_marker():
    from transformers import AutoTokenizer

    from specdemo.app.settings import decoder

    tokenizer = AutoTokenizer.from_pretrained(BUNDLED_TARGET)
    decode = decoder(tokenizer)
    assert decode(tokenizer.eos_token_id) == " ⟨end⟩"
    word = tokenizer.encode("once", add_special_tokens=False)[0]
    assert decode(word) == tokenizer.decode([word])  # control: an ordinary token is its text


def test_the_method_dropdown_says_what_a_method_that_cannot_run_here_needs(monkeypatch, tmp_path):
    from specdemo.app.settings import method_choices
    from specdemo.models import Preset, vllm

    monkeypatch.setattr(app_settings, "PRESETS", {n: p for n, p in app_settings.PRESETS.items() if "feature" not in n})

    monkeypatch.setattr(vllm, "answers", lambda url: False)  # no vLLM server running
    shown = dict((value, text) for text, value in method_choices())
    assert "needs its vLLM servers running" in shown[methods.get("vllm").label]
    assert shown[methods.DRAFT.label] == methods.DRAFT.label  # runs anywhere: its plain label
    feature = methods.get("feature").label
    assert "needs a trained feature drafter" in shown[feature]  # no preset has one: the PRESETS patch below
    monkeypatch.setattr(vllm, "answers", lambda url: True)
    assert [value for text, value in method_choices() if text != value] == [feature]
    trained = tmp_path / "head"  # the control: a preset whose draft is a feature drafter
    trained.mkdir()
    (trained / "feature_drafter.json").write_text("{}")
    monkeypatch.setitem(app_settings.PRESETS, "with-a-head", Preset("with-a-head", "t", str(trained)))
    assert all(text == value for text, value in method_choices())


def test_the_start_pair_loads_in_the_background_and_a_click_meanwhile_waits_for_it(monkeypatch):
    """launch() loads the start pair on the model thread: the status line follows it, a race
    started meanwhile queues behind it and finds the pair loaded (nothing is loaded twice)."""
    import threading

    from specdemo.app import warmup
    from specdemo.models import DEFAULT_CACHE

    monkeypatch.setattr(warmup, "_loading", {})
    assert warmup.status() == ("", True)  # nothing started: nothing to say
    busy = threading.Event()
    model_thread.submit(busy.wait, 30)  # the model thread is busy: the loading waits its turn
    loading = warmup.start("bundled-tinystories")
    assert warmup.status() == ("loading the models", False)
    busy.set()
    loading.result(timeout=120)
    assert warmup.status() == ("", True)
    loads = DEFAULT_CACHE.loads
    last_race_output(max_new_tokens=4)  # the click: the pair is there
    assert DEFAULT_CACHE.loads == loads
    assert app_settings.loading_text(Settings.from_preset("bundled-tinystories")) == "starting"


def test_a_start_pair_that_does_not_load_is_one_log_line_and_run_says_the_rest(monkeypatch, caplog):
    from specdemo.app import warmup
    from specdemo.errors import ModelLoadError

    def fail(s):
        raise ModelLoadError("no such model here")

    caplog.set_level(logging.INFO, logger="specdemo.app")
    monkeypatch.setattr(warmup, "pair_for", fail)
    monkeypatch.setattr(warmup, "_loading", {})
    warmup.start("bundled-tinystories").exception(timeout=30)
    assert warmup.status() == ("", True)  # the button says Run again: a click shows the error in full
    assert [r.getMessage() for r in caplog.records if r.name == "specdemo.app"] == ["refused: no such model here"]


def test_the_page_shows_no_server_path_and_the_server_loads_what_it_shows():
    """The model fields show a repository folder relative to it; the settings resolve it back to the path
    the presets (and the model cache) use. Hub ids and unknown names pass unchanged."""
    import app
    from specdemo.models import shown_id

    root = Path(app.__file__).resolve().parent
    page = json.dumps(app.demo.config, default=str)
    assert str(root) not in page and str(Path.home()) not in page
    api_page = app.demo.get_api_info()  # what "Use via API" shows: no internal note either
    assert "ZeroGPU" not in json.dumps(api_page) and str(root) not in json.dumps(api_page)
    shown = app_settings.preset_fields("bundled-tinystories")[0]
    assert shown == "assets/models/tinystories-target" == shown_id(BUNDLED_TARGET)
    assert Settings(target_id=shown).target_id == BUNDLED_TARGET  # what the cache knows it by
    hub = PRESETS["qwen2.5-3b+0.5b"].target
    assert shown_id(hub) == hub and Settings(target_id=hub).target_id == hub
    assert Settings(target_id="assets/models/no-such-folder").target_id == "assets/models/no-such-folder"
