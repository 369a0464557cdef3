"""The run settings: one field per input of the app, their validation (one clear line per refusal), the
pair they load, and what every failure turns into (``friendly``). Plain values in and out."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, fields, replace

from specdemo import env
from specdemo.app import model_thread
from specdemo.decoding import methods
from specdemo.decoding.engine import DecodeConfig
from specdemo.decoding.sampling import SamplingConfig
from specdemo.decoding.tree import TreeConfig
from specdemo.errors import InputError, SpecDemoError
from specdemo.models import (
    DEFAULT_CACHE,
    PRESETS,
    LoadOptions,
    chain_method,
    check_request,
    configure_cpu_threads,
    draft_options_for,
    encode_prompt,
    hub,
    load_pair,
    lowercases,
    resolved_id,
    shown_id,
    smollm2,
    start_settings,
    steps_here,
    vllm,
)

log = logging.getLogger("specdemo.app")


KEEP = {"__type__": "update"}  # what gradio's gr.skip() returns: leave this output as it is


def update(**props) -> dict:
    """What gradio's gr.update(**props) returns: change some properties of a component."""
    return {"__type__": "update", **props}


MAX_NEW_TOKENS = int(env.number("SPECDEMO_MAX_NEW_TOKENS"))


def unavailable(method: methods.Method, urls: dict[str, str] | None = None) -> str | None:
    """What this server lacks to run ``method`` now, in a few words (None: it can run)."""
    if method.on_vllm:
        urls = urls or vllm.configured_urls()
        roles = ("baseline", "speculative") if method.both_on_vllm else ("speculative",)
        if not all(vllm.answers(urls[role]) for role in roles):
            return "needs its vLLM servers running (python -m specdemo serve-vllm)"
    if method.drafts == "feature" and not any(chain_method(p) == method.name for p in PRESETS.values()):
        return "needs a trained feature drafter (python -m specdemo.recipes.feature)"
    return None


def method_choices() -> list[tuple[str, str]]:
    """The Method dropdown's (shown, value) pairs: a method this server cannot run now says what it needs."""
    choices = []
    for method in methods.REGISTRY.values():
        need = unavailable(method)
        choices.append((f"{method.label} — {need}" if need else method.label, method.label))
    return choices


DTYPE_CHOICES = ("auto", "float32", "float16", "bfloat16")


@dataclass
class Settings:
    """The run settings, one field per input component of the app (same names)."""

    prompt: str = ""
    target_id: str = ""
    draft_id: str = ""
    quantization: str = "none"
    dtype: str = "auto"
    method_label: str = methods.DRAFT.label
    gamma: int = 4
    schedule: str = "constant"
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_new_tokens: int = 128
    chat_template: bool = True
    tree_k: int = TreeConfig.k
    tree_depth: int = TreeConfig.depth
    tree_nodes: int = TreeConfig.max_nodes
    draft_vocab: int = 0
    steps: str = env.get("SPECDEMO_STEPS")  # a kind in shapes.STEPS: both sides of the race (decoding/kv.py)
    # the vLLM method's servers ("": the environment's SPECDEMO_VLLM_BASELINE_URL / SPECDEMO_VLLM_SPECULATIVE_URL)
    vllm_baseline_url: str = ""
    vllm_speculative_url: str = ""

    def __post_init__(self):  # the page shows a repository folder relative to it: the server loads it by its path
        self.target_id, self.draft_id = resolved_id(self.target_id), resolved_id(self.draft_id)

    @classmethod
    def from_preset(cls, name: str, **changes) -> Settings:
        p = PRESETS[name]
        start = start_settings(p)
        values = dict(
            target_id=p.target,
            draft_id=p.draft,
            quantization=p.target_options.quantization,
            dtype=p.target_options.dtype,
            method_label=methods.get(start.method).label,
            gamma=start.gamma,
            max_new_tokens=min(start.max_new_tokens, MAX_NEW_TOKENS),
            chat_template=p.chat_template,
            draft_vocab=p.draft_vocab,
            prompt=p.examples[0] if p.examples else "",
        )
        return cls(**(values | changes))

    def vllm_urls(self) -> dict[str, str]:
        """{"baseline", "speculative"}: the fields where filled in, else the environment's."""
        return vllm.configured_urls(self.vllm_baseline_url, self.vllm_speculative_url)

    @property
    def method(self) -> str:
        return methods.from_label(self.method_label)

    def config(self) -> DecodeConfig:
        return DecodeConfig(
            max_new_tokens=whole(self.max_new_tokens, "max_new_tokens"),
            gamma=whole(self.gamma, "gamma"),
            schedule=self.schedule,
            method=self.method,
            max_new_tokens_cap=MAX_NEW_TOKENS,
            sampling=SamplingConfig(
                number(self.temperature, "temperature"),
                whole(self.top_k or 0, "top_k"),
                number(self.top_p, "top_p"),
                whole(self.seed or 0, "seed"),
            ),
            tree=TreeConfig(
                whole(self.tree_k, "tree_k"), whole(self.tree_depth, "tree_depth"), whole(self.tree_nodes, "tree_nodes")
            ),
            steps=self.steps or "eager",
        )


SETTING_NAMES = tuple(f.name for f in fields(Settings))


# an InputError's field (a DecodeConfig / SamplingConfig name) → the setting that holds it
FIELD_SETTINGS = {"method": "method_label"}


def number(value, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, got {value!r}", field=name) from None


def whole(value, name: str) -> int:
    n = number(value, name)
    if n != int(n):
        raise InputError(f"{name} must be a whole number, got {value!r}", field=name)
    return int(n)


def find_problem(s: Settings) -> tuple[str, str] | None:
    """The first setting a run would refuse, found without loading a model: (setting, message).
    The app shows it beside Run, and its validator keeps the run from being queued."""
    try:
        check_request(s.prompt, s.config())
        methods.check_draft(methods.get(s.method), s.draft_id)  # by its id: before any model loads
        whole(s.draft_vocab or 0, "draft_vocab")
    except InputError as error:
        log.info("refused: %s", error)  # the server log: one line per refused input
        return FIELD_SETTINGS.get(error.field, error.field or "prompt"), str(error)
    return None


def refusal_line(**values) -> dict:
    """The line beside Run: what a run with these settings would be refused for (the field at fault may sit in
    the folded settings), or nothing, hidden."""
    problem = find_problem(Settings(**values))
    return update(value=f"⚠ {problem[1]}" if problem else "", visible=problem is not None)


WAITING = "In line: one race at a time on this server (so both sides' clocks stay honest); yours starts by itself"


def before_race(**values) -> tuple[dict, str | dict]:
    """At the click, before the race is queued: the line beside Run (a refusal, or nothing) and, for a race that
    will be queued, a status line saying it waits its turn (gradio shows its place in line and the wait there)."""
    line = refusal_line(**values)
    return line, KEEP if line["visible"] else WAITING


def friendly(error: BaseException) -> str:
    """One clear line for the person at the screen. Refused input is logged as one line; an
    unexpected error with its traceback."""
    if isinstance(error, SpecDemoError):
        log.info("refused: %s", error)
        return str(error)
    if "out of memory" in str(error).lower():
        log.warning("out of memory: %s", error)
        return "the device ran out of memory: try fewer new tokens, 4-bit quantization or a smaller pair"
    log.error("unexpected error", exc_info=error)
    return f"unexpected error ({type(error).__name__}): {error}"


@dataclass
class Prepared:
    pair: object
    ids: list[int]
    config: DecodeConfig
    prompt: str  # as the model saw it (lower-cased for a lower-case-only pair)
    note: str  # said in the status line ("" when nothing to say)


def own_method(s: Settings, what: str) -> None:
    """Refuse, in one line, a method specdemo's engine does not run (naive, the vLLM servers) for ``what``."""
    method = methods.get(s.method)
    if not method.on_engine:
        ours = ", ".join(methods.get(n).label for n in methods.names(on_engine=True, tree=False))
        raise InputError(f"{what} follows specdemo's own speculative decoding, not {method.label}: pick {ours}")


def needs_draft(s: Settings) -> bool:
    method = methods.REGISTRY.get(s.method)  # an unknown one is refused by validation
    return method is None or method.draft_model


def load_options(s: Settings) -> LoadOptions:
    return LoadOptions(dtype=s.dtype or "auto", quantization=s.quantization or "none")


def progress_bar(fraction: float, width: int = 10) -> str:
    """A text bar for the status line: ▰▰▰▱▱▱▱▱▱▱ at 30%."""
    filled = round(max(0.0, min(fraction, 1.0)) * width)
    return "▰" * filled + "▱" * (width - filled)


def converting(s: Settings) -> bool:
    """Whether loading these settings' target first converts SmolLM2's GGUF (once per cache folder)."""
    return (s.target_id or "").strip() == smollm2.HUB_ID and smollm2.needs_conversion()


def loading_text(s: Settings) -> str:
    """What the race waits for before its first step, said on the status line."""
    target_id, draft_id = (s.target_id or "").strip(), (s.draft_id or "").strip()
    options = load_options(s)
    loaded = (target_id, options) in DEFAULT_CACHE and (
        not needs_draft(s) or not draft_id or (draft_id, draft_options_for(options)) in DEFAULT_CACHE
    )
    if loaded:  # compiled steps: each new shape is captured before the first step (the log says how long)
        return "capturing the steps (torch.compile, once per shape)" if s.steps == "compiled" else "starting"
    if (fetched := hub.describe_progress()) is not None:  # a hub model's bytes, before it loads
        done = hub.progress() or 0.0
        return f"downloading {fetched} {progress_bar(done)} {done:.0%}, then loading the pair"
    if converting(s):
        done = smollm2.conversion_progress()
        bar = "" if done is None else f" {progress_bar(done)} {done:.0%}"
        return f"converting SmolLM2's GGUF once (≈ 30 s){bar}, then loading the pair"
    return "loading the pair (its first run)"


def prepare(s: Settings) -> Prepared:
    """Settings → the pair, prompt ids and DecodeConfig; raises SpecDemoError with a clear message."""
    problem = find_problem(s)  # bad numbers fail before anything loads
    if problem:
        raise InputError(problem[1], field=problem[0])
    target_id, draft_id = (s.target_id or "").strip(), (s.draft_id or "").strip()
    if not target_id:
        raise InputError("no target model: pick a preset or type a model id under Advanced", field="target_id")
    if needs_draft(s) and not draft_id:
        raise InputError(
            "this method needs a draft model: type one under Advanced, or use prompt lookup or suffix decoding"
        )
    pair = pair_for(s)
    prompt, notes, config = s.prompt, [], s.config()
    if lowercases(target_id) and prompt != prompt.lower():
        prompt = prompt.lower()
        notes.append("this pair knows lower-case stories only, so the prompt was lower-cased")
    method = methods.get(config.method)
    templated = s.chat_template and getattr(pair.tokenizer, "chat_template", None)
    if templated and method.on_engine and (method.suffix_store or not method.draft_model):
        # it copies from what the model reads, which is more than the prompt the pane echoes
        notes.append(f"{method.short} also copies from the chat template's system text, which the pane leaves out")
    if method.prepare:  # before the race's clocks start (auto: this machine's step costs, once)
        model_thread.call(method.prepare, pair.target, pair.draft if method.draft_model else None, config.gamma)
    steps, why = steps_here(config.steps, method, [pair.target] + ([pair.draft] if method.draft_model else []))
    config = replace(config, steps=steps)
    notes += [why] if why else []
    ids = encode_prompt(pair.tokenizer, prompt, chat_template=bool(s.chat_template))
    return Prepared(pair, ids, config, prompt, " · ".join(notes))


def pair_for(s: Settings):
    """The settings' pair, loaded once (the cache keeps it) on the one model thread (model_thread.py says why)."""
    options = load_options(s)
    draft_vocab = whole(s.draft_vocab or 0, "draft_vocab")
    draft_id = s.draft_id.strip() if needs_draft(s) and s.draft_id else None
    pair = model_thread.call(
        load_pair, (s.target_id or "").strip(), draft_id, options, draft_options_for(options), draft_vocab=draft_vocab
    )
    model_thread.call(configure_cpu_threads, pair)
    return pair


def decoder(tokenizer):
    """Token id → its text; a special token (``<|im_end|>``) as a readable marker (⟨end⟩)."""
    special = set(getattr(tokenizer, "all_special_ids", None) or [])

    def decode(t: int) -> str:
        if t not in special:
            return tokenizer.decode([t])
        if t == tokenizer.eos_token_id or "end" in str(tokenizer.convert_ids_to_tokens(t)):
            return " ⟨end⟩"
        return f" ⟨{str(tokenizer.convert_ids_to_tokens(t)).strip('<|>')}⟩"

    return functools.lru_cache(maxsize=65536)(decode)


def start_note(name: str) -> str:
    """One line under the race's settings: what this preset starts with, and why."""
    start = start_settings(PRESETS[name])
    if not start.note:
        return ""
    method = methods.get(start.method).label
    return f"Starts with **{method}**, γ {start.gamma}, {start.max_new_tokens} tokens: {start.note}."


# What selecting a preset fills, in ``preset_fields``' order (the app wires its components by these names).
PRESET_OUTPUTS = (
    "target_id",
    "draft_id",
    "quantization",
    "dtype",
    "chat_template",
    "draft_vocab",
    "method_label",
    "gamma",
    "max_new_tokens",
    "start_line",
    "example",
    "prompt",
)


def preset_fields(name: str) -> tuple:
    """Selecting a preset fills the model fields, the options, its measured start (method, γ,
    length, and the line that says where they come from) and the example prompts."""
    p = PRESETS[name]
    s = Settings.from_preset(name)
    examples = list(p.examples)
    return (
        shown_id(p.target),
        shown_id(p.draft),
        p.target_options.quantization,
        p.target_options.dtype,
        p.chat_template,
        p.draft_vocab,
        s.method_label,
        s.gamma,
        s.max_new_tokens,
        start_note(name),
        update(choices=examples, value=None),
        examples[0] if examples else KEEP,
    )
