"""Run by tests/test_zero_gpu.py in a fresh interpreter with the fake ``spaces`` first on the
path and SPACES_ZERO_GPU=true: imports the app as a ZeroGPU Space does and calls every GPU
handler through the fake decorator (a forked worker, pickle in and out). Prints one JSON line."""

import json
from dataclasses import asdict

import spaces  # the fake one (tests/fake_spaces)

import app
from specdemo.app import inspector, sessions
from specdemo.app import settings as app_settings
from specdemo.app.race_tab import RACE_OUTPUTS
from specdemo.models import DEFAULT_CACHE, PRESETS

preset = PRESETS[app.PRESET]
story = dict(asdict(app_settings.Settings.from_preset(app.PRESET)), max_new_tokens=16)
out = {"imported_before_spaces": sorted(spaces.IMPORTED_BEFORE), "zero_gpu": app.ZERO_GPU}
out["choices"] = app.CHOICES
out["frozen"] = DEFAULT_CACHE.frozen and len(DEFAULT_CACHE.keys()) == 2

race = list(app.run(None, **story))
last = dict(zip(RACE_OUTPUTS, race[-1]))
out["race_status"] = last["status"]
out["race_tokens"] = len(last["trace"]["baseline"])

# Stop reaches the race in its worker process: the flag is a file in the shared temp folder.
long_race = app.run(None, **(story | {"max_new_tokens": 400}))
updates = [next(long_race), next(long_race)]  # starting, then running
sessions.request_stop(None)
updates += list(long_race)
out["stopped_status"] = dict(zip(RACE_OUTPUTS, updates[-1]))["status"]
out["stopped_tokens"] = len(dict(zip(RACE_OUTPUTS, updates[-1]))["trace"]["baseline"])

session, html, figure, slider = app.stepper_start(None, **story)
out["stepper_steps"] = len(session["steps"])
out["stepper_next"] = "Step 1" in inspector.stepper_next(session)[1]
out["benchmark"] = "specdemo-speculative" in app.benchmark(None, gammas="2", **story)[1]
out["lossless"] = list(app.lossless(None, samples=20, k=1, **story))[-1][1]
out["compare_identical"] = (lambda r: r["baseline"]["token_ids"] == r["speculative"]["token_ids"])(
    app.compare_api("once upon a time", 8, 3, preset=app.PRESET)
)
# Suffix decoding: each race's worker keeps nothing, yet the second race of a prompt drafts from
# the first one's answer (filed in this process from its trace, then forked into the next worker).
suffix_story = story | {"method_label": "suffix decoding (prompt + earlier answers)", "gamma": 8, "max_new_tokens": 48}
forwards = []
for _ in range(2):
    trace = dict(zip(RACE_OUTPUTS, list(app.run(None, **suffix_story))[-1]))["trace"]
    forwards.append(len(trace["speculative"]))
out["suffix_forwards"] = forwards
other = story | {"target_id": "Qwen/Qwen2.5-7B-Instruct"}  # not loaded at start
out["not_preloaded"] = dict(zip(RACE_OUTPUTS, list(app.run(None, **other))[-1]))["status"]
out["calls"] = spaces.CALLS
print("RESULT " + json.dumps(out))
