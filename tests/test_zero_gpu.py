"""The ZeroGPU contract without a GPU: the app imported as a ZeroGPU Space imports it, every
GPU handler called through a fake ``spaces`` whose decorator runs it in a forked worker with
pickle in and out (tests/fake_spaces), and every handler's inputs and outputs pickled here."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import gradio as gr
import pytest

from specdemo.app import api, durations, inspector, race_tab, tabs
from specdemo.app import settings as app_settings

ROOT = Path(__file__).resolve().parent.parent


def zero_gpu_session(script: str, **env) -> dict:
    """Run ``tests/<script>`` as a ZeroGPU Space runs the app (the fake spaces first on the path, the bundled
    pair preloaded); → the JSON it prints on its RESULT line."""
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "fake_spaces"), str(ROOT)]),
        "SPACES_ZERO_GPU": "true",
        "SPECDEMO_PRESET": "bundled-tinystories",
        "SPECDEMO_ZERO_GPU_PRESETS": "bundled-tinystories",
        **env,
    }
    run = subprocess.run(
        [sys.executable, str(ROOT / "tests" / script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    return json.loads(lines[0][len("RESULT ") :])


@pytest.mark.slow
def test_the_app_keeps_the_zero_gpu_contract():
    out = zero_gpu_session("zero_gpu_session.py")
    assert out["imported_before_spaces"] == []  # `import spaces` comes first in app.py
    assert out["zero_gpu"] and out["choices"] == ["bundled-tinystories"] and out["frozen"]
    assert out["race_status"].startswith("✓ done") and out["race_tokens"] == 16
    assert out["stopped_status"].startswith("■ stopped") and 0 < out["stopped_tokens"] < 400
    assert out["stepper_steps"] > 1 and out["stepper_next"]
    assert out["benchmark"] and "p-value" in out["lossless"] and out["compare_identical"]
    assert "runs only the models it loaded at start" in out["not_preloaded"]
    first, second = out["suffix_forwards"]
    assert second < first / 2  # the first race's answer reached the second race's worker
    called = {name for name, _ in out["calls"]}
    assert called == {"race_on_device", "stepper_start", "benchmark", "lossless", "compare_api"}
    assert all(0 < seconds <= durations.MAX_GPU_SECONDS for _, seconds in out["calls"])


@pytest.mark.slow
def test_a_zero_gpu_space_compiles_its_steps_ahead_of_time_once_and_every_race_runs_them(tmp_path):
    """SPECDEMO_STEPS=aot: one start-up GPU call (a forked worker) exports and compiles each preloaded
    model's step; its packages come back by pickle, and a race's worker (another fork) runs them: the
    same tokens as eager steps. "compiled" there means the same packages; "eager" runs none."""
    counts = tmp_path / "aot-calls"
    out = zero_gpu_session("zero_gpu_aot_session.py", SPECDEMO_STEPS="aot", AOT_COUNTS=str(counts))
    assert [name for name, _ in out["calls"]][0] == "compile_ahead" and out["packages"] == 2
    # through ZeroGPU's own spaces.aoti_compile, once per model, in the start-up call's worker (not here)
    assert out["compiles"] == {"calls": 2, "workers": 1, "parent": False}
    aot, eager, compiled = out["aot"], out["eager"], out["compiled"]
    assert aot["status"].startswith("✓ done") and "static steps" not in aot["status"], aot["status"]
    assert aot["ran"] == "aot" and compiled["ran"] == "aot" and eager["ran"] == "eager"
    assert aot["baseline"] == aot["speculative"] == eager["baseline"] == eager["speculative"]
    assert len(aot["baseline"]) == 24
    # the packages ran in the races' workers (two races: two workers), never in this process
    assert out["package_calls"]["workers"] == 2 and out["package_calls"]["calls"] > 20
    assert not out["package_calls"]["parent"]


def test_every_gpu_handlers_inputs_and_outputs_pickle():
    """What crosses a ZeroGPU call: the arguments Gradio passes (request and progress included)
    and every value the handler returns or yields."""
    story = asdict(app_settings.Settings.from_preset("bundled-tinystories", max_new_tokens=8))
    arguments = (gr.Request(), gr.Progress())
    pickle.loads(pickle.dumps((arguments, story)))
    outputs = [
        *race_tab.stream(app_settings.Settings(**story)),
        inspector.stepper_start(app_settings.Settings(**story)),
        tabs.benchmark(app_settings.Settings(**story), "2"),
        list(tabs.lossless_stream(app_settings.Settings(**story), samples=10, k=1))[-1],
        api.compare_api("once upon a time", 4, preset="bundled-tinystories"),
        race_tab.stream(app_settings.Settings(**(story | {"gamma": 0}))),  # errors are plain values too
    ]
    for value in outputs:
        value = list(value) if hasattr(value, "__next__") else value
        assert pickle.loads(pickle.dumps(value)) is not None
