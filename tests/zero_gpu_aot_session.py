"""Run by tests/test_zero_gpu.py with the fake ``spaces`` first on the path, SPACES_ZERO_GPU=true and
SPECDEMO_STEPS=aot: app.py compiles the preloaded pair's steps ahead of time in one (forked) GPU call at
import, and a race in another worker runs them. Each worker's package calls are counted in a file (what
a worker does is not otherwise visible here). Prints one JSON line."""

import json
import os
from dataclasses import asdict
from pathlib import Path

import spaces  # the fake one (tests/fake_spaces)

from specdemo.decoding import aot

COUNTS = Path(os.environ["AOT_COUNTS"])
real_run = aot.run


def counted_run(model, *args):
    with COUNTS.open("a") as f:
        f.write(f"{os.getpid()}\n")
    return real_run(model, *args)


aot.run = counted_run
real_compile = spaces.aoti_compile


def counted_compile(*args, **kwargs):  # in the start-up GPU call's worker: ZeroGPU's own compile, once a model
    with COUNTS.open("a") as f:
        f.write(f"compile-{os.getpid()}\n")
    return real_compile(*args, **kwargs)


spaces.aoti_compile = counted_compile

import app  # noqa: E402 (after the count is in place: the import compiles, then forks workers)
from specdemo.app import settings as app_settings  # noqa: E402
from specdemo.app.race_tab import RACE_OUTPUTS  # noqa: E402
from specdemo.models import DEFAULT_CACHE  # noqa: E402

packages = sum(aot.has_package(DEFAULT_CACHE.get(*key).model) for key in DEFAULT_CACHE.keys())
out = {"calls": spaces.CALLS, "packages": packages}
story = dict(asdict(app_settings.Settings.from_preset(app.PRESET)), max_new_tokens=24, gamma=3)
for steps in ("aot", "eager", "compiled"):
    last = dict(zip(RACE_OUTPUTS, list(app.run(None, **(story | {"steps": steps})))[-1]))
    trace = last["trace"]
    tokens = {side: [t for s in trace[side] for t in s["emitted"]] for side in ("baseline", "speculative")}
    out[steps] = {"status": last["status"], "ran": trace["steps"]} | tokens
lines = COUNTS.read_text().split() if COUNTS.exists() else []
compiles = [line for line in lines if line.startswith("compile-")]
runs = [line for line in lines if not line.startswith("compile-")]
out["compiles"] = {"calls": len(compiles), "workers": len(set(compiles)), "parent": f"compile-{os.getpid()}" in lines}
out["package_calls"] = {"workers": len(set(runs)), "calls": len(runs), "parent": str(os.getpid()) in runs}
print("RESULT " + json.dumps(out, default=str))
