"""The start pair loads in the background as the app launches: the page is served at once, the Run
button's label follows the loading, and a Run pressed meanwhile waits on the same model thread (it
queues behind the loading and then finds the pair in the cache)."""

from __future__ import annotations

from concurrent.futures import Future

from specdemo.app import model_thread
from specdemo.app.settings import Settings, converting, friendly, pair_for, update
from specdemo.models import hub, smollm2

_loading: dict[str, object] = {}  # "settings", "future": the one warm-up of this process


def start(preset: str) -> Future:
    """Load ``preset``'s start pair (its measured method's) on the model thread, now."""
    s = Settings.from_preset(preset)
    _loading.update(settings=s, future=model_thread.submit(pair_for, s))
    return _loading["future"]


def status() -> tuple[str, bool]:
    """(what the loading is doing, in a few words: "" once it is over; whether it is over). A failure is
    logged here and said in full by the first Run."""
    future = _loading.get("future")
    if future is None:
        return "", True
    if not future.done():
        if (fetched := hub.progress()) is not None:
            return f"downloading the model: {fetched:.0%}", False
        done = smollm2.conversion_progress() if converting(_loading["settings"]) else None
        return ("loading the models" if done is None else f"converting the model once: {done:.0%}"), False
    if future.exception() is not None:
        friendly(future.exception())  # the log's line
    return "", True


def run_label() -> tuple[dict, dict]:
    """The Run button's label while the start pair loads, and whether its timer goes on ticking."""
    doing, over = status()
    return update(value=f"Run ({doing})" if doing else "Run"), update(active=not over)
