"""What each kind of Space does at start, measured against a hub on 127.0.0.1 (``tools/local_hub.py``).

    python -m tools.space_start [--bandwidth 100] [--out docs/results/space_start.json]

CPU basic: SmolLM2's GGUF downloaded as a Space without the wheel downloads it (the real client, the real
bytes), converted once, the pair loaded with its preset's options; the bytes, each stage's seconds and the
process's peak memory are measured here. Over a real network the download takes bytes / bandwidth: the
bandwidth is stated (``--bandwidth`` MB/s), not measured, and the time at that bandwidth says so. The GPU
Spaces' downloads are the Qwen checkpoints' bytes from their architectures (``assets/configs/``: parameters ×
2 bytes of bf16, as the hub stores them), and their memory the weights alone: computed, not measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def checkpoint_bytes(repo_id: str) -> int:
    """The bf16 bytes of a hub checkpoint, from its architecture (built on the meta device: no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config_file = ROOT / "assets" / "configs" / (repo_id.replace("/", "--") + ".json")
    config = AutoConfig.for_model(
        **{k: v for k, v in json.loads(config_file.read_text()).items() if k != "architectures"}
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return 2 * sum(p.numel() for p in model.parameters())  # tied embeddings counted once, as stored


def cpu_space(bandwidth: float, wheel: Path) -> dict:
    from specdemo.models import PRESETS, ModelCache, load_pair, smollm2
    from tools.local_hub import LocalHub

    smollm2.wheel_gguf = lambda: None  # a Space has no wheel: the GGUF comes from the hub
    with LocalHub(Path(os.environ["SPECDEMO_CACHE_DIR"]) / "served") as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        repo = hub.folder / smollm2.GGUF_REPO
        repo.mkdir(parents=True)
        (repo / smollm2.GGUF_NAME).symlink_to(wheel)  # served under its hub name
        start = time.perf_counter()
        gguf = smollm2.download_gguf()
        downloaded = time.perf_counter()
        smollm2.resolve_target()
        converted = time.perf_counter()
        preset = PRESETS["smollm2-135m"]
        load_pair(preset.target, preset.draft, preset.target_options, preset.draft_options, ModelCache(),
                  preset.draft_vocab)  # fmt: skip
        loaded = time.perf_counter()
    mb = gguf.stat().st_size / 1e6
    return {
        "preset": preset.name,
        "download_mb": round(mb, 1),
        "download_s_local_hub": round(downloaded - start, 2),
        "download_s_at_bandwidth": round(mb / bandwidth, 1),
        "convert_s": round(converted - downloaded, 1),
        "load_s": round(loaded - converted, 1),
        "peak_memory_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def gpu_spaces(bandwidth: float) -> list[dict]:
    from specdemo.models import PRESETS

    rows = []
    for kind, name in (("ZeroGPU", "qwen2.5-3b+0.5b"), ("ZeroGPU, the showcase", "qwen2.5-14b+0.5b"),
                       ("a dedicated GPU", "qwen2.5-3b-nf4+0.5b")):  # fmt: skip
        preset = PRESETS[name]
        target, draft = checkpoint_bytes(preset.target) / 1e6, checkpoint_bytes(preset.draft) / 1e6
        nf4 = preset.target_options.quantization == "4bit"  # ≈ 4.5 bits a weight once loaded
        memory = target * (4.5 / 16 if nf4 else 1) + draft
        download = target + draft
        rows.append(
            {"space": kind, "preset": name, "download_mb": round(download),
             "download_s_at_bandwidth": round(download / bandwidth), "weights_mb": round(memory)}
        )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bandwidth", type=float, default=100.0, help="MB/s from the hub to a Space (stated)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="space-start-")
    # a Space's environment, before huggingface_hub reads it: the hub on, an empty hub cache and model folder
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "SPECDEMO_SMOLLM2"):
        os.environ.pop(name, None)
    os.environ |= {"HF_HOME": f"{work}/hf", "SPECDEMO_CACHE_DIR": f"{work}/specdemo", "SYSTEM": "spaces"}

    from specdemo.measure.machine import machine
    from specdemo.models import smollm2

    wheel = smollm2.wheel_gguf()
    if wheel is None:
        raise SystemExit(f"the local hub serves the wheel's GGUF: {smollm2.INSTALL_HINT}")
    record = {
        "measured": machine(),
        "bandwidth_mb_s": args.bandwidth,
        "cpu_basic": cpu_space(args.bandwidth, wheel),
        "gpu": gpu_spaces(args.bandwidth),
    }
    print(json.dumps(record, indent=1))
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
