"""The Gradio app: event functions called directly, then the server driven by gradio_client."""

from __future__ import annotations

import inspect
import pickle
from concurrent.futures import ThreadPoolExecutor

import plotly.graph_objects as go
import pytest

import app
from specdemo.models import BUNDLED_DRAFT, BUNDLED_TARGET

STORY = "once upon a time, there was a little"


def run_inputs(**changes):
    values = dict(
        prompt=STORY,
        target_id=BUNDLED_TARGET,
        draft_id=BUNDLED_DRAFT,
        quantization="none",
        dtype="auto",
        method_label="draft model",
        gamma=4,
        schedule="constant",
        temperature=0.0,
        top_k=0,
        top_p=1.0,
        seed=0,
        max_new_tokens=24,
        chat_template=False,
        tree_k=2,
        tree_depth=4,
        tree_nodes=12,
        draft_vocab=0,
    )
    values.update(changes)
    return [values[name] for name in app.SETTING_NAMES]


def last_output(**changes):
    outputs = list(app.run(*run_inputs(**changes)))
    assert outputs
    return outputs[-1]


def test_run_streams_both_panes_and_finishes():
    base_html, spec_html, summary, race, acceptance, histogram, speedup, breakdown, status, trace = last_output()
    assert status == "✅ done"
    assert "tok-target" in base_html and "tok-accepted" in spec_html
    assert "identical to baseline" in summary and "✓" in summary
    assert all(isinstance(f, go.Figure) for f in (race, acceptance, histogram, speedup, breakdown))
    assert race.data[0].y[-1] == race.data[1].y[-1] == 24
    assert trace["specdemo_trace"] == 1 and len(trace["baseline"]) == 24


def test_tree_method_runs_in_the_app():
    *_, summary, race, _, _, _, _, status, trace = last_output(method_label="token tree")
    assert status == "✅ done" and "✓" in summary
    assert any(step["tree_parents"] for step in trace["contender"])


def test_naive_method_is_labelled_not_lossless():
    naive = next(k for k in app.METHOD_LABELS if "naive" in k)
    *_, summary, race, _, _, _, _, status, _ = last_output(method_label=naive)
    assert status == "✅ done" and "NOT lossless" in summary


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"prompt": "   "}, "prompt is empty"),
        ({"gamma": 0}, "between 1 and 32"),
        ({"temperature": -1.0}, "temperature must be"),
        ({"target_id": "no such/model!"}, "neither a local folder nor"),
        ({"quantization": "4bit"}, "CUDA GPU"),
        ({"max_new_tokens": 100000}, "max_new_tokens must be at most"),
    ],
)
def test_bad_input_shows_a_message_not_a_traceback(changes, message):
    outputs = list(app.run(*run_inputs(**changes)))
    status = outputs[-1][-2]
    assert status.startswith("⚠️") and message in status and "Traceback" not in status


@pytest.fixture(scope="module")
def client(server):
    from gradio_client import Client

    return Client(server, verbose=False)


def test_compare_endpoint_returns_the_cli_json(client):
    out = client.predict(prompt=STORY, max_new_tokens=20, gamma=4, temperature=0.0, seed=0, api_name="/compare")
    assert set(out) >= {"prompt_ids", "baseline", "speculative", "speedup", "first_divergence"}
    assert out["speculative"]["token_ids"] == out["baseline"]["token_ids"]
    assert len(out["baseline"]["token_ids"]) == 20
    assert 0 <= out["speculative"]["acceptance_rate"] <= 1


def test_eight_concurrent_calls_all_complete(client):
    prompts = [f"{STORY} {word}" for word in ("cat", "dog", "bird", "girl", "boy", "tree", "car", "ball")]
    with ThreadPoolExecutor(8) as pool:
        jobs = [
            pool.submit(
                client.predict, prompt=p, max_new_tokens=8, gamma=3, temperature=0.0, seed=i, api_name="/compare"
            )
            for i, p in enumerate(prompts)
        ]
        results = [j.result(timeout=300) for j in jobs]
    assert all(r["speculative"]["token_ids"] == r["baseline"]["token_ids"] for r in results)
    assert len({tuple(r["prompt_ids"]) for r in results}) == 8


def test_bad_api_input_is_a_clear_error_and_the_next_call_works(client):
    with pytest.raises(Exception, match="between 1 and 32"):
        client.predict(prompt=STORY, max_new_tokens=8, gamma=99, temperature=0.0, seed=0, api_name="/compare")
    out = client.predict(prompt=STORY, max_new_tokens=8, gamma=2, temperature=0.0, seed=0, api_name="/compare")
    assert len(out["speculative"]["token_ids"]) == 8


def test_trace_export_and_replay_without_a_model(tmp_path):
    *_, trace = last_output(max_new_tokens=12)
    path = app.export_trace(trace)
    replayed = list(app.replay(path))
    base_html, spec_html, summary, *_, status, again = replayed[-1]
    assert "no model ran" in status and "tok-accepted" in spec_html
    assert again["contender"] == trace["contender"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    assert "not a specdemo trace" in list(app.replay(str(bad)))[-1][-2]


def test_step_inspector_walks_one_step_at_a_time():
    session, html, figure, slider = app.stepper_start(*run_inputs(temperature=1.0, seed=3))
    assert "Step 0" in html and session["shown"] == 0 and len(session["steps"]) > 1
    pickle.loads(pickle.dumps(session))  # plain records: nothing live crosses a (ZeroGPU) call
    for _ in range(30):
        session, html, figure, slider = app.stepper_next(session)
        if session["steps"][session["shown"]].correction is not None:
            break
    assert "correction" in html and "draw from norm(max(0, p − q))" in html
    assert figure is not None  # the residual, p and q bars at the rejection


def test_step_inspector_handles_a_one_step_run():
    """A run that ends at once (one step) must not give the slider maximum == minimum."""
    session, html, _, slider = app.stepper_start(*run_inputs(max_new_tokens=1))
    assert len(session["steps"]) == 1 and "Finished" in html and "⚠️" not in html
    assert slider["maximum"] > slider["minimum"]
    assert app.stepper_next(session)[1] == html  # stays on the last step


def test_theory_uses_the_last_run():
    *_, trace = last_output()
    alpha, gamma, cost = app.theory_from_last(trace)
    assert 0 < alpha <= 1 and gamma == 4 and 0 < cost < 1
    figure = app.theory(alpha, gamma, cost, trace)
    assert any(trace_.name == "last run" for trace_ in figure.data)


def test_losslessness_check_in_the_app():
    figure, text = app.lossless(*run_inputs(), samples=60, k=1, check_temperature=1.0)
    assert "p-value" in text and figure is not None


def test_benchmark_tab():
    figure, table = app.benchmark(*run_inputs(max_new_tokens=12), gammas="1,3", repeats=1)
    assert "specdemo-speculative" in table and figure is not None
    assert "⚠️" in app.benchmark(*run_inputs(), gammas="x")[1]


def test_handlers_expose_progress_and_request_to_gradio():
    """Gradio injects gr.Progress / gr.Request only into positional parameters it can see."""
    from gradio.helpers import special_args

    for handler in (app.run, app.stepper_start, app.benchmark, app.lossless):
        inputs = [None] * (len(app.SETTING_NAMES) + len(inspect.signature(handler).parameters) - len(app.SETTING_NAMES))
        _, progress_index, _ = special_args(handler, inputs, None)[:3]
        assert progress_index is not None, handler.__name__
    assert inspect.isgeneratorfunction(app.run)
