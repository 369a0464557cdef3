"""How steady is the race's speedup? The same race N times in chromium (the page rendering on the same
cores) and N times without a browser, in one process, each race's per-step records kept.

    python -m tools.race_stability --runs 5 --tokens 96 [--gamma 1] [--out docs/results/race_stability.json]
    python -m tools.race_stability --runs 6 --updates 0.125/1,0.5/2   # the page's update rates, A/B in turns

Prints, for each way and each estimator, the speedups of the N runs, their spread (max / min) and
their mean against the no-browser mean: "sum" is what the race summed its step clocks to, "steady"
what ``measure.metrics.steady_speedup`` reads off the same steps. Needs chromium (Debian's) and the
default preset's models. ``--updates PANES/FIGURES,…``: the seconds between the race's pane updates and
figure updates; the browser's runs take the settings in turns (an interleaved A/B), reported apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

from specdemo.measure.machine import machine
from tools import page


def estimators(trace: dict) -> dict:
    from specdemo.decoding.steps import Step
    from specdemo.measure.metrics import steady_speedup, step_jitter, tokens_per_second

    base = [Step.from_dict(d) for d in trace["baseline"]]
    spec = [Step.from_dict(d) for d in trace["speculative"]]
    return {
        "sum": tokens_per_second(spec) / tokens_per_second(base),
        "steady": steady_speedup(base, spec),
        "jitter": step_jitter(base),
    }


def browser_runs(url: str, settings, runs: int, recorded: list, before_run=lambda i: None) -> list[dict]:
    """The same race ``runs`` times in chromium at 1366×768, set up through the page as a person would."""
    from tools.page import chromium, open_page, pick_method, run_race, set_number, set_prompt

    out = []
    with chromium() as browser, open_page(browser, url) as page:
        set_prompt(page, settings.prompt)
        pick_method(page, settings.method_label)
        time.sleep(1.0)  # the method's own γ is set on change: ours is typed after it
        set_number(page, "γ (draft tokens per step)", settings.gamma)
        set_number(page, "Max new tokens", settings.max_new_tokens)
        for i in range(runs):
            before_run(i)
            before = len(recorded)
            run_race(page, timeout=600_000)
            while len(recorded) == before:
                time.sleep(0.1)
            out.append(estimators(recorded[-1]))
    return out


def quiet_runs(settings, runs: int) -> list[dict]:
    from specdemo.app import race_tab
    from specdemo.app.race_tab import RACE_OUTPUTS

    out = []
    for _ in range(runs):
        final = dict(zip(RACE_OUTPUTS, list(race_tab.stream(settings))[-1]))
        out.append(estimators(final["trace"]))
    return out


def describe(rows: list[dict], reference: dict) -> dict:
    summary = {}
    for name in ("sum", "steady", "jitter"):
        values = [r[name] for r in rows if r[name]]
        if not values:  # too few steps for this estimator (a short race): said, not guessed
            summary[name] = {"runs": [], "spread": None, "mean": None, "vs_no_browser": None}
            continue
        mean = statistics.mean(values)
        summary[name] = {
            "runs": [round(v, 3) for v in values],
            "spread": round(max(values) / min(values), 3),
            "mean": round(mean, 3),
            "vs_no_browser": round(mean / reference[name], 3) if reference.get(name) else 1.0,
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--gamma", type=int, default=1)
    parser.add_argument("--out", default=None)
    parser.add_argument("--updates", default="", help="PANES/FIGURES seconds, comma-separated: A/B in turns")
    args = parser.parse_args()
    rates = [tuple(float(x) for x in r.split("/")) for r in args.updates.split(",") if r]

    import app
    from specdemo.app import race_tab
    from specdemo.app.settings import Settings
    from specdemo.decoding import methods

    settings = replace(
        Settings.from_preset(app.PRESET),
        prompt=page.SEED_PROMPT,
        method_label=methods.DRAFT.label,
        gamma=args.gamma,
        max_new_tokens=args.tokens,
    )
    recorded: list[dict] = []
    original = race_tab.stream

    def recording(*a, **k):  # the browser's races: keep each one's trace (its last output)
        last = None
        for last in original(*a, **k):
            yield last
        trace = dict(zip(race_tab.RACE_OUTPUTS, last))["trace"] if last else None
        if isinstance(trace, dict):
            recorded.append(trace)

    race_tab.stream = recording
    _, url, _ = app.launch(prevent_thread_lock=True, quiet=True)
    quiet_runs(settings, 1)  # warm-up: loads the pair
    rows = {"no browser": quiet_runs(settings, args.runs)}
    if rates:

        def set_rate(i: int) -> None:
            race_tab.PANES_EVERY_S, race_tab.PLOTS_EVERY_S = rates[i % len(rates)]

        runs = browser_runs(url, settings, args.runs * len(rates), recorded, set_rate)
        for k, (panes, plots) in enumerate(rates):
            rows[f"browser, updates every {panes}/{plots} s"] = runs[k :: len(rates)]
    else:
        rows["browser"] = browser_runs(url, settings, args.runs, recorded)
    app.demo.close()
    reference = describe(rows["no browser"], {})
    result = {way: describe(r, {k: v["mean"] for k, v in reference.items()}) for way, r in rows.items()}
    result["setting"] = {"preset": app.PRESET, "method": methods.DRAFT.name, "gamma": args.gamma, "tokens": args.tokens}
    result["setting"]["measured"] = machine()
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
