"""The LMs a search fuses: read from a file or a package (`read_lm`), combined for a tokenizer (`fusion_lm`), and
the text of a hypothesis they took part in (`transcriber`). numpy only: the PyTorch searches and the exported
recognizer (onnxruntime) use the same LMs."""

from __future__ import annotations

from asr_transformer.config import DecodeConfig
from asr_transformer.errors import DecodeError

LM_MODES = ("beam", "joint", "rescore")  # the modes an n-gram LM takes part in
BIASED_MODES = ("beam", "joint", "ctc_beam", "rescore")  # the modes hotwords take part in


def read_lm(source, tokenizer, words: bool, where: str | None = None):
    """An LM → BinaryNgramLM (decode/ngram_binary.py: NgramLM's scores, memory-mapped arrays): over `tokenizer`'s
    pieces, or a word LM (`asr lm --words`) with `words`.

    source: an ARPA file's path (converted once, and cached when large), a binary LM's path, or the
    gzip-compressed ARPA text a model package stores (bytes; `where` names it).
    A clear DecodeError when it cannot be read or does not fit the tokenizer."""
    import zlib

    from asr_transformer.decode.ngram import NgramError
    from asr_transformer.decode.ngram_binary import load_lm
    from asr_transformer.decode.word_lm import WORD_START

    pieces = None if words else tokenizer.pieces(range(tokenizer.vocab_size))
    kind = "word LM" if words else "token LM"
    try:
        if isinstance(source, (bytes, bytearray)):
            lm = load_lm(bytes(source), pieces, where or kind)
        else:
            lm = load_lm(source, pieces)
    except (NgramError, OSError, UnicodeDecodeError, EOFError, zlib.error) as e:
        raise DecodeError(f"{kind}: {e}") from None
    if words and any(w.startswith(WORD_START) for w in lm.words):
        raise DecodeError(f"word LM {where or source}: its words are a tokenizer's pieces; train a word LM with "
                          "`asr lm --words` (or use this one as the token LM)")
    return lm


def fusion_lm(tokenizer, token_lm=None, lm_weight: float = DecodeConfig.lm_weight, word_lm=None,
              word_lm_weight: float = DecodeConfig.word_lm_weight):
    """The LM to fuse and the weight to fuse it with: (None, β) without any; (token_lm, β) with a token LM alone;
    with a word LM a WordBoundaryLM that applies both weights itself, with weight 1 — for a phone model a
    LexiconLM, which also keeps the search to the words of the word LM. The weights default to DecodeConfig's."""
    from asr_transformer.decode.word_lm import WordBoundaryLM

    if word_lm is None:
        return token_lm, lm_weight
    if tokenizer.model_type == "phone":
        from asr_transformer.decode.lexicon_lm import LexiconLM

        return LexiconLM(tokenizer, word_lm, word_lm_weight, token_lm, lm_weight), 1.0
    return WordBoundaryLM(tokenizer.word_pieces(range(tokenizer.vocab_size)), word_lm, word_lm_weight, token_lm,
                          lm_weight, tokenizer.normalizer), 1.0


def transcriber(tokenizer, lm=None):
    """tokens → text for people: a LexiconLM's words (the homophones it chose) when it took part, else the
    tokenizer's `transcript` (a phone tokenizer's: words, the nearest for a non-word) or `decode`."""
    return getattr(lm, "transcript", None) or getattr(tokenizer, "transcript", None) or tokenizer.decode


def fused_lms(fusion, names: dict[str, str], word_lm_weight: float) -> dict:
    """What a decoding's rtf.json says of the LMs `fusion` (`fusion_lm`'s LM, None: none took part) fused: each
    LM's name (`names`: kind → its file's name) and order, and the word LM's weight."""
    token_lm = getattr(fusion, "token_lm", fusion)
    word_lm = getattr(fusion, "word_lm", None)
    return {"lm": names.get("lm") if token_lm is not None else None,
            "lm_order": token_lm.order if token_lm is not None else None,
            "word_lm": names.get("word_lm") if word_lm is not None else None,
            "word_lm_order": word_lm.order if word_lm is not None else None,
            "word_lm_weight": word_lm_weight if word_lm is not None else None}
