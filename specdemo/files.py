"""Files that several processes share (the per-machine cost cache, built kernels, shards): written whole."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def written_whole(path: Path) -> Iterator[Path]:
    """→ a path to write ``path``'s new content to, put in its place only once the block ends without error:
    a process cut off mid-write, or another writing the same file at once, never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")  # one per process: two writers never share it
    try:
        yield partial
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)  # left only by a failed write
