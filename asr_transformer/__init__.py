"""asr-transformer: a small, fast Transformer encoder-decoder speech recognizer with joint CTC.

    from asr_transformer import Recognizer, load
    asr = Recognizer("model.pt")
    print(asr.transcribe("audio.wav")["text"])
    whisper = load("whisper-tiny.en")  # a model by name: fetched once into ~/.cache/asr-transformer
"""

__version__ = "0.1.0"
__all__ = ["Recognizer", "load"]


def load(model, **options):
    """A Recognizer of a package's path or of a model's name (`hub.MODELS`: whisper-tiny.en, whisper-base, …;
    resolved as `asr transcribe -m` resolves it); options as `Recognizer`'s."""
    from asr_transformer.hub import resolve
    from asr_transformer.inference.recognizer import Recognizer

    return Recognizer(resolve(model), **options)


def __getattr__(name: str):
    if name == "Recognizer":  # imported on first use, so that `asr --help` does not load torch
        from asr_transformer.inference.recognizer import Recognizer

        return Recognizer
    raise AttributeError(f"module 'asr_transformer' has no attribute {name!r}")
