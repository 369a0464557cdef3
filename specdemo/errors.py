"""Errors whose message is meant for the person using the demo (shown as is in the UI and CLI)."""


class SpecDemoError(Exception):
    """Base class: the message is complete, specific and safe to show."""


class InputError(SpecDemoError, ValueError):
    """A request the engine refuses: empty prompt, γ out of range, and so on.

    ``field`` names the setting at fault (a DecodeConfig / SamplingConfig field or "prompt"),
    so a UI can show the message next to that input."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field

    def __reduce__(self):  # keep ``field`` across pickle (ZeroGPU returns errors by pickle)
        return type(self), (str(self), self.field)


class ModelLoadError(SpecDemoError):
    """A model or tokenizer could not be loaded, or a target/draft pair does not fit together."""
