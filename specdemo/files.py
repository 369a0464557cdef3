"""Files and folders that several processes share (the per-machine cost cache, built kernels, shards, a converted
checkpoint): written whole."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def written_whole(path: Path) -> Iterator[Path]:
    """→ a path to write ``path``'s new content to (a file, or a folder), put in its place only once the block
    ends without error: a process cut off mid-write, or another writing the same path at once, never leaves half
    of it. A block that leaves nothing at the partial path (it found it had nothing to write) leaves ``path`` as
    it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")  # one per process: two writers never share it
    remove(partial)  # a stale one, left by a killed process of the same id
    try:
        yield partial
        if partial.is_dir():  # a folder cannot replace a folder: the old one goes first
            remove(path)
        if partial.exists():
            partial.replace(path)
    finally:
        remove(partial)  # left only by a failed write
