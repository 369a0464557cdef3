"""The /compare API: baseline vs speculative on one prompt, the JSON of ``generate --json``."""

from __future__ import annotations

from specdemo.app import model_thread
from specdemo.app.settings import (
    Settings,
    friendly,
    prepare,
)
from specdemo.decoding import methods
from specdemo.errors import InputError, SpecDemoError
from specdemo.measure.compare import compare, comparison_record
from specdemo.measure.divergence import dtype_name
from specdemo.models import (
    PRESETS,
    startup_preset,
)


def compare_api(
    prompt: str,
    max_new_tokens: int = 64,
    gamma: int = 4,
    temperature: float = 0.0,
    seed: int = 0,
    top_k: int = 0,
    top_p: float = 1.0,
    method: str = methods.DRAFT.name,
    preset: str = startup_preset(),
) -> dict:
    """Baseline vs speculative on one prompt: the JSON of `python -m specdemo generate --json`. A refused input
    comes back as an error of one clear line."""
    try:
        if preset not in PRESETS:
            raise InputError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
        ours = methods.names(on_engine=True)
        if method not in ours:
            raise InputError(f"method must be one of {', '.join(ours)}, got {method!r}")
        s = Settings.from_preset(
            preset,
            prompt=prompt,
            method_label=methods.get(method).label,
            gamma=gamma,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            max_new_tokens=max_new_tokens,
        )
        prep = prepare(s)
        base, spec = model_thread.call(compare, prep.pair, prep.ids, prep.config)
        return comparison_record(
            prep.pair.tokenizer, prep.ids, base, spec, dtype_name(prep.pair.target), prep.config.method
        )
    except SpecDemoError:
        raise
    except Exception as error:
        raise SpecDemoError(friendly(error)) from error
