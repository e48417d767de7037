"""Whisper's byte-level BPE tokenizer behind the toolkit's fixed special ids.

Whisper numbers its tokens from 0 (text pieces, then ``<|endoftext|>``, ``<|startoftranscript|>``, languages,
tasks, ``<|notimestamps|>`` and timestamps). Here every Whisper id is shifted by NUM_SPECIAL, so ids 0-4 keep
their meaning in every model (blank, unk, BEGIN, END, mask): toolkit id = Whisper id + 5. `asr import whisper`
maps the weights the same way: BEGIN gets the embedding of the last token of Whisper's start sequence, END that
of ``<|endoftext|>``.

The tokenizer itself is a Hugging Face ``tokenizer.json`` run by the `tokenizers` package (the ``whisper``
extra: ``pip install 'asr-transformer[whisper]'``). Transcripts are encoded as Whisper was trained: as written
(case and punctuation kept) after one leading space; scoring still uses the toolkit's text normalizer.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Iterable

from asr_transformer.errors import UserError
from asr_transformer.fileio import atomic_open, write_json
from asr_transformer.text import NormalizerConfig, normalize
from asr_transformer.tokens import NUM_SPECIAL

MODEL_TYPE = "whisper"


class WhisperTokenizerError(UserError, ValueError):
    """A Whisper tokenizer that cannot be read, or the `tokenizers` package missing."""


def _load_tokenizers():
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise WhisperTokenizerError("Whisper models need the `tokenizers` package: "
                                    "pip install 'asr-transformer[whisper]'") from None
    return HFTokenizer


class WhisperTokenizer:
    """Text ↔ toolkit ids for a Whisper model; `vocab_size` counts the model's rows (timestamps included)."""

    model_type = MODEL_TYPE

    def __init__(self, tokenizer_json: bytes, model_vocab: int, prompt: list[int] = (), suppress: list[int] = ()):
        """tokenizer_json: the bytes of a Hugging Face ``tokenizer.json``; model_vocab: Whisper's n_vocab;
        prompt: the toolkit ids the decoder reads before BEGIN; suppress: toolkit ids never to emit."""
        try:
            self.bpe = _load_tokenizers().from_str(tokenizer_json.decode("utf-8"))
        except WhisperTokenizerError:
            raise
        except Exception as e:  # tokenizers raises a plain Exception on a bad file
            raise WhisperTokenizerError(f"not a Hugging Face tokenizer.json ({str(e).splitlines()[0]})") from None
        self.model_bytes = tokenizer_json
        self.model_vocab, self.prompt, self.suppress = model_vocab, list(prompt), list(suppress)
        self.eot = self._special("<|endoftext|>")
        self.normalizer = NormalizerConfig()

    @classmethod
    def from_bytes(cls, model_bytes: bytes, meta: dict) -> "WhisperTokenizer":
        return cls(model_bytes, meta["model_vocab"], meta["prompt"], meta["suppress"])

    def meta(self) -> dict:
        from asr_transformer.data.tokenizer_format import FORMAT, VERSION

        return {"format": FORMAT, "version": VERSION, "model_type": MODEL_TYPE, "model_vocab": self.model_vocab,
                "prompt": self.prompt, "suppress": self.suppress, "normalizer": asdict(self.normalizer)}

    def save(self, directory: str | os.PathLike) -> None:
        """As `asr tokenizer` writes one: tokenizer.model (here Whisper's tokenizer.json) and tokenizer.json (meta)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with atomic_open(directory / "tokenizer.model", "wb") as f:
            f.write(self.model_bytes)
        write_json(directory / "tokenizer.json", self.meta())

    def model_options(self) -> dict:
        """The model options this tokenizer fixes (config.ModelConfig): the vocabulary, the decoder's prompt, and
        the ids it must not emit: the suppressed ones and every id from <|endoftext|> on (END is id 3 here)."""
        return {"vocab_size": self.vocab_size, "decoder_prompt": self.prompt, "suppress_tokens": self.suppress,
                "suppress_from": self.eot + NUM_SPECIAL}

    def _special(self, token: str) -> int:
        found = self.bpe.token_to_id(token)
        if found is None:
            raise WhisperTokenizerError(f"the tokenizer has no {token} token: not a Whisper tokenizer")
        return found

    def whisper_id(self, token: str) -> int | None:
        """Whisper's own id of a token such as ``<|en|>`` (None if it has none)."""
        return self.bpe.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self.model_vocab + NUM_SPECIAL

    @property
    def no_speech(self) -> tuple[int, int] | None:
        """(toolkit ids of <|startoftranscript|> and of the no-speech token: <|nospeech|>, <|nocaptions|> in
        older tokenizers), or None: the decoder's probability of the second right after the first is Whisper's
        no-speech probability (decode/fallback.py)."""
        token = self.whisper_id("<|nospeech|>")
        token = self.whisper_id("<|nocaptions|>") if token is None else token
        start = self.whisper_id("<|startoftranscript|>")
        return None if token is None or start is None else (start + NUM_SPECIAL, token + NUM_SPECIAL)

    def start_ids(self, language: str = "", previous: str = "", room: int = 448) -> list[int]:
        """The toolkit ids the decoder reads before BEGIN: this tokenizer's prompt (<|startoftranscript|>
        [<|lang|> <|transcribe|>]) with `language`'s token in place of the package's (a multilingual model; an
        English-only one takes only "en"), after <|startofprev|> and the last room // 2 − 1 tokens of `previous`
        text (whisper's initial prompt). WhisperTokenizerError for a language the model cannot take."""
        prompt = list(self.prompt)
        if language:
            multilingual = len(prompt) > 1
            token = self.whisper_id(f"<|{language}|>")
            if not multilingual and language != "en":
                raise WhisperTokenizerError(f"language {language}: this Whisper model is English-only (*.en)")
            if multilingual and token is None:
                raise WhisperTokenizerError(f"language {language}: Whisper has no <|{language}|> token")
            if multilingual:
                prompt[1] = token + NUM_SPECIAL
        if previous.strip():
            prompt = ([self._special("<|startofprev|>") + NUM_SPECIAL] + self.encode(previous)[-(room // 2 - 1):]
                      + prompt)
        return prompt

    def normalize(self, text: str) -> str:
        return normalize(text, self.normalizer)

    def encode(self, text: str) -> list[int]:
        """Text as written → toolkit ids of its Whisper pieces (one leading space, as in Whisper's training)."""
        ids = self.bpe.encode(" " + text.strip(), add_special_tokens=False).ids
        return [i + NUM_SPECIAL for i in ids]

    def decode(self, ids: Iterable[int]) -> str:
        """Toolkit ids → text; the toolkit's specials and Whisper's (``<|endoftext|>`` and above) are dropped."""
        pieces = [int(i) - NUM_SPECIAL for i in ids]
        return self.bpe.decode([i for i in pieces if 0 <= i < self.eot]).strip()

    def word_pieces(self, ids: Iterable[int]) -> list[str]:
        """Each id's text, a leading space written "▁" as sentencepiece marks a word start ("▁Hello", ","); ""
        for the specials and the ids from <|endoftext|> on (decode/word_lm.py reads words from these)."""
        texts = []
        for i in ids:
            whisper = int(i) - NUM_SPECIAL
            text = self.bpe.decode([whisper]) if 0 <= whisper < self.eot else ""
            texts.append("▁" + text[1:] if text.startswith(" ") else text)
        return texts

    def pieces(self, ids: Iterable[int]) -> list[str]:
        names = {0: "<blank>", 1: "<unk>", 2: "<sos>", 3: "<eos>", 4: "<mask>"}
        return [names[int(i)] if int(i) < NUM_SPECIAL else (self.bpe.id_to_token(int(i) - NUM_SPECIAL) or "<|ts|>")
                for i in ids]


def decoder_start(tokenizer, language: str, previous: str, room: int) -> list[int]:
    """`tokenizer.start_ids` for a Whisper tokenizer; WhisperTokenizerError for any other, whose model reads no
    prompt and transcribes the language it was trained on."""
    if not isinstance(tokenizer, WhisperTokenizer):
        raise WhisperTokenizerError("language and initial_prompt: only Whisper packages take them (this model "
                                    "transcribes the language it was trained on, and reads no prompt)")
    return tokenizer.start_ids(language, previous, room)
