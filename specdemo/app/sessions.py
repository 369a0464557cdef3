"""Per browser session: the exported trace and the Stop flag, files removed when the session ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from specdemo.app.settings import (
    KEEP,
)
from specdemo.view import trace as traces

# Per browser session: the exported trace and the stop flag, removed when the session ends.
SESSIONS_DIR = os.path.join(tempfile.gettempdir(), "specdemo-sessions")


def session_file(session: str | None, name: str) -> str:
    folder = "".join(c for c in (session or "local") if c.isalnum())[:64] or "local"
    os.makedirs(os.path.join(SESSIONS_DIR, folder), exist_ok=True)
    return os.path.join(SESSIONS_DIR, folder, name)


def export_trace(trace: dict | None, session: str | None) -> str | dict:
    """The last run as a JSON file, one per browser session (overwritten, removed when it leaves)."""
    if not trace:
        return KEEP
    path = session_file(session, "specdemo-trace.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(traces.dumps(trace))
    return path


def request_stop(session: str | None) -> str:
    """The Stop button. The flag is a file, so it reaches the race wherever it runs (on ZeroGPU,
    in a forked GPU worker); the race sees it within one update and ends showing what it has."""
    open(session_file(session, "stop"), "w").close()
    return "■ stopping…"


def stop_requested(session: str | None) -> bool:
    return os.path.exists(session_file(session, "stop"))


def clear_stop(session: str | None) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(session_file(session, "stop"))


def forget_session(session: str | None) -> None:
    """A browser session ended: remove what it left on disk."""
    shutil.rmtree(os.path.dirname(session_file(session, "stop")), ignore_errors=True)
