"""Export a run as JSON, and load it back to replay without any model."""

from __future__ import annotations

import json
import platform

import torch

from specdemo.decoding import methods
from specdemo.decoding.engine import Step
from specdemo.errors import InputError
from specdemo.measure.race import RaceState

TRACE_VERSION = 1


def library_versions() -> dict:
    import transformers

    from specdemo import __version__

    return {
        "specdemo": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def used_ids(steps) -> set[int]:
    """Every token id the steps show: emitted, drafted, and the inspector's top-10 lists."""
    ids: set[int] = set()
    for s in steps:
        ids.update(s.emitted)
        ids.update(s.drafted)
        for top in (s.views.residual_top, s.views.p_top, s.views.q_top):
            ids.update(int(i) for i, _ in top)
        if s.draft_source:  # suffix decoding: the text a proposal was seen in
            ids.update(s.draft_source["ids"])
    return ids


def to_trace(state: RaceState, settings: dict, decode, device: str = "cpu") -> dict:
    """Everything needed to show the run again: steps, timings, settings, token texts, versions."""
    return {
        "specdemo_trace": TRACE_VERSION,
        "settings": settings,
        "method": state.method,
        "greedy": state.greedy,
        "dtype": state.dtype,
        # in the JSON form the file holds (tuples become lists), so a trace equals its own replay
        "baseline": json.loads(json.dumps([s.to_dict() for s in state.baseline])),
        "speculative": json.loads(json.dumps([s.to_dict() for s in state.speculative])),
        "summary": state.summary(),
        "token_text": {str(i): decode(i) for i in sorted(used_ids(state.baseline + state.speculative))},
        "versions": library_versions(),
        "device": device,
    }


def dumps(trace: dict) -> str:
    return json.dumps(trace, ensure_ascii=False, indent=1)


def from_trace(data: dict | str):
    """→ (RaceState, decode, settings). Raises InputError for anything that is not a trace."""
    try:
        if isinstance(data, str):
            data = json.loads(data)
        if data.get("specdemo_trace") != TRACE_VERSION:
            raise InputError("this file is not a specdemo trace (or one of another version)")
        if data["method"] not in methods.REGISTRY:
            raise InputError(f"the trace names an unknown method {data['method']!r}")
        if "speculative" not in data and "contender" in data:  # the side's name in traces downloaded before
            data = data | {"speculative": data["contender"]}
        steps = {side: [Step.from_dict(d) for d in data[side]] for side in ("baseline", "speculative")}
        texts = {int(k): v for k, v in data["token_text"].items()}
    except InputError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise InputError(f"this file is not a readable specdemo trace ({type(error).__name__}: {error})") from None
    state = RaceState(
        data["method"],
        bool(data["greedy"]),
        steps["baseline"],
        steps["speculative"],
        done=True,
        dtype=str(data.get("dtype", "float32")),
    )
    return state, text_lookup(texts), data.get("settings", {})


def text_lookup(texts: dict[int, str]):
    """id → its recorded text (``<id>`` for one not recorded): decoding with no tokenizer."""
    return lambda t: texts.get(t, f"<{t}>")
