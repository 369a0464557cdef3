"""Command line: ``python -m specdemo generate|sample|bench ...``.

Errors exit with code 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from specdemo.decoding import methods
from specdemo.decoding.engine import DecodeConfig, sample_many, validate_config
from specdemo.decoding.sampling import SamplingConfig
from specdemo.decoding.tree import TreeConfig
from specdemo.errors import InputError, SpecDemoError
from specdemo.measure.bench import all_engines, default_engines
from specdemo.measure.compare import compare, comparison_record
from specdemo.measure.defaults import CANDIDATES
from specdemo.measure.divergence import dtype_name
from specdemo.models import (
    DTYPES,
    PRESETS,
    QUANTIZATIONS,
    LoadOptions,
    check_prompt,
    configure_cpu_threads,
    default_preset_name,
    draft_options_for,
    encode_prompt,
    load_pair,
)
from specdemo.models.presets import DEFAULTS_DIR
from specdemo.view.render import token_spans, tokens_ansi


class OneLineErrorParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def add_pair_args(p):
    p.add_argument(
        "--preset",
        choices=list(PRESETS),
        default=default_preset_name(),
        help="model pair (on a CPU: smollm2-135m when it is installed, else bundled-tinystories)",
    )
    p.add_argument("--target", default=None, help="hub id or local folder, instead of the preset's target")
    p.add_argument("--draft", default=None, help="hub id or local folder, instead of the preset's draft")
    p.add_argument(
        "--draft-vocab",
        type=int,
        default=None,
        help="the draft scores only the target's N most frequent tokens (0 = all; default: the preset's)",
    )
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="weights' dtype (default: the preset's)")
    p.add_argument(
        "--quantization",
        choices=list(QUANTIZATIONS),
        default=None,
        help=(
            "the target's: 8bit/4bit (bitsandbytes, CUDA), int8-cpu (int8 weights, bf16 products), compact-fp32 "
            "(the same fp32 weights kept as the GGUF's blocks or 16 bits, CPU; the draft follows); default: preset's"
        ),
    )
    p.add_argument("--no-chat-template", action="store_true", help="feed the prompt as plain text")


def add_model_args(p):
    add_pair_args(p)
    p.add_argument("--prompt", required=True)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def add_sampling_args(p):
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="python -m specdemo", description="Speculative decoding, measured.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineErrorParser)

    gen = sub.add_parser("generate", help="baseline vs speculative on one prompt")
    add_model_args(gen)
    gen.add_argument("--method", choices=methods.names(runner="specdemo"), default=methods.DRAFT.name)
    gen.add_argument("--gamma", type=int, default=None, help="draft length (default: the preset's best γ)")
    gen.add_argument("--schedule", choices=["constant", "heuristic"], default="constant")
    gen.add_argument("--min-confidence", type=float, default=0.0, help="draft-confidence stop (0 = off)")
    gen.add_argument("--max-ngram", type=int, default=3, help="prompt lookup: longest n-gram matched")
    gen.add_argument("--max-new-tokens", type=int, default=64)
    gen.add_argument("--tree-k", type=int, default=2, help="tree: children per node")
    gen.add_argument("--tree-depth", type=int, default=4, help="tree: depth")
    gen.add_argument("--tree-nodes", type=int, default=12, help="tree: most nodes kept (N)")
    gen.add_argument("--tree-min-prob", type=float, default=0.0, help="tree: prune paths below this draft prob")
    add_sampling_args(gen)

    smp = sub.add_parser("sample", help="M independent speculative samples")
    add_model_args(smp)
    smp.add_argument("--gamma", type=int, default=None, help="draft length (default: the preset's best γ)")
    smp.add_argument("--max-new-tokens", type=int, required=True)
    smp.add_argument("--samples", type=int, required=True)
    add_sampling_args(smp)
    prec = sub.add_parser("precision", help="speed and greedy identity of a pair in several dtypes")
    add_pair_args(prec)
    prec.add_argument(
        "--dtypes",
        default="float32,bfloat16",
        help="comma-separated dtypes (torch's products), or int8-cpu / compact-fp32 (fp32 weights on those kernels)",
    )
    prec.add_argument("--prompts", default=None, help="a text file, one prompt per line (default: the preset's)")
    prec.add_argument("--gamma", type=int, default=4)
    prec.add_argument("--max-new-tokens", type=int, default=64)
    prec.add_argument("--json", action="store_true")

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
    bench.add_argument("--repeats", type=int, default=3)
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
        default=f"{methods.DRAFT.name},{methods.get('prompt-lookup').name}",
        help=f"--tasks: some of {', '.join(task_method_names())}, each optionally with its γ (suffix=6)",
    )
    bench.add_argument("--task-names", default=None, help="--tasks: a comma-separated subset of the task files")
    bench.add_argument(
        "--out", default=None, help="--tasks: also write the table as JSON here; --defaults: store them here instead"
    )
    bench.add_argument(
        "--defaults",
        action="store_true",
        help="race --candidates on the preset's example prompts; store the fastest as the app's start",
    )
    bench.add_argument("--candidates", default=CANDIDATES, help="--defaults: methods at a γ each")
    serve = sub.add_parser("serve-vllm", help="start a vLLM baseline and a vLLM speculative server for the race")
    serve.add_argument("--preset", choices=list(PRESETS), default=default_preset_name())
    serve.add_argument("--speculative", choices=["ngram", "draft"], default="ngram", help="vLLM's proposer")
    serve.add_argument("--tokens", type=int, default=4, help="num_speculative_tokens")
    serve.add_argument("--baseline-port", type=int, default=8100)
    serve.add_argument("--speculative-port", type=int, default=8101)
    serve.add_argument("--print-only", action="store_true", help="print the two commands, start nothing")
    prof = sub.add_parser("profile", help="verify cost: one target (and draft) forward of k new tokens, split by part")
    add_pair_args(prof)
    prof.add_argument("--threads", type=int, default=None, help="torch threads (default: as the app sets them)")
    prof.add_argument("--ks", default="1,2,3,4,5,7,9", help="numbers of new tokens per forward")
    prof.add_argument("--contexts", default="100,400", help="warm cache lengths")
    prof.add_argument("--repeats", type=int, default=15, help="forwards per median")
    prof.add_argument("--no-split", action="store_true", help="wall times only (no torch.profiler pass)")
    prof.add_argument("--json", action="store_true")
    return parser


def whole_numbers(text: str, flag: str, low: int = 1, high: int = 4096) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{flag} takes whole numbers separated by commas, got {text!r}") from None
    if not values or not all(low <= v <= high for v in values):
        raise InputError(f"every value in {flag} must be between {low} and {high}")
    return values


def decode_config(args) -> DecodeConfig:
    if args.gamma is None:
        args.gamma = PRESETS[args.preset].gamma
    return DecodeConfig(
        max_new_tokens=args.max_new_tokens,
        gamma=args.gamma,
        schedule=getattr(args, "schedule", "constant"),
        min_confidence=getattr(args, "min_confidence", 0.0),
        method=getattr(args, "method", methods.DRAFT.name),
        max_ngram=getattr(args, "max_ngram", 3),
        sampling=SamplingConfig(args.temperature, args.top_k, args.top_p, args.seed),
        tree=TreeConfig(
            getattr(args, "tree_k", 2),
            getattr(args, "tree_depth", 4),
            getattr(args, "tree_nodes", 12),
            getattr(args, "tree_min_prob", 0.0),
        ),
    )


def load_from_args(args):
    """The preset, overridden by --target/--draft/--draft-vocab/--dtype/--quantization → a loaded Pair."""
    preset = PRESETS[args.preset]
    own_target = args.target is not None
    target_options = LoadOptions() if own_target else preset.target_options
    draft_options = LoadOptions() if own_target else preset.draft_options
    if args.dtype:
        target_options = replace(target_options, dtype=args.dtype)
        draft_options = replace(draft_options, dtype=args.dtype)
    if getattr(args, "quantization", None):  # the target's: both sides of every speedup run it
        target_options = replace(target_options, quantization=args.quantization)
        # the draft is compact exactly when its target is (the same numbers either way)
        draft_options = replace(draft_options, quantization=draft_options_for(target_options).quantization)
    method = methods.get(getattr(args, "method", methods.DRAFT.name))
    draft = (args.draft or preset.draft) if method.draft_model else None
    draft_vocab = args.draft_vocab if args.draft_vocab is not None else (0 if args.draft else preset.draft_vocab)
    pair = load_pair(args.target or preset.target, draft, target_options, draft_options, draft_vocab=draft_vocab)
    configure_cpu_threads(pair)
    return pair


def encode(pair, args, prompt: str) -> list[int]:
    return encode_prompt(pair.tokenizer, prompt, chat_template=not args.no_chat_template)


def cmd_generate(args) -> None:
    config = decode_config(args)
    validate_config(config)
    check_prompt(args.prompt)
    pair = load_from_args(args)
    prompt_ids = encode(pair, args, args.prompt)
    base_run, spec_run = compare(pair, prompt_ids, config)
    record = comparison_record(pair.tokenizer, prompt_ids, base_run, spec_run, dtype_name(pair.target), config.method)
    if args.json:
        print(json.dumps(record))
        return
    base, spec = record["baseline"], record["speculative"]
    decode = lambda t: pair.tokenizer.decode([t])  # noqa: E731
    steps = spec_run.steps
    print(f"prompt: {args.prompt}\n")
    print(f"baseline    ({base['tokens_per_second']:.1f} tok/s):\n{base['text']}\n")
    spans = token_spans(steps, decode)
    print(f"speculative ({spec['tokens_per_second']:.1f} tok/s):")
    print(tokens_ansi(spans) if sys.stdout.isatty() else spec["text"])  # the same text as the baseline's
    print(
        f"\nspeedup {record['speedup']:.2f}x · acceptance {spec['acceptance_rate']:.2f} · "
        f"τ {spec['mean_accepted_tokens']:.2f} tokens per target forward · {spec['target_forwards']} target "
        f"forwards for {len(spec['token_ids'])} tokens"
    )
    if record["limited_by"]:
        from specdemo.measure.diagnosis import question

        print(f"{question(record['limited_by']['term'])} {record['limited_by']['text']}")
    if sys.stdout.isatty():
        print("colours: green accepted · red struck rejected · yellow correction · blue bonus")


def cmd_sample(args) -> None:
    config = decode_config(args)
    validate_config(config)
    check_prompt(args.prompt)
    if args.samples < 1:
        raise InputError("--samples must be ≥ 1")
    pair = load_from_args(args)
    prompt_ids = encode(pair, args, args.prompt)
    samples = sample_many(pair.target, pair.draft, prompt_ids, config, args.samples, pair.eos)
    if args.json:
        print(json.dumps({"prompt_ids": prompt_ids, "samples": samples}))
        return
    for i, ids in enumerate(samples):
        print(f"[{i}] {pair.tokenizer.decode(ids, skip_special_tokens=True)}")


def bench_prompts(path) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            prompts = [line.strip() for line in f if line.strip()]
    except OSError as error:
        raise InputError(f"cannot read the prompts file {str(path)!r}: {error.strerror}") from error
    if not prompts:
        raise InputError(f"the prompts file {str(path)!r} has no prompts (one per line)")
    return prompts


# Draft-model variants the methods × tasks table races beside the registry's methods: each runs a
# registered method (its value) with another draft model (``drafter_for`` loads it).
DRAFT_VARIANTS = {"feature": "draft", "self-int8": "draft", "feature-hybrid": "hybrid"}
SELF_DRAFT_GAMMA = 2  # the target in int8 drafts for itself: right almost always, but it costs ≈ 0.7 of a step


def task_method_names() -> list[str]:
    """What ``bench --tasks --methods`` takes: the methods a race may start with, and the variants."""
    return [*methods.names(start=True), *DRAFT_VARIANTS]


def task_methods(text: str) -> dict[str, int | None]:
    """``--methods draft,suffix=6`` → {method: its γ, or None for the method's own}."""
    chosen: dict[str, int | None] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        method, _, gamma = item.partition("=")
        bad_gamma = gamma and not (gamma.isdigit() and 1 <= int(gamma) <= 32)
        if method not in task_method_names() or method in chosen or bad_gamma:
            chosen = {}
            break
        chosen[method] = int(gamma) if gamma else None
    if not chosen:
        raise InputError(
            f"--methods takes some of {', '.join(task_method_names())}, each once, optionally with its γ "
            f"(e.g. suffix=6, 1–32), got {text!r}"
        )
    return chosen


def drafter_for(method: str, pair, preset) -> tuple:
    """A ``--methods`` name → (draft model or None, the method's own γ, the engine's method)."""
    from specdemo.models import SMOLLM2_FEATURE

    if method in methods.REGISTRY:
        m = methods.get(method)
        return (pair.draft if m.draft_model else None), m.gamma or preset.gamma, m.name
    runs = methods.get(DRAFT_VARIANTS[method])
    if method == "self-int8":  # no training: the same weights with int8 arithmetic propose, fp32 verifies
        own = replace(preset.target_options, quantization="int8-cpu")
        return load_pair(pair.target_id, pair.target_id, preset.target_options, own).draft, SELF_DRAFT_GAMMA, runs.name
    # the feature drafter, alone or where suffix decoding has nothing to propose
    feature = load_pair(pair.target_id, SMOLLM2_FEATURE, preset.target_options, preset.draft_options)
    gamma = runs.gamma or PRESETS.get("smollm2-135m-feature", preset).gamma
    return feature.draft, gamma, runs.name


def cmd_tasks(args) -> None:
    from specdemo.measure.tasks import encode_tasks, format_tasks, load_tasks, run_tasks

    chosen = task_methods(args.methods)
    methods = list(chosen)
    names = [t.strip() for t in args.task_names.split(",")] if args.task_names else None
    tasks = load_tasks(names=names)
    if not tasks:
        raise InputError(f"no task files match --task-names {args.task_names!r}")
    pair = load_from_args(args)
    preset = PRESETS[args.preset]
    drafters = {m: drafter_for(m, pair, preset) for m in methods}
    for m, gamma in chosen.items():  # a γ given with the method wins over its own
        if gamma is not None:
            drafters[m] = (drafters[m][0], gamma, drafters[m][2])
    ids = encode_tasks(pair.tokenizer, tasks, not args.no_chat_template)
    result = run_tasks(pair.target, drafters, ids, args.max_new_tokens, pair.eos, progress=not args.json)
    result |= {"preset": args.preset, "gammas": {m: g for m, (_, g, _) in drafters.items()}}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result) if args.json else format_tasks(result))


def defaults_candidates(text: str) -> list[tuple[str, int]]:
    """``draft=1,draft=2,hybrid=4`` → [(method, γ)]: a method may come at several γ, each once."""
    chosen = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        method, _, gamma = item.partition("=")
        if method not in methods.names(start=True) or not (gamma.isdigit() and 1 <= int(gamma) <= 32):
            chosen = []
            break
        chosen.append((method, int(gamma)))
    if not chosen or len(set(chosen)) < len(chosen):
        raise InputError(
            f"--candidates takes methods of {', '.join(methods.names(start=True))}, each with a γ of 1–32 "
            f"(e.g. draft=1,hybrid=4), none twice, got {text!r}"
        )
    return chosen


def cmd_defaults(args) -> None:
    from specdemo.measure.defaults import choose_defaults, format_defaults, store_defaults
    from specdemo.recipes.card import machine

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
    if args.tasks:
        return cmd_tasks(args)
    if args.defaults:
        return cmd_defaults(args)
    from specdemo.measure.bench import format_table, run_bench, to_json, write_csv
    from specdemo.models import vllm
    from specdemo.view.plots import gamma_sweep_figure

    try:
        gammas = [int(g) for g in args.gammas.split(",") if g.strip()]
    except ValueError:
        raise InputError(f"--gammas takes whole numbers separated by commas, got {args.gammas!r}") from None
    if not gammas or not all(1 <= g <= 32 for g in gammas):
        raise InputError("every γ in --gammas must be between 1 and 32")
    if args.repeats < 1:
        raise InputError("--repeats must be ≥ 1")
    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    if unknown := set(engines) - set(all_engines()):
        raise InputError(f"unknown engine(s) {', '.join(sorted(unknown))}: choose from {', '.join(all_engines())}")
    validate_config(DecodeConfig(max_new_tokens=args.max_new_tokens))
    texts = bench_prompts(args.prompts or PRESETS[args.preset].prompts_file)
    pair = load_from_args(args)
    prompts = [encode(pair, args, p) for p in texts]
    urls = vllm.configured_urls(args.vllm_baseline_url, args.vllm_speculative_url)
    urls = {f"vllm-{role}": url for role, url in urls.items()}
    result = run_bench(pair, prompts, gammas, args.max_new_tokens, args.repeats, not args.json, engines, urls)
    if args.csv:
        write_csv(result, args.csv)
    if args.plot:
        gamma_sweep_figure(result["rows"]).write_html(args.plot, include_plotlyjs=True)  # self-contained: works offline
    print(to_json(result) if args.json else format_table(result))


PRECISION_KERNELS = ("int8-cpu", "compact-fp32")  # precision --dtypes: fp32 weights on these kernels


def cmd_precision(args) -> None:
    from specdemo.measure.precision import format_precision, precision_table

    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if not dtypes or any((d not in DTYPES or d == "auto") and d not in PRECISION_KERNELS for d in dtypes):
        raise InputError(
            f"--dtypes takes some of float32, bfloat16, float16, int8-cpu, compact-fp32, got {args.dtypes!r}"
        )
    validate_config(DecodeConfig(max_new_tokens=args.max_new_tokens, gamma=args.gamma))
    texts = bench_prompts(args.prompts or PRESETS[args.preset].prompts_file)

    def load(choice: str):  # int8-cpu / compact-fp32: fp32 weights on those kernels; a dtype: torch's products
        quantization = choice if choice in PRECISION_KERNELS else "none"
        dtype = "float32" if quantization != "none" else choice
        return load_from_args(argparse.Namespace(**{**vars(args), "dtype": dtype, "quantization": quantization}))

    rows = precision_table(load, texts, lambda pair, t: encode(pair, args, t), dtypes, args.gamma, args.max_new_tokens)
    print(json.dumps(rows) if args.json else format_precision(rows))


def cmd_profile(args) -> None:
    import torch

    from specdemo.measure.profile import format_profile, profile_model, to_record

    ks = whole_numbers(args.ks, "--ks", 1, 64)
    contexts = whole_numbers(args.contexts, "--contexts", 1, 8192)
    if args.repeats < 1:
        raise InputError("--repeats must be ≥ 1")
    if 1 not in ks:
        ks = [1, *ks]  # t(1) is the step every ratio is relative to
    pair = load_from_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    models = {"target": pair.target} | ({"draft": pair.draft} if pair.draft is not None else {})
    result = {"threads": torch.get_num_threads(), "dtype": dtype_name(pair.target)}
    for name, model in models.items():
        rows = profile_model(model, contexts, ks, args.repeats, split=not args.no_split)
        result[name] = to_record(rows)
        if not args.json:
            print(format_profile(f"{name} ({dtype_name(model)}, {result['threads']} threads)", rows), flush=True)
    if args.json:
        print(json.dumps(result))


def cmd_serve_vllm(args) -> None:
    import shlex
    import signal
    import time

    from specdemo.models import vllm

    if not 1 <= args.tokens <= 16:
        raise InputError("--tokens must be between 1 and 16")
    preset = PRESETS[args.preset]
    model = vllm.model_folder(preset.target)
    draft = preset.draft if args.speculative == "draft" else None
    spec = vllm.speculative_config(args.speculative, args.tokens, draft)
    commands = {
        "baseline": (vllm.server_command(model, args.baseline_port), args.baseline_port, "0"),
        "speculative": (vllm.server_command(model, args.speculative_port, spec), args.speculative_port, "1"),
    }
    for role, (command, port, cores) in commands.items():
        print(f"# {role}, http://127.0.0.1:{port}\nVLLM_CPU_OMP_THREADS_BIND={cores} {shlex.join(command)}")
    if args.print_only:
        return
    for _, port, _ in commands.values():
        if vllm.answers(f"http://127.0.0.1:{port}"):
            raise vllm.BackendError(f"a server already answers on port {port}: stop it, or choose other ports")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` stops both servers too (the finally below)
    logs = Path.home() / ".cache" / "specdemo" / "logs"
    procs = [vllm.start_server(c, logs / f"vllm-{role}.log", cores) for role, (c, _, cores) in commands.items()]
    urls = [f"http://127.0.0.1:{port}" for _, port, _ in commands.values()]
    show = lambda s, waiting: print(f"\rwaiting for {len(waiting)} server(s): {s:.0f} s", end="", flush=True)  # noqa: E731
    try:
        vllm.wait_ready(urls, processes=procs, on_wait=show)
        print(f"\nready: baseline {urls[0]}, speculative {urls[1]} (logs in {logs}); Ctrl-C stops both")
        print(f"point the app at them: SPECDEMO_VLLM_BASELINE_URL={urls[0]} SPECDEMO_VLLM_SPECULATIVE_URL={urls[1]}")
        while all(p.poll() is None for p in procs):
            time.sleep(1.0)
        raise vllm.BackendError("a vLLM server exited (see its log)")
    except KeyboardInterrupt:
        print()
    finally:
        for proc in procs:
            vllm.stop_server(proc)


def quiet_libraries() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


COMMANDS = {
    "generate": cmd_generate,
    "sample": cmd_sample,
    "bench": cmd_bench,
    "precision": cmd_precision,
    "profile": cmd_profile,
    "serve-vllm": cmd_serve_vllm,
}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "json", False):
        quiet_libraries()
    try:
        COMMANDS[args.command](args)
    except SpecDemoError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
