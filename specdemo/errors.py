"""Errors whose message is meant for the person using the demo (shown as is in the UI and CLI)."""


class SpecDemoError(Exception):
    """Base class: the message is complete, specific and safe to show."""


class InputError(SpecDemoError, ValueError):
    """A request the engine refuses: empty prompt, γ out of range, and so on."""


class ModelLoadError(SpecDemoError):
    """A model or tokenizer could not be loaded, or a target/draft pair does not fit together."""
