"""asr-transformer: a small, fast Transformer encoder-decoder speech recognizer with joint CTC."""

__version__ = "0.1.0"
