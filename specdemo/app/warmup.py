"""The start pair loads in the background as the app launches: the page is served at once, its
status line follows the loading, and a Run pressed meanwhile waits on the same model thread (it
queues behind the loading and then finds the pair in the cache)."""

from __future__ import annotations

from concurrent.futures import Future

from specdemo.app import model_thread
from specdemo.app.settings import Settings, friendly, loading_text, pair_for

_loading: dict[str, object] = {}  # "settings", "future": the one warm-up of this process


def start(preset: str) -> Future:
    """Load ``preset``'s start pair (its measured method's) on the model thread, now."""
    s = Settings.from_preset(preset)
    _loading.update(settings=s, future=model_thread.submit(pair_for, s))
    return _loading["future"]


def status() -> tuple[str, bool]:
    """(the line to show, whether the warm-up is over)."""
    future = _loading.get("future")
    if future is None:
        return "", True
    if not future.done():
        return f"⏳ {loading_text(_loading['settings'])}: Run now starts as soon as it is ready", False
    if future.exception() is not None:
        return f"⚠ the start pair did not load: {friendly(future.exception())}", True
    return "✓ ready", True
