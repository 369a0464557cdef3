"""Defaults chosen by measurement: a preset's race starts with what its own bench found fastest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specdemo.app import tabs
from specdemo.app.settings import Settings, preset_fields, start_note
from specdemo.decoding import methods
from specdemo.measure.defaults import choose_defaults, store_defaults
from specdemo.models import PRESETS, StartSettings, start_settings

STORY = PRESETS["bundled-tinystories"]


def test_the_fastest_candidate_is_stored_and_read_back_as_the_start(llama_pair, tmp_path):
    target, draft = llama_pair
    prompts = [[1, 5, 7, 9, 11, 1, 5, 7, 9], [3, 3, 40, 41, 42, 3, 3, 40]]
    drafters = {
        ("draft", 1): (draft, 1, "draft"),
        ("draft", 3): (draft, 3, "draft"),
        ("prompt-lookup", 4): (None, 4, "prompt-lookup"),
    }
    chosen = choose_defaults(target, drafters, prompts, 24, set(), progress=False)
    speedups = [r["speedup"] for r in chosen["ranked"]]
    assert len(speedups) == 3 and speedups == sorted(speedups, reverse=True)
    assert {(r["method"], r["gamma"]) for r in chosen["ranked"]} == set(drafters)
    assert (chosen["method"], chosen["gamma"]) == (chosen["ranked"][0]["method"], chosen["ranked"][0]["gamma"])
    store_defaults(tmp_path / f"{STORY.name}.json", STORY.name, chosen, "a test machine")
    start = start_settings(STORY, tmp_path)
    assert (start.method, start.gamma, start.max_new_tokens) == (chosen["method"], chosen["gamma"], 24)
    assert "fastest of 3 choices" in start.note and "a test machine" not in start.note  # provenance: docs/
    # the control: nothing stored → the draft model at the preset's own γ, and no claim
    assert start_settings(STORY, tmp_path / "nothing") == StartSettings(gamma=STORY.gamma)


def test_the_app_starts_each_preset_with_its_measured_start():
    for name in ("smollm2-135m", STORY.name):
        start = start_settings(PRESETS[name])
        s = Settings.from_preset(name)
        assert (s.method, s.gamma) == (start.method, start.gamma)
        fields = preset_fields(name)
        assert fields[6:9] == (methods.get(start.method).label, start.gamma, s.max_new_tokens)
        assert fields[9] == start_note(name)
        assert tabs.gamma_for_method(methods.get(start.method).label, name) == start.gamma
    shipped = start_settings(PRESETS["smollm2-135m"])
    assert shipped.note and "Starts with" in start_note("smollm2-135m")  # the CPU default's start is measured
    assert start_note(STORY.name) == ""  # nothing measured: no claim


@pytest.mark.slow
def test_bench_defaults_races_the_candidates_and_stores_the_fastest(tmp_path):
    out = tmp_path / "start.json"
    command = [sys.executable, "-m", "specdemo", "bench", "--defaults", "--preset", STORY.name]
    r = subprocess.run(
        command + ["--candidates", "draft=2,prompt-lookup=2", "--max-new-tokens", "8", "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    chosen = json.loads(r.stdout)
    stored = json.loads(out.read_text())
    assert stored["preset"] == STORY.name and stored["ranked"] == chosen["ranked"] and len(chosen["ranked"]) == 2
    assert (chosen["method"], chosen["gamma"]) in {("draft", 2), ("prompt-lookup", 2)}
    assert chosen["prompts"] == len(STORY.examples) and "thread" in stored["measured"]
    for bad in ("draft", "draft=1,draft=1", "magic=2", "self-int8=2"):  # a race starts with the app's methods
        refused = subprocess.run(command + ["--candidates", bad], capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and "--candidates" in refused.stderr and "Traceback" not in refused.stderr
