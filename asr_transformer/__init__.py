"""asr-transformer: a small, fast Transformer encoder-decoder speech recognizer with joint CTC.

    from asr_transformer import Recognizer
    asr = Recognizer("model.pt")
    print(asr.transcribe("audio.wav")["text"])
"""

__version__ = "0.1.0"
__all__ = ["Recognizer"]


def __getattr__(name: str):
    if name == "Recognizer":  # imported on first use, so that `asr --help` does not load torch
        from asr_transformer.inference.recognizer import Recognizer

        return Recognizer
    raise AttributeError(f"module 'asr_transformer' has no attribute {name!r}")
