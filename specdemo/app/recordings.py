"""Races already run, shown again at once: what makes a room of attendees on one Space wait less.

Thirty attendees pressing Run on the same examples queue one live race each (``tools/room_load.py``
measured it on a 2-core CPU basic Space). Greedy speculative decoding writes the target's own greedy tokens,
whatever drafts them: the same settings on the same pair write exactly the same tokens. So the first finished
greedy race of each settings is kept (in the process that lives on, also on ZeroGPU), and another session's
Run with exactly those settings shows it at once, labelled as recorded (when, on which machine, at its
recorded speed), with no model run; that session's next Run of the same settings races live ("race it live"
is one click away).

Its drafts and clocks are the recording's: suffix decoding's store may have learnt more since, so a live race
of it can draft more and run faster (the status line says its drafts and speed are as then). Not
recorded, as a live race could write other tokens: sampling (temperature above 0), the vLLM servers and the
naive hand-off (not this engine's race).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import asdict

from specdemo import env
from specdemo.app.race_tab import RACE_OUTPUTS, render
from specdemo.app.settings import Settings, update
from specdemo.decoding import methods
from specdemo.measure.machine import machine
from specdemo.view import trace as traces

MAX_KEPT = 256  # distinct settings kept (the least recently shown go first)
_lock = threading.Lock()
_kept: OrderedDict[str, dict] = OrderedDict()  # settings → {"trace", "when", "where", "status"}
_shown: dict[str, set] = {}  # settings → the sessions shown its recording (their next Run is live)


def key(s: Settings) -> str | None:
    """The settings a recording stands for, or None where a live race of them could write other tokens."""
    method = methods.REGISTRY.get(methods.from_label(s.method_label))
    if method is None or not method.on_engine or float(s.temperature or 0) > 0:
        return None
    return json.dumps(asdict(s), sort_keys=True, default=str)


def take(s: Settings, session: str | None) -> dict | None:
    """The recording this session is shown for these settings (once: its next Run races live), or None."""
    k = key(s)
    if env.get("SPECDEMO_RECORDINGS") == "off":
        return None
    with _lock:
        if k is None or k not in _kept or session in _shown.setdefault(k, set()):
            return None
        _shown[k].add(session)
        _kept.move_to_end(k)
        return _kept[k]


def keep(s: Settings, last: tuple | None, session: str | None) -> None:
    """After a live race: keep it if it finished (✓) and its settings can be recorded."""
    out = dict(zip(RACE_OUTPUTS, last or ()))
    k, trace = key(s), out.get("trace")
    if k is None or not isinstance(trace, dict) or not str(out.get("status", "")).startswith("✓ done"):
        return
    when = time.strftime("%H:%M:%S")
    with _lock:
        if k not in _kept:
            _kept[k] = {
                "trace": trace,
                "when": when,
                "where": machine().split(", measured")[0],
                "status": out["status"],
            }
            _shown[k] = {session}  # who raced it live has seen it
        while len(_kept) > MAX_KEPT:
            gone, _ = _kept.popitem(last=False)
            _shown.pop(gone, None)


def show(recording: dict) -> tuple:
    """The recording as the race's outputs, at once (no model runs), its status saying what it is."""
    state, decode, settings = traces.from_trace(recording["trace"])
    status = (
        f"✓ recorded at {recording['when']} on this server ({recording['where']}): the tokens a live race writes "
        f"(greedy), its drafts and speed as then · Run again to race it live · "
        f"{recording['status'].removeprefix('✓ done: ')}"
    )
    return render(state, decode, settings.get("prompt", ""), "all", status, recording["trace"], update(open=False))


def race_or_replay(s: Settings, session: str | None, race: Callable[[], Iterator[tuple]]) -> Iterator[tuple]:
    """A recording of these settings if this session has not seen it, else the live ``race`` (kept if it can be)."""
    if (recording := take(s, session)) is not None:
        yield show(recording)
        return
    last = None
    for last in race():
        yield last
    keep(s, last, session)


def forget() -> None:
    """Drop every recording (a test, or a server whose models changed)."""
    with _lock:
        _kept.clear()
        _shown.clear()
