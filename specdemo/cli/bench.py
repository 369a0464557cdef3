"""``bench``: engines × γ on a preset's prompts, ``--tasks`` (methods × tasks) and ``--defaults`` (the race's start)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from specdemo.cli.common import (
    add_pair_args,
    bench_prompts,
    encode,
    load_from_args,
)
from specdemo.decoding import methods
from specdemo.decoding.engine import DecodeConfig, validate_config
from specdemo.decoding.steps import method_gammas, whole_numbers
from specdemo.errors import InputError
from specdemo.measure.bench import all_engines, default_engines
from specdemo.measure.defaults import candidates
from specdemo.models import (
    PRESETS,
    load_pair,
)
from specdemo.models.presets import DEFAULTS_DIR


def add_parsers(sub) -> None:
    bench = sub.add_parser("bench", help="specdemo vs transformers on the same pair and prompts")
    add_pair_args(bench)
    bench.add_argument(
        "--prompts",
        default=None,
        help="a text file, one prompt per line (default: the preset's held-out prompts in assets/prompts/)",
    )
    bench.add_argument("--gammas", default="1,2,3,4,6,8")
    bench.add_argument(
        "--engines",
        default=",".join(default_engines()),
        help=f"comma-separated, from {', '.join(all_engines())} (specdemo-baseline always runs; vllm-* need servers)",
    )
    bench.add_argument("--max-new-tokens", type=int, default=64)
    bench.add_argument(
        "--repeats", type=int, default=3, help="interleaved passes over the prompts, the median kept (not --defaults)"
    )
    bench.add_argument("--json", action="store_true")
    bench.add_argument("--csv", default=None)
    bench.add_argument("--plot", default=None, help="write the speedup-vs-γ figure as HTML")
    bench.add_argument(
        "--vllm-baseline-url", default=None, help="vllm-baseline's server (default $SPECDEMO_VLLM_BASELINE_URL)"
    )
    bench.add_argument(
        "--vllm-speculative-url",
        default=None,
        help="vllm-speculative's server (default $SPECDEMO_VLLM_SPECULATIVE_URL)",
    )
    bench.add_argument("--tasks", action="store_true", help="methods × tasks on assets/prompts/tasks/ instead")
    bench.add_argument(
        "--methods",
        default=f"{methods.DRAFT.name},{methods.PROMPT_LOOKUP.name}",
        help=f"--tasks: some of {', '.join(task_method_names())}, each optionally with its γ (suffix=6)",
    )
    bench.add_argument("--task-names", default=None, help="--tasks: a comma-separated subset of the task files")
    bench.add_argument(
        "--split",
        choices=["all", "tune", "held-out"],
        default="all",
        help="--tasks: each task's prompts, or one half of them (tune: the 1st, 3rd, …; held-out: the others)",
    )
    bench.add_argument(
        "--out",
        default=None,
        help="also write the result as JSON here (the sweep, --tasks); --defaults: store them here instead",
    )
    bench.add_argument(
        "--defaults",
        action="store_true",
        help="race --candidates on the preset's example prompts; store the fastest as the app's start",
    )
    bench.add_argument("--candidates", default=candidates(), help="--defaults: methods at a γ each")


# Draft-model variants the methods × tasks table races beside the registry's methods: each runs a
# registered method (its value) with another draft model (``drafter_for`` loads it).
DRAFT_VARIANTS = {"self-int8": methods.DRAFT.name, "feature-hybrid": methods.HYBRID.name}
SELF_DRAFT_GAMMA = 2  # the target in int8 drafts for itself: right almost always, but it costs ≈ 0.7 of a step


def task_method_names() -> list[str]:
    """What ``bench --tasks --methods`` takes: the methods a race may start with, and the variants."""
    return [*methods.names(start=True), *DRAFT_VARIANTS]


def task_methods(text: str) -> dict[str, int | None]:
    """``--methods draft,suffix=6`` → {method: its γ, or None for the method's own}; each once."""
    chosen = method_gammas(text, "--methods", task_method_names())
    if len({name for name, _ in chosen}) < len(chosen):
        raise InputError(f"--methods names each method once, got {text!r}")
    return dict(chosen)


def drafter_for(method: str, pair, preset) -> tuple:
    """A ``--methods`` name → (draft model or None, the method's own γ, the engine's method)."""
    from specdemo.models import SMOLLM2_FEATURE

    runs = methods.get(DRAFT_VARIANTS.get(method, method))
    if method == "self-int8":  # no training: the same weights with int8 arithmetic propose, fp32 verifies
        own = replace(preset.target_options, quantization="int8-cpu")
        return load_pair(pair.target_id, pair.target_id, preset.target_options, own).draft, SELF_DRAFT_GAMMA, runs.name
    if runs.drafts != "feature" and method != "feature-hybrid":
        return (pair.draft if runs.draft_model else None), runs.gamma or preset.gamma, runs.name
    # the feature drafter, alone or where suffix decoding has nothing to propose
    feature = load_pair(pair.target_id, SMOLLM2_FEATURE, preset.target_options, preset.draft_options)
    gamma = runs.gamma or PRESETS.get("smollm2-135m-feature", preset).gamma
    return feature.draft, gamma, runs.name


def cmd_tasks(args) -> None:
    from specdemo.measure.machine import machine
    from specdemo.measure.tasks import encode_tasks, format_tasks, load_tasks, run_tasks

    chosen = task_methods(args.methods)
    methods = list(chosen)
    names = [t.strip() for t in args.task_names.split(",")] if args.task_names else None
    tasks = load_tasks(names=names, split=args.split)
    if not tasks:
        raise InputError(f"no task files match --task-names {args.task_names!r}")
    pair = load_from_args(args)
    preset = PRESETS[args.preset]
    drafters = {m: drafter_for(m, pair, preset) for m in methods}
    for m, gamma in chosen.items():  # a γ given with the method wins over its own
        if gamma is not None:
            drafters[m] = (drafters[m][0], gamma, drafters[m][2])
    ids = encode_tasks(pair.tokenizer, tasks, not args.no_chat_template)
    result = run_tasks(pair.target, drafters, ids, args.max_new_tokens, pair.eos, not args.json, args.repeats)
    result |= {
        "repeats": args.repeats,
        "preset": args.preset,
        "gammas": {m: g for m, (_, g, _) in drafters.items()},
        "split": args.split,
    }
    result |= {"machine": machine()}  # where and when
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result) if args.json else format_tasks(result))


def defaults_candidates(text: str) -> list[tuple[str, int]]:
    """``draft=1,draft=2,hybrid=4`` → [(method, γ)]: a method may come at several γ, each once."""
    chosen = method_gammas(text, "--candidates", methods.names(start=True))
    if any(gamma is None for _, gamma in chosen) or len(set(chosen)) < len(chosen):
        raise InputError(f"--candidates gives each method a γ (e.g. draft=1,hybrid=4), none twice, got {text!r}")
    return chosen


def cmd_defaults(args) -> None:
    from specdemo.measure.defaults import choose_defaults, format_defaults, store_defaults
    from specdemo.measure.machine import machine

    candidates = defaults_candidates(args.candidates)
    validate_config(DecodeConfig(max_new_tokens=args.max_new_tokens))
    preset = PRESETS[args.preset]
    pair = load_from_args(args)
    drafters = {}
    for method, gamma in candidates:
        model, _, engine_method = drafter_for(method, pair, preset)
        drafters[(method, gamma)] = (model, gamma, engine_method)
    prompts = [encode(pair, args, p) for p in preset.examples]
    chosen = choose_defaults(pair.target, drafters, prompts, args.max_new_tokens, pair.eos, progress=not args.json)
    chosen["kernels"] = getattr(pair.target, "specdemo_kernels", "torch's products")
    path = Path(args.out) if args.out else DEFAULTS_DIR / f"{args.preset}.json"
    store_defaults(path, args.preset, chosen, machine())
    print(json.dumps(chosen) if args.json else f"{format_defaults(chosen)}\nstored in {path}")


def cmd_bench(args) -> None:
    if args.repeats < 1:
        raise InputError("--repeats must be ≥ 1")
    if args.tasks:
        return cmd_tasks(args)
    if args.defaults:
        return cmd_defaults(args)
    from specdemo.measure.bench import format_table, run_bench, to_json, write_csv
    from specdemo.models import vllm
    from specdemo.view.plots import gamma_sweep_figure

    gammas = whole_numbers(args.gammas, "--gammas")
    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    if unknown := set(engines) - set(all_engines()):
        raise InputError(f"unknown engine(s) {', '.join(sorted(unknown))}: choose from {', '.join(all_engines())}")
    validate_config(DecodeConfig(max_new_tokens=args.max_new_tokens))
    texts = bench_prompts(args.prompts or PRESETS[args.preset].prompts_file)
    pair = load_from_args(args)
    prompts = [encode(pair, args, p) for p in texts]
    urls = vllm.configured_urls(args.vllm_baseline_url, args.vllm_speculative_url)
    urls = {f"vllm-{role}": url for role, url in urls.items()}
    result = run_bench(
        pair, prompts, gammas, args.max_new_tokens, args.repeats, not args.json, engines, urls, steps=args.steps
    )
    if args.out:  # a results file (docs/results/), with where and when it was measured
        from specdemo.measure.machine import machine

        record = result | {"preset": args.preset, "measured": time.strftime("%Y-%m-%d"), "machine": machine()}
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    if args.csv:
        write_csv(result, args.csv)
    if args.plot:
        gamma_sweep_figure(result["rows"]).write_html(args.plot, include_plotlyjs=True)  # self-contained: works offline
    print(to_json(result) if args.json else format_table(result))
