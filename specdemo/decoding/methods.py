"""Every decoding method, registered once: its name, what the app calls it, what it needs, how it drafts.

The CLI's choices, the app's dropdown, "try another method", the benchmark's engines, the race's
side names and validation all read this registry, so a new drafter is one module and one
``register(Method(...))`` (``tests/test_methods.py`` adds a toy one and finds it everywhere).

A method changes the proposal and its q, never the acceptance rule (``engine.verify_draft``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specdemo.decoding import auto
from specdemo.decoding.drafters import PROMPT_LOOKUP_GAMMA, ModelDrafter, PromptLookupDrafter
from specdemo.decoding.feature import FeatureDrafter, FeatureHead, is_feature_drafter
from specdemo.decoding.suffix import DEFAULT_GAMMA as SUFFIX_GAMMA
from specdemo.decoding.suffix import HybridDrafter, SuffixDrafter
from specdemo.errors import InputError

# A race's two sides where they are the target alone and speculative decoding:
# (left pane, right pane, what the speedup divides).
DEFAULT_SIDES = ("baseline", "speculative", "speculative tokens/s ÷ baseline tokens/s")
DEFAULT_PANES = ("Baseline: the target alone", "Speculative: drafts, each step checked by one target forward")


@dataclass(frozen=True)
class Method:
    name: str  # the CLI's, the API's and a trace's word for it
    label: str  # the app's dropdown
    short: str  # in tables and sentences ("the {short} guesses it")
    description: str  # one line: what the right-hand side of a race is
    lossless: bool = True  # False only for the naive hand-off, which checks nothing
    draft_model: bool = True  # runs a draft model (else it proposes from text: no model to load)
    # the draft models it takes: "model" (a causal LM), "feature" (a feature drafter: an EAGLE-style head
    # that reads the target's hidden states) or "any" (either: the hybrid's fallback chain)
    drafts: str = "model"
    suffix_store: bool = False  # drafts from suffix decoding's store of earlier answers
    tree: bool = False  # verifies a tree of proposals in one forward (``tree.tree_steps``), not a chain
    # who runs the race's right side: "specdemo" (this engine), "naive" (the unchecked hand-off),
    # "vllm" (two vLLM servers) or "vllm-vs-specdemo" (a vLLM server against this engine)
    runner: str = "specdemo"
    gamma: int | None = None  # its own γ where none is chosen (None: the preset's)
    # (config, draft model, target CachedLM, suffix store) → a drafter with ``propose``; chains only
    drafter: Callable | None = None
    # (target model, draft model or None, γ) → None: one-off start-up work, done before any run is timed
    # (auto measures this machine's step costs); the app and the benchmarks call it once a pair is loaded
    prepare: Callable | None = None
    suggest: int | None = None  # its place in "try another method" (None: never suggested)
    start: bool = False  # a race may start with it (``bench --tasks --methods`` offers it)
    start_gammas: tuple[int, ...] = ()  # the γs ``bench --defaults`` races it at for a preset's measured start
    bench: bool = False  # a row of ``python -m specdemo bench`` (engine "specdemo-<name>")
    sides: tuple[str, str, str] = DEFAULT_SIDES
    panes: tuple[str, str] = DEFAULT_PANES  # the headings over the race's two panes

    @property
    def mixed(self) -> bool:
        """Drafts from suffix decoding where it can, else from the draft model (the hybrid)."""
        return self.draft_model and self.suffix_store

    @property
    def model_tree(self) -> bool:
        """The draft model's token tree, with its own shape settings (k, depth, nodes)."""
        return self.tree and self.draft_model

    @property
    def ahead_of_time(self) -> bool:
        """Can its steps run from a package compiled ahead of time (``aot.py``)? Chains only: the package has
        no attention mask (a tree's) and returns no hidden states (a feature drafter's)."""
        return not self.tree and self.drafts != "feature"

    @property
    def on_engine(self) -> bool:
        """Both sides of its race run in this process, on specdemo's engine (so its clocks can be read)."""
        return self.runner == "specdemo"

    @property
    def hand_off(self) -> bool:
        """The naive hand-off: the draft writes unchecked, the target continues (no steps to verify)."""
        return self.runner == "naive"

    @property
    def both_on_vllm(self) -> bool:
        """Both sides of its race stream from vLLM servers (a baseline server and a speculative one)."""
        return self.runner == "vllm"

    @property
    def on_vllm(self) -> bool:
        """A side of its race streams from a vLLM server."""
        return self.runner in ("vllm", "vllm-vs-specdemo")

    @property
    def engine(self) -> str:
        """Its benchmark engine's name."""
        return f"specdemo-{self.name}"


REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    if method.name in REGISTRY:
        raise ValueError(f"a method named {method.name!r} is registered already")
    REGISTRY[method.name] = method
    return method


def get(name: str) -> Method:
    """The method called ``name``; an unknown name is refused in one line."""
    if name not in REGISTRY:
        raise InputError(f"method must be one of {', '.join(REGISTRY)}, got {name!r}", field="method")
    return REGISTRY[name]


def from_label(label: str) -> str:
    """The app's dropdown label → its method's name (a name, or anything unknown, passes through
    for ``get`` to accept or refuse)."""
    return next((m.name for m in REGISTRY.values() if m.label == label), label)


def names(**wanted) -> list[str]:
    """The registered names, in order, whose fields equal ``wanted`` (e.g. ``runner="specdemo"``)."""
    return [m.name for m in REGISTRY.values() if all(getattr(m, k) == v for k, v in wanted.items())]


def suggestions() -> list[Method]:
    """The methods "try another method" offers, in its order."""
    return sorted((m for m in REGISTRY.values() if m.suggest is not None), key=lambda m: m.suggest)


def draft_kind(draft) -> str | None:
    """What drafts: None (no draft), "feature" (a feature drafter: it reads the target's hidden states)
    or "model" (a causal LM). ``draft`` is the loaded draft or its id, so a run is refused before loading."""
    if draft is None or draft == "":
        return None
    if isinstance(draft, str):
        return "feature" if is_feature_drafter(draft) else "model"
    return "feature" if isinstance(draft, FeatureHead) else "model"


def reads_features(draft) -> bool:
    """Is this draft (loaded, or its id) a feature drafter?"""
    return draft_kind(draft) == "feature"


def takes(method: Method, draft) -> bool:
    """Can ``method`` draft with this draft (loaded, or its id)?"""
    return not method.draft_model or method.drafts in (draft_kind(draft) or "model", "any")


def check_draft(method: Method, draft) -> None:
    """Refuse, in one line, a draft (loaded, or its id) ``method`` cannot draft with."""
    if method.draft_model and draft_kind(draft) is None:
        raise InputError(
            f"the {method.short} method needs a draft model (or use prompt lookup or suffix decoding)", "method"
        )
    if takes(method, draft):
        return
    if method.drafts == "feature":
        raise InputError(
            f"the {method.short} method needs a feature drafter as the draft: pick a preset with one "
            "(python -m specdemo.recipes.feature trains it)",
            "method",
        )
    fits = ", ".join(m.short for m in REGISTRY.values() if m.draft_model and takes(m, draft))
    what = "a feature drafter (it reads the target's hidden states)" if reads_features(draft) else "a model"
    raise InputError(f"this draft is {what}, which the {method.short} method cannot use: pick {fits}", "method")


def chain_for(draft) -> Method:
    """The chain method of this draft (loaded, or its id): the feature drafter's or the draft model's."""
    return FEATURE if reads_features(draft) else DRAFT


# --- the drafters: one function per way of proposing --------------------------------------------


def model_drafter(config, draft_model, target, store=None):
    return ModelDrafter(draft_model, target.vocab_size, config.min_confidence, like=target)


def feature_drafter(config, draft_model, target, store=None):
    return FeatureDrafter(draft_model, target, target.vocab_size)


def prompt_lookup_drafter(config, draft_model, target, store=None):
    return PromptLookupDrafter(config.max_ngram)


def suffix_drafter(config, draft_model, target, store=None):
    return SuffixDrafter(store, config.suffix, target.vocab_size)


def hybrid_drafter(config, draft_model, target, store=None):
    """Suffix decoding where it has seen the text, else the draft model's chain (either kind)."""
    model = chain_for(draft_model).drafter(config, draft_model, target)
    return HybridDrafter(suffix_drafter(config, draft_model, target, store), model, config.suffix)


def auto_costs(target_model, draft_model, gamma: int) -> auto.CostModel:
    """This machine's step costs for the pair (measured once, then read from the user cache)."""
    from specdemo import env

    cost_file = Path(env.get("SPECDEMO_CACHE_DIR")).expanduser() / "auto_costs.json"
    return auto.measure_costs(target_model, draft_model, gamma, cost_file)


def auto_drafter(config, draft_model, target, store=None):
    """Each step, the source and γ with the most expected tokens per unit of this machine's time."""
    model = chain_for(draft_model).drafter(config, draft_model, target) if draft_model is not None else None
    cost = auto_costs(target.model, draft_model, config.gamma)
    return auto.AutoDrafter(
        cost, prompt_lookup_drafter(config, draft_model, target), suffix_drafter(config, draft_model, target, store),
        model, auto.shared_acceptance(auto.pair_name(target.model, draft_model)),
    )  # fmt: skip


# --- the registry: the order here is the dropdown's ----------------------------------------------

DRAFT = register(
    Method(
        "draft",
        "draft model",
        "draft model",
        "speculative decoding with the draft model",
        drafter=model_drafter,
        suggest=0,
        start=True,
        start_gammas=(1, 2),
        bench=False,  # the benchmark's "specdemo-speculative" row
    )
)
FEATURE = register(
    Method(
        "feature",
        "feature drafter: a small head reading the target's hidden states",
        "feature drafter",
        "speculative decoding with a feature drafter (EAGLE-style: it reads the target's hidden states)",
        drafts="feature",
        drafter=feature_drafter,
        start=True,
        bench=False,  # the benchmark's "specdemo-speculative" row, for a feature drafter's pair
    )
)
PROMPT_LOOKUP = register(
    Method(
        "prompt-lookup",
        "prompt lookup",
        "prompt lookup",
        "speculative decoding with prompt lookup (no draft model)",
        draft_model=False,
        gamma=PROMPT_LOOKUP_GAMMA,
        drafter=prompt_lookup_drafter,
        suggest=2,
        start=True,
        start_gammas=(4,),
        bench=True,
    )
)
register(
    Method(
        "suffix",
        "suffix decoding (prompt + earlier answers)",
        "suffix decoding",
        "speculative decoding with suffix decoding (the prompt and earlier answers; no draft model)",
        draft_model=False,
        suffix_store=True,
        gamma=SUFFIX_GAMMA,
        drafter=suffix_drafter,
        suggest=1,
        start=True,
        start_gammas=(4,),
        bench=True,
    )
)
register(
    Method(
        "suffix-tree",
        "suffix decoding, as a tree of continuations",
        "suffix decoding's tree",
        "speculative decoding with suffix decoding's tree of continuations (no draft model)",
        draft_model=False,
        suffix_store=True,
        tree=True,
        gamma=SUFFIX_GAMMA,
        suggest=5,
        start=True,
    )
)
HYBRID = register(
    Method(
        "hybrid",
        "hybrid: suffix decoding where it has seen the text, else the draft model",
        "suffix + draft model",
        "speculative decoding with suffix decoding where it has a proposal, else the draft model",
        suffix_store=True,
        drafts="any",
        gamma=SUFFIX_GAMMA,
        drafter=hybrid_drafter,
        suggest=3,
        start=True,
        start_gammas=(4,),
        bench=True,
    )
)
AUTO = register(
    Method(
        "auto",
        "auto: picks the drafter and γ each step from what it costs here",
        "auto",
        "speculative decoding that chooses, each step, no draft, prompt lookup, the suffix store or the draft "
        "model, and how many tokens, from this machine's step costs and what each has been accepting",
        suffix_store=True,
        drafts="any",
        gamma=auto.MOST,
        drafter=auto_drafter,
        prepare=auto_costs,
        start=True,
        start_gammas=(auto.MOST,),
        bench=True,
    )
)
register(
    Method(
        "tree",
        "token tree",
        "token tree",
        "speculative decoding with a token tree drafted by the draft model",
        tree=True,
        suggest=4,
        bench=True,
    )
)
NAIVE = register(
    Method(
        "naive",
        "naive: draft writes half, target continues (NOT lossless)",
        "naive hand-off",
        "NOT speculative decoding: the draft writes the first half, the target continues",
        lossless=False,
        runner="naive",
        panes=(DEFAULT_PANES[0], "Naive: the draft writes the first half unchecked, then the target"),
    )
)
register(
    Method(
        "vllm",
        "vLLM servers: baseline vs speculative",
        "vLLM",
        "vLLM's speculative decoding against vLLM's baseline, two servers over HTTP",
        draft_model=False,  # its servers draft
        runner="vllm",
        panes=("Baseline: vLLM, the target alone", "Speculative: vLLM, its drafts checked by the target"),
    )
)
register(
    Method(
        "vllm-vs-specdemo",
        "vLLM's speculative server vs specdemo's own",
        "vLLM vs specdemo",
        "vLLM's speculative decoding (a server) against specdemo's own (the draft model)",
        runner="vllm-vs-specdemo",
        panes=("vLLM: speculative decoding on its server", "specdemo: speculative decoding in this process"),
        sides=(
            "vLLM speculative",
            "specdemo speculative",
            "specdemo's tokens/s ÷ vLLM's speculative tokens/s (wall clock on both: one engine against the other)",
        ),
    )
)
