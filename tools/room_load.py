"""A workshop room on one Space: N attendees, each in a session of their own, press Run on the examples
within a few seconds, with the page's default settings; what each one sees.

    python -m tools.room_load --attendees 10,20,30 [--spread 10] [--out docs/results/room_load.json]
    python -m tools.room_load --attendees 30 --scenes colours,rewrite,… --ways on [--out …]

``--scenes``: each room races one of the Lesson's scenes, with the settings its button sets (measure/lesson.py).

Two servers, one with ``SPECDEMO_RECORDINGS=off`` (every Run races live) and one as the app starts (a room's
repeats shown from their recordings), the rooms taking turns between them (an interleaved A/B).

The app runs as ``python app.py`` does (its default preset, its queue), on 127.0.0.1; each attendee is a
``gradio_client`` session streaming the live race (``/race``), as the page does. Per attendee: seconds from
the click to the first token on screen, to the complete result, whether the queue refused the race, and
whether the speculative side's text is the baseline's (greedy: it must be). Bounded: each room's calls end
or are abandoned after ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_app(port: int, recordings: str) -> subprocess.Popen:
    env = os.environ | {"GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    env["SPECDEMO_RECORDINGS"] = recordings
    server = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
            return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("the app did not start")


def attendee(url: str, settings: dict, delay: float, timeout: float, row: dict, client=None) -> None:
    """One attendee: waits ``delay``, clicks Run, watches the stream; fills ``row``. ``client``: the attendee's
    session, for a second click (else a session of its own)."""
    from gradio_client import Client

    from specdemo.app.race_tab import RACE_OUTPUTS
    from specdemo.decoding import methods

    shown = [n for n in RACE_OUTPUTS if n not in ("settings_box", "trace")]  # what the API returns
    time.sleep(delay)
    client = client or Client(url, verbose=False)
    start = time.perf_counter()
    try:
        job = client.submit(**settings, api_name="/race")
        last = None
        for out in job:
            last = dict(zip(shown, out))
            if "first_token_s" not in row and 'class="tok' in str(last.get("speculative_pane", "")):
                row["first_token_s"] = round(time.perf_counter() - start, 2)
            if time.perf_counter() - start > timeout:
                job.cancel()
                row["abandoned"] = True
                return
        row["result_s"] = round(time.perf_counter() - start, 2)
        # greedy: the summary says "identical to …" when the speculative side wrote the baseline's tokens
        if methods.get(methods.from_label(settings["method_label"])).lossless:  # (the hand-off differs: its lesson)
            row["identical"] = "identical to" in str(last.get("summary", "")) if last else False
        row["recorded"] = "recorded at" in str(last.get("status", "")) if last else False
    except Exception as error:  # the queue's refusal, said by the client
        row["refused"] = "Queue is full" in str(error)
        row["error"] = str(error).splitlines()[0][:120]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 1)


def room(url: str, n: int, spread: float, timeout: float, examples: list[str], base: dict, again=False) -> list:
    """``n`` attendees clicking within ``spread`` seconds, attendee i on ``examples[i % len(examples)]``; with
    ``again`` each presses Run a second time once its first result is in (the Lesson's question asked twice)
    → the room's summary, and the second clicks' after it."""
    rows = [{"attendee": i, "prompt": examples[i % len(examples)]} for i in range(n)]

    def click(i: int, row: dict) -> None:
        from gradio_client import Client

        session = Client(url, verbose=False)  # one browser tab: both clicks in the same session
        attendee(url, base | {"prompt": row["prompt"]}, i * spread / n, timeout, row, session)
        if again:
            row["again"] = {"attendee": i, "prompt": row["prompt"]}
            attendee(url, base | {"prompt": row["prompt"]}, 0.0, timeout, row["again"], session)

    threads = [threading.Thread(target=click, args=(i, r)) for i, r in enumerate(rows)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [summary(rows)] + ([summary([r["again"] for r in rows]) | {"again": True}] if again else [])


def summary(rows: list[dict]) -> dict:
    first = [r["first_token_s"] for r in rows if "first_token_s" in r]
    done = [r["result_s"] for r in rows if "result_s" in r]
    return {
        "attendees": len(rows),
        "first_token_p50_s": percentile(first, 0.5),
        "first_token_p95_s": percentile(first, 0.95),
        "result_p50_s": percentile(done, 0.5),
        "result_p95_s": percentile(done, 0.95),
        "result_max_s": max(done) if done else None,
        "refused": sum(bool(r.get("refused")) for r in rows),
        "failed": sum("error" in r and not r.get("refused") for r in rows),
        "abandoned": sum(bool(r.get("abandoned")) for r in rows),
        "wrong": sum(r.get("identical") is False for r in rows),
        "recorded": sum(bool(r.get("recorded")) for r in rows),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attendees", default="10,20,30")
    parser.add_argument("--spread", type=float, default=10.0, help="seconds over which the room clicks Run")
    parser.add_argument(
        "--prompts",
        type=int,
        default=1,
        help="the room's prompts: the first N examples (1: the "
        "page's own, the seed prompt: a room following the facilitator's first scene)",
    )
    parser.add_argument(
        "--scenes",
        default="",
        help="the Lesson's scenes by key (colours,rewrite,…): each room "
        "races a scene's settings instead of the page's defaults",
    )
    parser.add_argument("--ways", default="off,on", help="recordings off, on, or both (in turns)")
    parser.add_argument("--timeout", type=float, default=600.0, help="an attendee gives up after this")
    parser.add_argument("--port", type=int, default=7871)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from specdemo import env
    from specdemo.app.settings import Settings
    from specdemo.decoding import methods
    from specdemo.measure import lesson
    from specdemo.measure.machine import machine
    from specdemo.models import PRESETS, startup_preset

    preset = startup_preset()
    base = asdict(Settings.from_preset(preset))  # the page's defaults: its measured start
    examples = list(PRESETS[preset].examples)[: args.prompts]
    rooms_of = {"": (base, examples)}  # scene → (settings, prompts): a scene sets its own, as its button does
    if args.scenes:
        table = lesson.stored()
        rooms_of = {}
        for key in args.scenes.split(","):
            race = lesson.race_settings(lesson.scene(key), table)
            scene = {"method_label": methods.get(race["method"]).label, "gamma": race["gamma"]}
            scene |= {"max_new_tokens": race["max_new_tokens"]}
            rooms_of[key] = (asdict(Settings.from_preset(lesson.PRESET)) | scene, [race["prompt"]])
    ways = tuple(args.ways.split(","))
    servers = {way: start_app(args.port + i, way) for i, way in enumerate(ways)}
    urls = {way: f"http://127.0.0.1:{args.port + i}/" for i, way in enumerate(ways)}
    try:
        for url in urls.values():  # the pair loaded before the room
            attendee(url, base | {"max_new_tokens": 4}, 0.0, args.timeout, {})
        rooms = []
        for key, (settings, prompts) in rooms_of.items():
            for n in args.attendees.split(","):
                for way in ways:  # in turns: the machine's drift lands on both alike
                    again = lesson.scene(key).asked_twice if key else False
                    for measured in room(urls[way], int(n), args.spread, args.timeout, prompts, settings, again):
                        rooms.append({"recordings": way} | ({"scene": key} if key else {}) | measured)
    finally:
        for server in servers.values():
            server.terminate()
            server.wait(timeout=30)
    record = {
        "measured": machine(),
        "preset": preset,
        "method": base["method_label"],
        "gamma": base["gamma"],
        "max_new_tokens": base["max_new_tokens"],
        "spread_s": args.spread,
        "concurrency": env.get("SPECDEMO_CONCURRENCY"),
        "examples": len(examples),
        "max_queue": env.get("SPECDEMO_MAX_QUEUE"),
        "rooms": rooms,
    }
    for r in rooms:
        print({k: v for k, v in r.items() if k != "rows"})
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
