"""Steps compiled ahead of time (``torch.export`` + AOTInductor): what a ZeroGPU Space runs.

A ZeroGPU Space cannot compile while it serves (each GPU call is a fresh worker, nothing survives it),
so the steps are compiled once at start-up, inside one GPU call, and every later call loads them
(the HF blog "Make your ZeroGPU Spaces go brrr with ahead-of-time compilation"; ``spaces.aoti_*``
is the same export + AOTInductor). One package per model serves all its short steps:

- the step is ``StepModule``: the model over a static cache whose tensors (keys, values) and write
  position are *inputs*, so one package serves every cache, and the cache stays the caller's;
- the number of fed tokens (1…MAX_CAPTURED: a draft token, a verify of γ+1) and the cache's length
  are dynamic dimensions: no package per γ or per prompt length;
- the package holds no weights: it is bound to the model's own parameters (user-managed constants),
  so nothing is copied and its bytes are small enough to pickle into a worker. ``spaces.aoti_apply``
  is not used for that reason: it moves the weights into the package, and the prompt's prefill,
  the tree and the feature drafter still run the model itself.

Chains only: the tree's verify passes an attention mask and the feature drafter reads hidden states,
which this one signature has not (``steps.validate_config`` refuses them in one line).
"""

from __future__ import annotations

import io
import logging
import os
import time
import weakref

import torch
from torch import nn
from transformers import StaticCache

from specdemo.decoding.shapes import CACHE_ARG, MAX_CAPTURED, STATIC_ROUNDING

log = logging.getLogger(__name__)

LONGEST_CACHE = 32768  # positions: the dynamic cache length's upper bound
# the weights stay out of the package: it is bound to the model's own tensors when loaded
INDUCTOR = {"aot_inductor.package_constants_in_so": False}

_packages: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model → its package's bytes
_loaded: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model → (pid, the loaded runner)


class StepModule(nn.Module):
    """One forward of ``model`` over a static cache given as tensors: logits of every fed position.

    ``position``: how many positions the cache holds (a rollback is only a smaller number: what lies
    beyond is masked); each layer counts from a copy of it, so the caller's stays as it was."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, position, keys: list[torch.Tensor], values: list[torch.Tensor]):
        cache = StaticCache(config=self.model.config, max_cache_len=keys[0].shape[2])
        for layer, k, v in zip(cache.layers, keys, values, strict=True):
            layer.keys, layer.values, layer.cumulative_length = k, v, position.clone()
            layer.device, layer.batch_size, layer.num_heads = k.device, k.shape[0], k.shape[1]
            layer.k_head_dim, layer.v_head_dim, layer.is_initialized = k.shape[-1], v.shape[-1], True
        return self.model(input_ids=input_ids, use_cache=True, **{CACHE_ARG: cache}).logits


def empty_cache(model, length: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Keys and values of a zeroed static cache for ``model``: the example inputs of an export."""
    cache = StaticCache(config=model.config, max_cache_len=length)
    one = torch.zeros((1, 1), dtype=torch.long, device=model.device)
    with torch.inference_mode():
        model(input_ids=one, use_cache=True, **{CACHE_ARG: cache})  # makes each layer's tensors
    return [layer.keys.clone() for layer in cache.layers], [layer.values.clone() for layer in cache.layers]


def package_here(program, inductor_configs: dict) -> bytes:
    """AOTInductor's package of an exported program, as bytes."""
    package = io.BytesIO()
    torch._inductor.aoti_compile_and_package(program, package_path=package, inductor_configs=inductor_configs)
    return package.getvalue()


def build(model, package=package_here) -> bytes:
    """Export ``model``'s step and compile it with AOTInductor (``package``: how, e.g. through ZeroGPU's own
    ``spaces.aoti_compile``): the package's bytes (tens of seconds)."""
    started = time.perf_counter()
    keys, values = empty_cache(model, 2 * STATIC_ROUNDING)
    ids = torch.zeros((1, 2), dtype=torch.long, device=model.device)
    fed = torch.export.Dim("fed", min=1, max=MAX_CAPTURED)
    length = torch.export.Dim("length", min=STATIC_ROUNDING, max=LONGEST_CACHE)
    per_layer = [{2: length}] * len(keys)
    program = torch.export.export(
        StepModule(model).eval(),
        (ids, torch.tensor(0, device=model.device), keys, values),
        dynamic_shapes=({1: fed}, None, per_layer, per_layer),
        strict=False,
    )
    built = package(program, INDUCTOR)
    log.info("compiled %s's steps ahead of time in %.1f s", type(model).__name__, time.perf_counter() - started)
    return built


def install(model, package: bytes) -> None:
    """Give ``model`` its package (built here or, on ZeroGPU, in the start-up GPU call)."""
    _packages[model] = package
    _loaded.pop(model, None)


def has_package(model) -> bool:
    return model in _packages


def ensure(model) -> None:
    """Build ``model``'s package where it has none (once per process)."""
    if model not in _packages:
        install(model, build(model))


def runner(model):
    """The loaded package, bound to ``model``'s own parameters; loaded once per process (a forked
    ZeroGPU worker loads its own: what the parent loaded is not its to run)."""
    pid, loaded = _loaded.get(model, (None, None))
    if pid != os.getpid():
        loaded = torch._inductor.aoti_load_package(io.BytesIO(_packages[model]))
        step = StepModule(model)
        # every name, tied ones too (a tied head is the embedding's tensor under a second name)
        state = dict(step.named_parameters(remove_duplicate=False)) | dict(step.named_buffers(remove_duplicate=False))
        constants = {name: state[name] for name in loaded.get_constant_fqns()}
        loaded.load_constants(constants, check_full_update=True, user_managed=True)
        _loaded[model] = (os.getpid(), loaded)
    return loaded


def run(model, new_ids: torch.Tensor, position: int, cache) -> torch.Tensor:
    """Logits [1, fed, V] of ``new_ids`` fed after ``position`` cached positions of ``cache`` (written in place)."""
    keys = [layer.keys for layer in cache.layers]
    values = [layer.values for layer in cache.layers]
    return runner(model)(new_ids, torch.tensor(position, device=new_ids.device), keys, values)
