"""specdemo: speculative decoding made visible and measurable (no gradio imports here)."""

__version__ = "0.1.0"
