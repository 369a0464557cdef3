"""One long-lived thread for all model work in the app.

On a CPU, PyTorch parallelises a matrix product with OpenMP, and each thread that runs one gets
an OpenMP team of its own. Once two such teams are alive, GNU OpenMP sees more of its threads
than cores and stops letting idle workers spin between products, so every product waits for
its workers to wake up (a race ran about twice as long: docs/design.md). A web server runs handlers on many threads,
so the app sends every model call to this one thread instead (the CLI runs in its main thread
and needs none of this). The thread is made per process: a forked ZeroGPU worker gets its own.
"""

from __future__ import annotations

import contextvars
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

NAME = "specdemo-model"
_executor: ThreadPoolExecutor | None = None
_pid: int | None = None
_lock = threading.Lock()


def _thread_pool() -> ThreadPoolExecutor:
    global _executor, _pid
    with _lock:
        if _executor is None or _pid != os.getpid():  # after a fork the old thread is gone
            _executor, _pid = ThreadPoolExecutor(max_workers=1, thread_name_prefix=NAME), os.getpid()
        return _executor


def submit(fn, /, *args, **kwargs) -> Future:
    """Run ``fn`` on the model thread; the caller's context goes along (Gradio's progress bar
    finds its event through it)."""
    return _thread_pool().submit(contextvars.copy_context().run, fn, *args, **kwargs)


def call(fn, /, *args, **kwargs):
    """``fn(*args, **kwargs)`` on the model thread, waiting for it (re-entrant: from the model
    thread itself it just calls)."""
    if threading.current_thread().name.startswith(NAME):
        return fn(*args, **kwargs)
    return submit(fn, *args, **kwargs).result()
