"""``python -m specdemo bench``: specdemo against transformers on the same pair and prompts.

Every engine, ours and transformers', is timed the same way: wall clock around each whole
generation (setup included, synced on CUDA), summed over the prompts; warm-up excluded;
the repeat with the median total is kept. The engines take turns prompt by prompt
(``time_interleaved``), so the drift of a shared machine's speed lands on all of them alike
rather than in the ratios between them. The per-step stopwatches (t_t, t_d, t_v below) are
a separate breakdown, never the clock engines are compared with.

Rows (greedy decoding):
  specdemo-baseline, specdemo-speculative (each γ), specdemo-prompt-lookup (each γ),
  specdemo-suffix (each γ as the longest proposal; each repeat starts with an empty store),
  specdemo-hybrid (suffix decoding where it has a proposal, else the draft model; asked for by name),
  specdemo-tree (each γ: a token tree of γ nodes, k = 2, the chain's draft budget),
  transformers-generate, transformers-assisted (each γ, constant schedule),
  transformers-prompt-lookup (each γ),
  vllm-baseline, vllm-speculative (servers given by URL: ``specdemo.models.vllm``; the
  speculative server's proposal length is its own, so these rows carry no γ).
For specdemo's speculative rows it also reports the measured step times and the predictions:
  t_t  one target step (one token, cached)      t_d  one draft step
  t_v  one target verify of γ+1 tokens         c = t_d / t_t
  paper's speedup τ / (γc + 1)  (Leviathan et al.; assumes t_v = t_t)
  predicted speedup τ·t_t / (γ·t_d + t_v), and measured / predicted (the engine's own overhead).
"""

from __future__ import annotations

import csv
import json
import statistics
import time
from dataclasses import dataclass, field, replace

import torch
from tqdm.auto import tqdm

from specdemo.decoding import methods
from specdemo.decoding.engine import (
    DecodeConfig,
    Run,
    baseline_steps,
    decode_steps,
    run_all,
    run_timed,
    speculative_steps,
)
from specdemo.decoding.kv import synchronize
from specdemo.decoding.suffix import SuffixStore
from specdemo.decoding.tree import TreeConfig
from specdemo.measure.metrics import acceptance_per_position, acceptance_rate, mean_accepted_tokens, predicted_speedup
from specdemo.models import vllm

VLLM_ENGINES = {"vllm-baseline": False, "vllm-speculative": True}  # engine → speculates


def engine_methods() -> dict[str, str]:
    """specdemo's engines besides the baseline and the draft model's chain → their method."""
    return {m.engine: m.name for m in methods.REGISTRY.values() if m.bench}


def all_engines() -> tuple[str, ...]:
    return (
        "specdemo-baseline",
        "specdemo-speculative",
        *engine_methods(),
        "transformers-generate",
        "transformers-assisted",
        "transformers-prompt-lookup",
        *VLLM_ENGINES,
    )


def default_engines() -> tuple[str, ...]:
    """The engines a plain ``bench`` runs: vLLM's need servers, and methods that mix drafters (the
    hybrid) are asked for by name."""
    mixed = {m.engine for m in methods.REGISTRY.values() if m.mixed}
    return tuple(e for e in all_engines() if e not in (*VLLM_ENGINES, *mixed))


@dataclass
class Row:
    engine: str
    gamma: int | None
    tokens: int = 0
    seconds: float = 0.0  # wall clock, summed over the prompts
    compute_seconds: float | None = None  # specdemo only: the sum of the step stopwatches
    acceptance_rate: float | None = None
    mean_accepted_tokens: float | None = None
    t_target: float | None = None
    t_draft: float | None = None
    t_verify: float | None = None
    same_tokens: tuple[int, int] | None = None  # (prompts whose tokens equal the first row's, prompts)
    extra: dict = field(default_factory=dict)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


@dataclass
class Timed:
    """One prompt through an engine that yields no steps: tokens written, wall clock around it."""

    tokens: int
    wall_s: float
    chunks: int = 0  # vLLM: the streamed deltas (one per engine step)
    token_ids: list[int] = field(default_factory=list)


class Job:
    """One bench row: how one prompt is timed (``once``), and how the kept repeat becomes a Row."""

    engine: str
    gamma: int | None

    def start(self) -> None:
        """Before each repeat."""

    def once(self, prompt: list[int]) -> Run | Timed:
        raise NotImplementedError

    def end(self):
        """After each repeat: what the row needs besides the prompts' results (kept with them)."""

    def row(self, results: list, ended) -> Row:
        return Row(self.engine, self.gamma, sum(r.tokens for r in results), sum(r.wall_s for r in results))


def same_tokens(results: list, reference: list, eos=()) -> tuple[int, int]:
    """(how many prompts got exactly the reference's tokens, how many prompts). A trailing
    end-of-sequence token does not count: some engines return it, some (vLLM's stream) do not."""

    def text(ids):
        ids = list(ids)
        while ids and ids[-1] in eos:
            ids.pop()
        return ids

    return sum(text(r.token_ids) == text(ref.token_ids) for r, ref in zip(results, reference)), len(reference)


def time_interleaved(jobs: list[Job], prompts, repeats: int = 1, bar=None, eos=()) -> list[Row]:
    """Each repeat takes the prompts one by one through every job in turn (in reverse order on
    every second prompt), so a machine whose speed drifts from minute to minute drifts alike for
    every row and the ratios between rows hold; per job, the repeat with the median total wall
    clock is kept, and its tokens are compared with the first job's (``same_tokens``)."""
    trials = [[] for _ in jobs]
    for _ in range(repeats):
        for job in jobs:
            job.start()
        results = [[] for _ in jobs]
        for i, prompt in enumerate(prompts):
            turn = list(zip(jobs, results))
            for job, out in turn if i % 2 == 0 else reversed(turn):
                out.append(job.once(prompt))
                if bar is not None:  # one run a tick: a single long prompt still shows progress
                    bar.update()
        for job, out, kept in zip(jobs, results, trials):
            kept.append((sum(r.wall_s for r in out), out, job.end()))
    rows, reference = [], None
    for job, kept in zip(jobs, trials):
        kept.sort(key=lambda t: t[0])
        _, results, ended = kept[len(kept) // 2]
        reference = reference or results
        rows.append(job.row(results, ended))
        rows[-1].same_tokens = same_tokens(results, reference, eos)
    return rows


def steady(steps):
    """Steps after the first (the first one also encodes the prompt)."""
    return steps[1:] if len(steps) > 1 else steps


class SpecdemoJob(Job):
    """specdemo's engine: ``make_steps(prompt)`` → its steps. ``before_repeat``: called before
    each repeat (the bench empties suffix decoding's store there, so a repeat does not draft from
    the answers of the one before)."""

    def __init__(self, engine, gamma, make_steps, device, before_repeat=None):
        self.engine, self.gamma, self.make_steps, self.device = engine, gamma, make_steps, device
        self.before_repeat = before_repeat

    def start(self) -> None:
        if self.before_repeat:
            self.before_repeat()

    def once(self, prompt) -> Run:
        return run_timed(lambda: self.make_steps(prompt), self.device)

    def row(self, runs: list[Run], ended) -> Row:
        steps = [s for r in runs for s in r.steps]
        tail = [s for r in runs for s in steady(r.steps)]
        row = Row(
            self.engine,
            self.gamma,
            sum(len(r.token_ids) for r in runs),
            sum(r.wall_s for r in runs),
            sum(r.seconds for r in runs),
        )
        if self.engine == "specdemo-baseline":
            row.t_target = statistics.median(s.verify_s for s in tail)
        else:
            row.acceptance_rate = acceptance_rate(steps)
            row.mean_accepted_tokens = mean_accepted_tokens(steps)
            row.t_verify = statistics.median(s.verify_s for s in tail)
            drafted = sum(len(s.drafted) for s in tail)
            row.t_draft = sum(s.draft_s for s in tail) / drafted if drafted else 0.0
            row.extra["alpha_per_position"] = acceptance_per_position(steps)
        return row


class TransformersJob(Job):
    """``generate()`` with ``generate_kwargs``; ``prepare``: called before each prompt (assisted
    generation reads γ from the assistant, which several rows share)."""

    def __init__(self, engine, gamma, target, max_new_tokens, prepare=None, **generate_kwargs):
        self.engine, self.gamma, self.target, self.max_new_tokens = engine, gamma, target, max_new_tokens
        self.prepare, self.generate_kwargs = prepare, generate_kwargs

    def once(self, prompt) -> Timed:
        if self.prepare:
            self.prepare()
        device = self.target.device
        ids = torch.tensor([prompt], device=device)
        synchronize(device)
        start = time.perf_counter()
        out = self.target.generate(ids, do_sample=False, max_new_tokens=self.max_new_tokens, **self.generate_kwargs)
        synchronize(device)
        wall_s = time.perf_counter() - start
        return Timed(out.shape[1] - len(prompt), wall_s, token_ids=out[0, len(prompt) :].tolist())


class VllmJob(Job):
    """A vLLM server (``model``: the name it serves, from ``vllm.check_role``) by the same clock:
    wall time around each whole streamed request; the speculative counters are /metrics deltas
    around the repeat (only this row's requests reach its server)."""

    def __init__(self, engine: str, url: str, model: str, max_new_tokens: int):
        self.engine, self.gamma, self.url, self.model, self.max_new_tokens = engine, None, url, model, max_new_tokens
        self.speculates = VLLM_ENGINES[engine]

    def start(self) -> None:
        self.before = vllm.read_counters(self.url) if self.speculates else None

    def once(self, prompt) -> Timed:
        start = time.perf_counter()
        chunks = list(vllm.stream_token_deltas(self.url, self.model, prompt, self.max_new_tokens))
        wall_s = time.perf_counter() - start
        return Timed(sum(len(ids) for ids in chunks), wall_s, len(chunks), [t for ids in chunks for t in ids])

    def end(self):
        return vllm.read_counters(self.url) - self.before if self.speculates else None

    def row(self, results: list[Timed], counters) -> Row:
        row = super().row(results, counters)
        if counters is not None:
            chunks = sum(r.chunks for r in results)
            row.acceptance_rate = counters.acceptance_rate
            row.mean_accepted_tokens = row.tokens / chunks if chunks else None  # tokens per streamed step
            row.extra["alpha_per_position"] = counters.alpha_per_position
        return row


def set_assistant(draft, gamma: int) -> None:
    """transformers' assisted generation reads γ from the assistant's generation_config."""
    draft.generation_config.num_assistant_tokens = gamma
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0  # no early stop: a fixed γ, like ours


def run_bench(
    pair,
    prompts: list[list[int]],
    gammas,
    max_new_tokens: int = 64,
    repeats: int = 3,
    progress: bool = True,
    engines=None,
    vllm_urls: dict[str, str] | None = None,
    steps: str = "eager",
) -> dict:
    """Time every engine of ``engines`` (specdemo-baseline always: the predictions need t_t).

    ``vllm_urls``: engine → server URL (default: ``vllm.configured_urls()``); ``steps``: specdemo's kind of
    step, on the baseline and every speculative engine alike."""
    engines = default_engines() if engines is None else engines
    urls = {f"vllm-{role}": url for role, url in vllm.configured_urls().items()} | (vllm_urls or {})
    base_cfg = DecodeConfig(max_new_tokens=max_new_tokens, steps=steps)
    target, draft, eos = pair.target, pair.draft, pair.eos
    skipped = []
    chain = methods.chain_for(draft)  # the "specdemo-speculative" row: the draft model's chain
    if methods.reads_features(draft):  # it reads specdemo's verify: transformers cannot run it, nor a tree
        cannot = {m.engine for m in methods.REGISTRY.values() if not methods.takes(m, draft)}
        skipped = [e for e in engines if e in (*cannot, "transformers-assisted")]
        engines = tuple(e for e in engines if e not in skipped)
    # transformers' assisted generation gets the draft as a plain model (full vocabulary).
    assistant = getattr(draft, "full_model", draft)
    pad = {"pad_token_id": next(iter(eos), 0)}
    jobs = [("specdemo-baseline", None)]
    jobs += [(e, None) for e in engines if e in ("transformers-generate", *VLLM_ENGINES)]
    for g in gammas:
        jobs += [(e, g) for e in engines if e not in ("specdemo-baseline", "transformers-generate", *VLLM_ENGINES)]
    # a server that is down or in the wrong role: said before anything is timed
    served = {e: vllm.check_role(urls[e], speculates) for e, speculates in VLLM_ENGINES.items() if e in engines}
    # warm-up, not timed: one short run through each code path
    warm = replace(base_cfg, max_new_tokens=min(8, max_new_tokens))
    run_all(baseline_steps(target, prompts[0], warm, eos))
    run_all(speculative_steps(target, draft, prompts[0], warm, eos))
    if any(e.startswith("transformers") for e in engines):
        set_assistant(assistant, gammas[0])
        target.generate(
            torch.tensor([prompts[0]], device=target.device),
            do_sample=False,
            max_new_tokens=8,
            assistant_model=assistant,
            **pad,
        )

    timed = []
    for engine, g in jobs:
        if engine.startswith("specdemo"):
            method = engine_methods().get(engine, chain.name)
            # the tree gets the chain's draft budget: γ nodes (k = 2 children, depth up to γ)
            cfg = replace(base_cfg, gamma=g or 1, method=method, tree=TreeConfig(2, g or 1, g or 1))
            store = SuffixStore() if methods.get(method).suffix_store else None
            if engine == "specdemo-baseline":
                make = lambda p, cfg=cfg: baseline_steps(target, p, cfg, eos)
            else:
                make = lambda p, cfg=cfg, store=store: decode_steps(target, draft, p, cfg, eos, store=store)
            timed.append(SpecdemoJob(engine, g, make, target.device, store.reset if store else None))
        elif engine in VLLM_ENGINES:
            timed.append(VllmJob(engine, urls[engine], served[engine], max_new_tokens))
        elif engine == "transformers-generate":
            timed.append(TransformersJob(engine, g, target, max_new_tokens, **pad))
        elif engine == "transformers-assisted":
            assist = lambda g=g: set_assistant(assistant, g)
            timed.append(TransformersJob(engine, g, target, max_new_tokens, assist, assistant_model=assistant, **pad))
        else:
            timed.append(TransformersJob(engine, g, target, max_new_tokens, prompt_lookup_num_tokens=g, **pad))
    bar = tqdm(total=repeats * len(prompts) * len(timed), desc="bench", unit="run", disable=not progress)
    rows = time_interleaved(timed, prompts, repeats, bar, eos)
    bar.close()
    result = summarise(rows, str(target.device))
    if skipped:
        result["skipped"] = {e: "a feature drafter drafts chains from specdemo's own verify" for e in skipped}
    return result


def summarise(rows: list[Row], device: str) -> dict:
    by = {(r.engine, r.gamma): r for r in rows}
    hf_row = by.get(("transformers-generate", None))
    hf = hf_row.tokens_per_second if hf_row else None
    base = by[("specdemo-baseline", None)]
    t_t = base.t_target
    out = []
    for r in rows:
        d = {
            "engine": r.engine,
            "gamma": r.gamma,
            "tokens": r.tokens,
            "seconds": r.seconds,
            "compute_seconds": r.compute_seconds,
            "tokens_per_second": r.tokens_per_second,
            "over_transformers_generate": r.tokens_per_second / hf if hf else None,
            "acceptance_rate": r.acceptance_rate,
            "mean_accepted_tokens": r.mean_accepted_tokens,
            "t_target": t_t if r.engine.startswith("specdemo") else None,
            "t_draft": r.t_draft,
            "t_verify": r.t_verify,
            "cost_ratio": None,
            "paper_speedup": None,
            "predicted_speedup": None,
            "measured_over_predicted": None,
            "same_tokens": f"{r.same_tokens[0]}/{r.same_tokens[1]}" if r.same_tokens else None,
            **r.extra,
        }
        if r.engine == "specdemo-speculative" and t_t:
            c = r.t_draft / t_t
            predicted = predicted_speedup(r.mean_accepted_tokens, r.gamma, r.t_draft, t_t, r.t_verify)
            measured = r.tokens_per_second / base.tokens_per_second
            d |= {
                "cost_ratio": c,
                "paper_speedup": r.mean_accepted_tokens / (r.gamma * c + 1),
                "verify_over_target": r.t_verify / t_t,
                "predicted_speedup": predicted,
                "speedup_over_baseline": measured,
                "measured_over_predicted": measured / predicted if predicted else None,
            }
        else:  # every engine against specdemo's own baseline, by the same wall clock
            d["speedup_over_baseline"] = r.tokens_per_second / base.tokens_per_second
        out.append(d)
    vllm_base = by.get(("vllm-baseline", None))
    for d in out:
        if d["engine"] == "vllm-speculative" and vllm_base:  # vLLM's speedup over its own baseline
            d["over_vllm_baseline"] = d["tokens_per_second"] / vllm_base.tokens_per_second
    assisted = {r["gamma"]: r for r in out if r["engine"] == "transformers-assisted"}
    for r in out:
        if r["engine"] == "specdemo-speculative" and r["gamma"] in assisted:
            r["over_transformers_assisted"] = r["tokens_per_second"] / assisted[r["gamma"]]["tokens_per_second"]
    return {"rows": out, "device": device, "torch": torch.__version__}


# (key, header, format): the speedup over specdemo's own baseline first; every ratio says what it is over
COLUMNS = [
    ("engine", "engine", "{}"),
    ("gamma", "γ", "{}"),
    ("tokens_per_second", "tokens/s", "{:.1f}"),
    ("speedup_over_baseline", "× baseline", "{:.2f}"),
    ("same_tokens", "same tokens", "{}"),  # prompts whose tokens are the baseline's, of all
    ("acceptance_rate", "acceptance", "{:.2f}"),
    ("alpha_per_position", "α by position", "{}"),
    ("mean_accepted_tokens", "τ", "{:.2f}"),
    ("cost_ratio", "c = t_d/t_t", "{:.3f}"),
    ("verify_over_target", "t_v/t_t", "{:.2f}"),
    ("predicted_speedup", "predicted ×", "{:.2f}"),
    ("measured_over_predicted", "measured / predicted", "{:.2f}"),
    ("over_transformers_generate", "× transformers generate", "{:.2f}"),
    ("over_transformers_assisted", "× transformers assisted", "{:.2f}"),
    ("over_vllm_baseline", "× vLLM baseline", "{:.2f}"),
]


ALWAYS_SHOWN = 5  # engine, γ, tokens/s, × baseline, same tokens; the other columns only where a row has a figure


def table_cells(result: dict) -> tuple[list[str], list[list[str]]]:
    """(headers, rows of formatted cells; "–" where a figure does not apply). A column no row has a
    figure for (the vLLM and transformers ratios when those engines did not run) is left out."""

    def cell(r, key, fmt):
        value = r.get(key)
        if value is None:
            return "–"
        if key == "alpha_per_position":
            return " / ".join(f"{v:.2f}" for v in value[:6]) or "–"
        return fmt.format(value)

    rows = [[cell(r, k, f) for k, _, f in COLUMNS] for r in result["rows"]]
    keep = [i for i in range(len(COLUMNS)) if i < ALWAYS_SHOWN or any(row[i] != "–" for row in rows)]
    return [COLUMNS[i][1] for i in keep], [[row[i] for i in keep] for row in rows]


def format_table(result: dict) -> str:
    header, rows = table_cells(result)
    lines = [header, *rows]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    text = ["  ".join(str(v).rjust(w) for v, w in zip(line, widths)) for line in lines]
    r0 = next(r for r in result["rows"] if r["engine"] == "specdemo-baseline")
    text.append(f"\nt_t (target step) = {r0['t_target'] * 1e3:.2f} ms on {result['device']}")
    return "\n".join(text)


def write_csv(result: dict, path) -> None:
    keys = sorted({k for r in result["rows"] for k in r})
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(result["rows"])


def to_json(result: dict) -> str:
    return json.dumps(result)
