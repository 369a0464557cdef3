"""scripts/gpu_check.py, the run prepared for a lent GPU, on this CPU: every part runs and reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the GPU check's whole run, on this CPU

ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_check_runs_end_to_end_on_a_cpu(tmp_path):
    env = os.environ | {"GPU_CHECK_DEVICE": "cpu", "GPU_CHECK_PRESETS": "bundled-tinystories", "OUT": str(tmp_path)}
    env |= {"GPU_CHECK_PROMPTS": "1"}  # each part on one prompt: the GPU's run takes two
    # aot's timing is step_ms on an aot CachedLM, whose packages the identity and the app race build here too;
    # a second build for random weights (≈ 40 s of this suite) is the GPU's run's only
    env |= {"GPU_CHECK_AOT_PRESETS": ""}
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py")], env=env, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert {r["steps"] for r in report["identity"]} == {"eager", "static", "compiled", "aot"}
    assert all(r["identical"] for r in report["identity"])
    kinds = report["timings bundled-tinystories"]["kinds"]
    assert set(kinds) == {"eager", "compiled"} and all(k["t_t_ms"] > 0 and k["c"] > 0 for k in kinds.values())
    assert len(report["app race"]) == 2 and all(status.startswith("✓") for status in report["app race"].values())
    assert "== summary" in run.stdout and "FAILED" not in run.stdout


def test_the_gpu_check_fails_loudly_on_a_missing_piece(tmp_path):
    """The control: a preset without an architecture to build is a failure, not a skip."""
    env = os.environ | {"GPU_CHECK_DEVICE": "cpu", "GPU_CHECK_PRESETS": "no-such-preset", "OUT": str(tmp_path)}
    env |= {"GPU_CHECK_PARTS": "timings"}
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py")], env=env, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 1 and "FAILED: timings no-such-preset" in run.stdout
