"""The GPU check: one prepared run for a lent CUDA machine that reaches nothing outside (scripts/gpu_check.sh).

1. identity: the bundled pair (its real weights travel with the tree) on CUDA in fp32, each kind of step
   (eager, static, compiled, aot): greedy baseline and speculative tokens against generate(), τ and tokens/s;
2. timings: each GPU preset's real architecture (assets/configs/, random weights: the hub is out of
   reach) in its dtype, eager against compiled (and, for the ZeroGPU default, aot: compiled ahead of
   time, export + AOTInductor, with its build time): t_t, t_d, c, t_v/t_t, and the speedup τ / (γ·c + t_v/t_t)
   they give at the α the cost model uses (random weights accept nothing, so τ comes from α: a prediction
   from measured step costs);
   and, as an experiment, the aot package's steps recorded in CUDA graphs (aot+graph: the lever docs/design.md
   names), its failure reported rather than failing the run;
3. the seed prompt's race through the app's own handler (race_tab.stream), on compiled and aot steps;
then one summary table, and everything as JSON in $OUT/gpu_check.json. Any missing piece fails the run.
GPU_CHECK_DEVICE=cpu GPU_CHECK_PRESETS=bundled-tinystories GPU_CHECK_PROMPTS=1 runs the same code on a CPU
(the test suite's smoke run: each part on one prompt).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdemo.decoding import aot  # noqa: E402
from specdemo.decoding.engine import DecodeConfig, baseline_steps, decode_steps, run_timed  # noqa: E402
from specdemo.decoding.kv import CachedLM, synchronize  # noqa: E402
from specdemo.measure.launches import ALPHAS, config_of, tau  # noqa: E402
from specdemo.models import PRESETS  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp"))
SEED_PROMPT = "What is the purpose of life?"
GAMMA = 3  # the verify shape timed (γ + 1 tokens)
MAX_K = 8  # the verify curve's longest step, in tokens
DEVICE = os.environ.get("GPU_CHECK_DEVICE", "cuda")
# the seed's pair in bf16 and the showcase
TIMED_PRESETS = tuple(os.environ.get("GPU_CHECK_PRESETS", "qwen2.5-3b+0.5b,qwen2.5-14b+0.5b").split(","))
PARTS = os.environ.get("GPU_CHECK_PARTS", "identity,timings,app").split(",")
KINDS = ("eager", "compiled")
# aot's package is built per model (tens of seconds to minutes on a big one): timed for these presets only
AOT_PRESETS = tuple(os.environ.get("GPU_CHECK_AOT_PRESETS", TIMED_PRESETS[0]).split(","))
# how many of its prompts the identity and the app race take (the CPU smoke run: one, the code path the same)
PROMPTS = int(os.environ.get("GPU_CHECK_PROMPTS", "2"))


def bundled_settings(**changes):
    """The bundled pair in fp32, as the app loads it: the identity and the app race share one load, and with
    it each model's compiled steps and aot package (built once per process)."""
    from specdemo.app.settings import Settings

    return Settings.from_preset("bundled-tinystories", dtype="float32", **changes)


def identity() -> list[dict]:
    from specdemo.app.settings import pair_for

    pair = pair_for(bundled_settings())
    assert pair.target.device.type == DEVICE, f"the bundled pair did not load on {DEVICE}"
    rows = []
    for prompt in ("once upon a time, there was a little", "tom had a red ball. he liked to")[:PROMPTS]:
        ids = pair.tokenizer(prompt)["input_ids"]
        out = pair.target.generate(torch.tensor([ids], device=DEVICE), do_sample=False, max_new_tokens=48)
        expected = out[0, len(ids) :].tolist()
        for kind in ("eager", "static", "compiled", "aot"):
            cfg = DecodeConfig(max_new_tokens=48, gamma=4, steps=kind)
            device = pair.target.device
            base = run_timed(lambda i=ids, c=cfg: baseline_steps(pair.target, i, c, pair.eos), device)
            spec = run_timed(lambda i=ids, c=cfg: decode_steps(pair.target, pair.draft, i, c, pair.eos), device)
            n = len(base.token_ids)
            rows.append(
                {
                    "prompt": prompt,
                    "steps": kind,
                    "identical": base.token_ids == spec.token_ids == expected[:n],
                    "tau": len(spec.token_ids) / len(spec.steps),
                    "speedup": (len(spec.token_ids) / spec.wall_s) / (len(base.token_ids) / base.wall_s),
                }
            )
    return rows


def random_model(model_id: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(DEVICE):
        return AutoModelForCausalLM.from_config(config_of(model_id), dtype=dtype).eval()


def step_ms(model, kind: str, new: int, repeats: int = 20) -> float:
    """Median synced time of a step of ``new`` tokens after a 64-token prompt (compiled: captured first)."""
    # all on a static cache: the kinds differ only in the capture
    lm = CachedLM(model, steps="static" if kind == "eager" else kind, room=GAMMA + 8)
    lm.capture(64, [(new, new)])
    lm.forward(list(range(1, 65)))
    times = []
    for _ in range(repeats + 3):
        synchronize(lm.device)
        start = time.perf_counter()
        lm.forward(list(range(1, new + 1)), keep=new)
        synchronize(lm.device)
        times.append(time.perf_counter() - start)
        lm.rollback_to(64)
    return 1000 * statistics.median(times[3:])


def graphed_ahead_ms(model, new: int, repeats: int = 20) -> float:
    """An experiment for the lever docs/design.md names: the aot package's step recorded in a CUDA graph in
    this process (recording is not compiling: ZeroGPU allows it) and replayed; the median synced replay."""
    lm = CachedLM(model, steps="aot", room=GAMMA + 8)
    lm.capture(64, [])
    lm.forward(list(range(1, 65)))
    ids = torch.ones((1, new), dtype=torch.long, device=lm.device)
    position = torch.tensor(64, device=lm.device)  # every replay writes the same slots: a timing, not a decode
    keys, values = [layer.keys for layer in lm.cache.layers], [layer.values for layer in lm.cache.layers]
    run = aot.runner(model)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch.cuda.graph asks
        for _ in range(3):
            run(ids, position, keys, values)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(ids, position, keys, values)
    times = []
    for _ in range(repeats + 3):
        synchronize(lm.device)
        start = time.perf_counter()
        graph.replay()
        synchronize(lm.device)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[3:])


def kind_row(t_t: float, t_d: float, t_v: float) -> dict:
    c, ratio = t_d / t_t, t_v / t_t
    predicted = {a: tau(a, GAMMA) / (GAMMA * c + ratio) for a in ALPHAS}
    return {"t_t_ms": t_t, "t_d_ms": t_d, "c": c, "tv_tt": ratio, "speedup_at_alpha": predicted}


def timings(name: str) -> dict:
    preset = PRESETS[name]
    dtype = {"auto": torch.float32}.get(preset.target_options.dtype) or getattr(torch, preset.target_options.dtype)
    target, draft = random_model(preset.target, dtype), random_model(preset.draft, dtype)
    out = {"preset": name, "dtype": str(dtype).removeprefix("torch."), "kinds": {}}
    for kind in KINDS + (("aot",) if name in AOT_PRESETS else ()):
        if kind == "aot":  # each model's package, built before any step is timed
            started = time.perf_counter()
            for model in (target, draft):
                aot.ensure(model)
            out["aot_build_s"] = time.perf_counter() - started
        t_t, t_d, t_v = step_ms(target, kind, 1), step_ms(draft, kind, 1), step_ms(target, kind, GAMMA + 1)
        out["kinds"][kind] = kind_row(t_t, t_d, t_v)
        if kind == "eager":  # the verify curve t_v(k)/t_t a per-step choice of k weighs (auto's cost model)
            out["tv_tt_by_k"] = {k: step_ms(target, kind, k) / t_t for k in range(2, MAX_K + 1)}
    if DEVICE == "cuda" and name in AOT_PRESETS:  # the experiment: a failure is its finding, not the check's
        try:
            steps = graphed_ahead_ms(target, 1), graphed_ahead_ms(draft, 1), graphed_ahead_ms(target, GAMMA + 1)
            out["kinds"]["aot+graph"] = kind_row(*steps)
        except Exception as error:  # noqa: BLE001
            out["aot+graph failed"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    del target, draft
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return out


def app_race() -> dict:
    """The app's Run handler on compiled and aot steps: the seed prompt (the bundled pair knows stories only
    and may end it at once) and one of its own story openings."""
    from specdemo.app import race_tab
    from specdemo.app.race_tab import RACE_OUTPUTS

    statuses = {}
    for prompt in (PRESETS["bundled-tinystories"].examples[0], SEED_PROMPT)[:PROMPTS]:
        for kind in ("compiled", "aot"):
            s = bundled_settings(prompt=prompt, steps=kind, max_new_tokens=64)
            *_, last = race_tab.stream(s, None)
            status = dict(zip(RACE_OUTPUTS, last))["status"]
            statuses[f"{kind}, {prompt!r}"] = status
            assert status.startswith("✓") and "static steps" not in status, status
    return statuses


def main() -> int:
    assert DEVICE != "cuda" or torch.cuda.is_available(), "no CUDA GPU: run this on the lent machine"
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU (smoke run)"
    report, failures = {"gpu": name, "torch": torch.__version__}, []
    import transformers

    report["transformers"] = transformers.__version__
    if DEVICE == "cuda":  # the driver beside torch's CUDA: a measured row names both
        import subprocess

        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        report["driver"] = subprocess.run(query, capture_output=True, text=True).stdout.strip()
        report["cuda"] = torch.version.cuda
    parts = [("identity", "identity", identity)]
    parts += [("timings", f"timings {n}", lambda n=n: timings(n)) for n in TIMED_PRESETS]
    parts += [("app", "app race", app_race)]
    for key, part, run in parts:
        if key not in PARTS:
            continue
        started = time.perf_counter()
        try:
            report[part] = run()
        except Exception:  # a missing piece fails the run, with its traceback in the log
            traceback.print_exc()
            failures.append(part)
        print(f"[{part}] {time.perf_counter() - started:.0f} s", flush=True)
        # after each part: a run cut off by its time limit still returns what it measured
        (OUT / "gpu_check.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"\n== summary: {report['gpu']}, torch {report['torch']}, transformers {report['transformers']} ==")
    for row in report.get("identity", []):
        print(f"identity {row['steps']:<9} {'same' if row['identical'] else 'DIFFERENT'}  τ {row['tau']:.2f}  "
              f"speedup {row['speedup']:.2f}x  ({row['prompt'][:24]}…)")  # fmt: skip
    print(
        "preset              steps      t_t ms  t_d ms     c  t_v/t_t  predicted speedup at α "
        + "/".join(map(str, ALPHAS))
    )
    for name in TIMED_PRESETS:
        if "aot+graph failed" in report.get(f"timings {name}", {}):
            print(f"{name}: aot+graph (an experiment) failed: {report[f'timings {name}']['aot+graph failed']}")
        if "aot_build_s" in report.get(f"timings {name}", {}):
            print(f"{name}: aot packages built in {report[f'timings {name}']['aot_build_s']:.0f} s (target + draft)")
        if curve := report.get(f"timings {name}", {}).get("tv_tt_by_k"):
            print(f"{name}: eager t_v(k)/t_t for k = 2…{MAX_K}: " + " ".join(f"{v:.2f}" for v in curve.values()))
        for kind, k in report.get(f"timings {name}", {}).get("kinds", {}).items():
            speedups = " / ".join(f"{v:.2f}x" for v in k["speedup_at_alpha"].values())
            times = f"{k['t_t_ms']:7.2f} {k['t_d_ms']:7.2f} {k['c']:5.2f} {k['tv_tt']:8.2f}"
            print(f"{name:<19} {kind:<9} {times}  {speedups}")
    for prompt, status in report.get("app race", {"(the app's race)": "FAILED"}).items():
        print(f"app race, {prompt}: {status}")
    if failures:
        print(f"FAILED: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
