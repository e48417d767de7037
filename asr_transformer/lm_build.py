"""Build the n-gram LMs that decoding fuses (`asr lm`): texts → a tokenizer's pieces or words → an interpolated
Kneser-Ney n-gram LM (decode/ngram.py) → an ARPA file.

    built = build_lm([Path("data/train.jsonl")], Path("data/tokenizer"), Path("exp/lm.arpa"), order=4)

A token LM (the default) is over the tokenizer's pieces and is fused as `lm`; a word LM (`words=True`) is over
the words of the tokenizer's normalized text and is fused as `word_lm`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from asr_transformer.errors import UserError


class LMBuildError(UserError, ValueError):
    """Texts or a tokenizer an LM cannot be built from; the message names the file."""


@dataclass
class BuiltLM:
    """What `build_lm` wrote: the ARPA file, its order, the sentences it saw, the n-grams of each order
    (1 … order) and, for a word LM, the number of words (None for a token LM)."""

    path: Path
    order: int
    sentences: int
    ngrams: list[int]
    words: int | None = None

    def describe(self) -> str:
        """One line: `<path>: 4-gram LM from N sentences (a 1-grams, b 2-grams, …)`."""
        kind = f"word {self.order}-gram LM ({self.words} words)" if self.words is not None else f"{self.order}-gram LM"
        counts = ", ".join(f"{count} {n}-grams" for n, count in enumerate(self.ngrams, 1))
        return f"{self.path}: {kind} from {self.sentences} sentences ({counts})"


def read_texts(path: Path) -> list[str]:
    """The sentences of a manifest (.jsonl, or NeMo's .json: its texts) or of a text file (one a line)."""
    from asr_transformer.data.manifest import ManifestError, read_manifest

    try:
        if path.suffix in (".jsonl", ".json"):  # a manifest, ours or NeMo's
            return [u.text for u in read_manifest(path)]
        return path.read_text(encoding="utf-8").splitlines()
    except (ManifestError, OSError, UnicodeDecodeError) as e:
        raise LMBuildError(f"{path}: {e}" if str(path) not in str(e) else str(e)) from None


def build_lm(texts: list[Path], tokenizer_dir: Path, out: Path, order: int, words: bool = False) -> BuiltLM:
    """Train an n-gram LM of `order` (≥ 1) on the sentences of `texts` and write it to `out` as ARPA.

    words: a word LM, its words those of the tokenizer's normalizer, ids 0..4 the special tokens (the ARPA file
    names <unk>, <s>, </s>); else an LM over the tokenizer's pieces. Raises LMBuildError for an unreadable
    tokenizer or text, or when the texts hold no sentence."""
    from asr_transformer.data.tokenizer import load_tokenizer
    from asr_transformer.decode.ngram import train_tables
    from asr_transformer.tokens import SPECIAL_TOKENS

    if order < 1:
        raise LMBuildError(f"LM order {order}: must be at least 1")
    try:
        tok = load_tokenizer(tokenizer_dir)
    except (OSError, ValueError) as e:
        raise LMBuildError(str(e)) from None
    sentences = []
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}  # word → id, for a word LM
    for path in texts:
        lines = read_texts(path)
        if words:
            sentences += [[vocab.setdefault(w, len(vocab)) for w in tok.normalize(line).split()] for line in lines]
        else:
            sentences += [tok.encode(line) for line in lines]
    sentences = [s for s in sentences if s]
    if not sentences:
        raise LMBuildError(f"no text in {', '.join(map(str, texts))}")
    names = list(vocab) if words else tok.pieces(range(tok.vocab_size))
    tables = train_tables(sentences, len(names), order)
    tables.write_arpa(out, names)
    return BuiltLM(Path(out), order, len(sentences), tables.ngram_counts(),
                   len(vocab) - len(SPECIAL_TOKENS) if words else None)
