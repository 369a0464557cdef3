"""Races already run, shown again at once: what makes a room of attendees on one Space wait less.

Thirty attendees pressing Run on the same examples queue one live race each (``tools/room_load.py``
measured it on a 2-core CPU basic Space). Greedy speculative decoding writes the target's own greedy tokens,
whatever drafts them: the same settings on the same pair write exactly the same tokens. So the first finished
greedy race of each settings is kept (in the process that lives on, also on ZeroGPU), and another session's
Run with exactly those settings shows it at once, labelled as recorded (when, on which machine, at its
recorded speed), with no model run; that session's next Run of the same settings races live ("race it live"
is one click away).

Its drafts and clocks are the recording's. A method that drafts from suffix decoding's store keeps two: the
first race of the settings on this server, and the second (its answer then drafted from the first's), so
a session's first Run is shown the one and its second Run the other, as a room does the Lesson's "asked
twice" scene (thirty second clicks raced live queued 30.6 s at p95); its third Run races live. The naive
hand-off is recorded too (greedy, both its halves write the same tokens each time: thirty live ones queued
54 s at p95, docs/workshop.md). Not recorded, as a live race could write other tokens: sampling (temperature
above 0) and the vLLM servers (another process's engine and its batching).
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
# settings → its recordings in the order they were raced: [{"trace", "when", "where", "status"}, …]
_kept: OrderedDict[str, list[dict]] = OrderedDict()
_runs: dict[str, dict] = {}  # settings → {session: its Runs of them so far, shown or raced}


def key(s: Settings) -> str | None:
    """The settings a recording stands for, or None where a live race of them could write other tokens."""
    method = methods.REGISTRY.get(s.method)
    if method is None or not (method.on_engine or method.hand_off) or float(s.temperature or 0) > 0:
        return None
    return json.dumps(asdict(s), sort_keys=True, default=str)


def kept_at_most(s: Settings) -> int:
    """How many recordings its settings keep: the first race, and with suffix decoding's store the second too
    (asked again, it drafts the first answer: other drafts, the same tokens)."""
    return 2 if methods.get(s.method).suffix_store else 1


def take(s: Settings, session: str | None) -> tuple[dict | None, int]:
    """(the recording this session's next Run of these settings is shown, or None: race it live; that Run's
    place among the settings' recordings)."""
    k = key(s)
    if k is None or env.get("SPECDEMO_RECORDINGS") == "off":
        return None, -1
    with _lock:
        runs = _runs.setdefault(k, {})
        n = runs.get(session, 0)
        runs[session] = n + 1
        kept = _kept.get(k, [])
        if n < len(kept):
            _kept.move_to_end(k)
            return kept[n] | {"index": n, "of": kept_at_most(s)}, n
        return None, len(kept)  # live: were it kept, it would be the next


def keep(s: Settings, last: tuple | None, place: int) -> None:
    """After a live race: keep it if it finished (✓), its settings can be recorded and it is the next they keep
    (``place``: how many they had kept when it started; another race may have been kept meanwhile)."""
    out = dict(zip(RACE_OUTPUTS, last or ()))
    k, trace = key(s), out.get("trace")
    if k is None or not isinstance(trace, dict) or not str(out.get("status", "")).startswith("✓ done"):
        return
    recording = {"trace": trace, "when": time.strftime("%H:%M:%S"), "where": machine().split(", measured")[0]}
    with _lock:
        kept = _kept.setdefault(k, [])
        if place == len(kept) < kept_at_most(s):
            kept.append(recording | {"status": out["status"]})
        while len(_kept) > MAX_KEPT:
            gone, _ = _kept.popitem(last=False)
            _runs.pop(gone, None)


def show(recording: dict) -> tuple:
    """The recording as the race's outputs, at once (no model runs), its status saying what it is."""
    state, decode, settings = traces.from_trace(recording["trace"])
    n, of = recording["index"], recording["of"]
    which = ("the first race of these settings here", "the second, drafted from the answers before it")[n]
    then = "Run again: asked again" if n + 1 < of else "Run again to race it live"
    status = (
        f"✓ recorded at {recording['when']} on this server ({recording['where']})"
        + (f", {which}" if of > 1 else "")
        + f": the tokens a live race writes (greedy), its drafts and speed as then · {then} · "
        f"{recording['status'].removeprefix('✓ done: ')}"
    )
    return render(state, decode, settings.get("prompt", ""), "all", status, recording["trace"], update(open=False))


def race_or_replay(s: Settings, session: str | None, race: Callable[[], Iterator[tuple]]) -> Iterator[tuple]:
    """This session's next recording of these settings if there is one, else the live ``race`` (kept if it can
    be)."""
    recording, place = take(s, session)
    if recording is not None:
        yield show(recording)
        return
    last = None
    for last in race():
        yield last
    keep(s, last, place)


def forget() -> None:
    """Drop every recording (a test, or a server whose models changed)."""
    with _lock:
        _kept.clear()
        _runs.clear()
