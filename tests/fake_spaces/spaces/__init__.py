"""A stand-in for Hugging Face's ``spaces`` package that keeps ZeroGPU's contract without a GPU.

As on ZeroGPU (``spaces/zero/wrappers.py``), each ``@spaces.GPU`` call runs in a forked worker
process: the arguments go in by pickle, results (each yield of a generator) come back by pickle,
an exception comes back as itself, and nothing the worker changes survives the call. So a
handler that returns a live object, or keeps models it loaded inside the call, fails here as
it would on a Space. ``CALLS`` records (function name, the duration it asked for).
"""

from __future__ import annotations

import functools
import inspect
import multiprocessing
import pickle
import sys

IMPORTED_BEFORE = {name for name in ("torch", "transformers", "gradio") if name in sys.modules}
CALLS: list[tuple[str, int]] = []
_FORK = multiprocessing.get_context("fork")


def GPU(task=None, *, duration=None, size=None):  # noqa: N802 (the real package's name)
    if task is None:
        return functools.partial(GPU, duration=duration, size=size)
    if inspect.isgeneratorfunction(task):

        @functools.wraps(task)
        def generator_handler(*args, **kwargs):
            _record(task, duration, args, kwargs)
            yield from _in_worker(task, args, kwargs)

        return generator_handler

    @functools.wraps(task)
    def handler(*args, **kwargs):
        _record(task, duration, args, kwargs)
        (result,) = list(_in_worker(task, args, kwargs))
        return result

    return handler


def _record(task, duration, args, kwargs):
    seconds = duration(*args, **kwargs) if callable(duration) else duration
    CALLS.append((task.__name__, seconds))


def _in_worker(task, args, kwargs):
    receive, send = _FORK.Pipe(duplex=False)
    worker = _FORK.Process(target=_work, args=(task, pickle.dumps((args, kwargs)), send), daemon=True)
    worker.start()
    send.close()
    try:
        while True:
            kind, payload = receive.recv()
            if kind == "end":
                return
            value = pickle.loads(payload)
            if kind == "error":
                raise value
            yield value
    finally:
        worker.join(timeout=30)
        if worker.is_alive():
            worker.kill()


def _work(task, payload, send):
    args, kwargs = pickle.loads(payload)
    try:
        result = task(*args, **kwargs)
        for value in result if inspect.isgenerator(result) else [result]:
            send.send(("value", pickle.dumps(value)))
        send.send(("end", None))
    except BaseException as error:  # noqa: BLE001 (handed back, as spaces does)
        send.send(("error", pickle.dumps(error)))


# the real package's overrides (spaces/zero/torch/aoti.py, torch ≥ 2.10): the weights stay out of the libraries
AOTI_OVERRIDES = {
    "aot_inductor.package_constants_in_so": False,
    "aot_inductor.package": True,
    "always_keep_tensor_constants": True,
    "joint_graph_constant_folding": False,
    "aot_inductor.package_constants_on_disk_format": "pickle_weights",
}


def aoti_compile(exported_program, inductor_configs=None):
    """The real one's route (spaces/zero/torch/aoti.py): ``torch._inductor.aot_compile`` of the exported
    program's module at its example inputs with its overrides, the files packaged into ``archive_file``
    (a BytesIO). The real one also strips the libraries' executable-stack flag and keeps the weights in
    ``weights``; here they are left out."""
    import io
    import types

    import torch
    from torch._inductor.package.package import package_aoti

    args, kwargs = exported_program.example_inputs
    options = {**(inductor_configs or {}), **AOTI_OVERRIDES}
    artifacts = torch._inductor.aot_compile(exported_program.module(), args, kwargs, options=options)
    archive = io.BytesIO()
    package_aoti(archive, [f for f in artifacts if isinstance(f, str)])
    return types.SimpleNamespace(archive_file=archive)


def gradio_auto_wrap(task):
    """Gradio calls this on every event function of a Space (SPACE_ID set): as the real one, it wraps them in
    ``GPU`` only where SPACES_GRADIO_AUTO_WRAP asks (off by default), else returns them as they are."""
    import os

    if os.environ.get("SPACES_GRADIO_AUTO_WRAP", "").lower() not in ("1", "true", "yes") or not callable(task):
        return task
    return GPU(task)
