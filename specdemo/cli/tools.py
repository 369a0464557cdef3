"""``precision``, ``profile`` and ``serve-vllm``: the tools around the race."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdemo.cli.common import (
    add_pair_args,
    bench_prompts,
    encode,
    load_from_args,
)
from specdemo.decoding.engine import DecodeConfig, validate_config
from specdemo.decoding.steps import whole_numbers
from specdemo.errors import InputError
from specdemo.measure.divergence import dtype_name
from specdemo.models import (
    DTYPES,
    PRESETS,
    default_preset_name,
)


def add_parsers(sub) -> None:
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

    prof = sub.add_parser("profile", help="verify cost: one target (and draft) forward of k new tokens, split by part")
    add_pair_args(prof)
    prof.add_argument("--threads", type=int, default=None, help="torch threads (default: as the app sets them)")
    prof.add_argument("--ks", default="1,2,3,4,5,7,9", help="numbers of new tokens per forward")
    prof.add_argument("--contexts", default="100,400", help="warm cache lengths")
    prof.add_argument("--repeats", type=int, default=15, help="forwards per median")
    prof.add_argument("--no-split", action="store_true", help="wall times only (no torch.profiler pass)")
    prof.add_argument("--json", action="store_true")
    prof.add_argument(
        "--cost-model",
        action="store_true",
        help="instead: each GPU preset's eager and captured steps as a GPU would run them (ops, kernels, host time "
        "measured here on its architecture with random weights; bytes from its config), and the speedup predicted",
    )
    prof.add_argument("--gpu", choices=["H200", "A100-80GB", "L4"], default="H200", help="--cost-model's GPU")
    prof.add_argument(
        "--presets", default="", help="--cost-model: some of the GPU presets, comma-separated (default: all)"
    )
    prof.add_argument("--out", type=Path, default=None, help="--cost-model: also write the predictions as JSON")
    report = sub.add_parser("report", help="rewrite README.md's results and docs/benchmarks.md from the results files")
    report.add_argument("--run", action="store_true", help="first measure every results file again on this machine")
    serve = sub.add_parser("serve-vllm", help="start a vLLM baseline and a vLLM speculative server for the race")
    serve.add_argument("--preset", choices=list(PRESETS), default=default_preset_name())
    serve.add_argument("--speculative", choices=["ngram", "draft"], default="ngram", help="vLLM's proposer")
    serve.add_argument("--tokens", type=int, default=4, help="num_speculative_tokens")
    serve.add_argument("--baseline-port", type=int, default=8100)
    serve.add_argument("--speculative-port", type=int, default=8101)
    serve.add_argument("--print-only", action="store_true", help="print the two commands, start nothing")


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


def cmd_cost_model(args) -> None:
    """The cost model for every preset that runs on a GPU (measure/launches.py)."""
    import time

    from specdemo.measure.launches import format_prediction, predict

    def dtype_of(options) -> str:
        return "4bit" if options.quantization == "4bit" else ("float16" if options.dtype == "auto" else options.dtype)

    gpu_presets = [p.name for p in PRESETS.values() if p.needs_cuda]
    chosen = [n.strip() for n in args.presets.split(",") if n.strip()] or gpu_presets
    if unknown := set(chosen) - set(gpu_presets):
        raise InputError(f"--presets takes GPU presets ({', '.join(gpu_presets)}), got {', '.join(sorted(unknown))}")
    predictions = []
    for preset in (PRESETS[name] for name in chosen):
        dtypes = dtype_of(preset.target_options), dtype_of(preset.draft_options)
        p = predict(preset.target, preset.draft, *dtypes, args.gpu)
        predictions.append({"preset": preset.name} | p)
        print(f"[{preset.name}] " + format_prediction(p), flush=True)
    if args.out:
        record = {"measured": time.strftime("%Y-%m-%d"), "command": "python -m specdemo profile --cost-model"}
        args.out.write_text(json.dumps(record | {"predictions": predictions}, indent=1) + "\n", encoding="utf-8")


def cmd_profile(args) -> None:
    import torch

    from specdemo.measure.profile import format_profile, profile_model, to_record

    if args.cost_model:
        return cmd_cost_model(args)

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


def cmd_report(args) -> None:
    import shlex
    import subprocess

    from specdemo.view import report

    if args.run:
        for name, command in report.SOURCES.items():
            print(f"measuring {name}: {command}", flush=True)
            subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=report.ROOT, check=True)
    for path in report.write():
        print(f"wrote {path.relative_to(report.ROOT)}")


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
