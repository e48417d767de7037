import pytest

from asr_transformer.data.tokenizer import Tokenizer, train_tokenizer
from asr_transformer.text import NormalizerConfig
from asr_transformer.tokens import BLANK, EOS, MASK, SOS, UNK

TEXTS = ["Hello, World!", "The quick brown fox jumps over the lazy dog.", "Don't stop me now",
         "twenty-one pilots", "A B C D E F G"] * 30


@pytest.mark.parametrize("model_type", ["unigram", "bpe", "char"])
def test_special_ids_and_round_trip(tmp_path, model_type):
    tok = train_tokenizer(TEXTS, tmp_path / model_type, vocab_size=60, model_type=model_type)
    assert tok.pieces([BLANK, UNK, SOS, EOS, MASK]) == ["<blank>", "<unk>", "<sos>", "<eos>", "<mask>"]
    for text in TEXTS[:5]:
        ids = tok.encode(text)
        assert ids and min(ids) > MASK
        assert tok.decode(ids) == tok.normalize(text)
    assert tok.decode([SOS] + tok.encode("hello") + [EOS, BLANK]) == "hello"
    again = Tokenizer(tmp_path / model_type)
    assert again.encode("quick fox") == tok.encode("quick fox")
    packed = Tokenizer.from_bytes(tok.model_bytes, tok.meta())
    assert packed.encode("Quick, FOX!") == tok.encode("quick fox")


def test_char_vocabulary_is_the_characters(tmp_path):
    tok = train_tokenizer(["abc cab", "bca"], tmp_path, model_type="char")
    assert sorted(tok.pieces(range(5, tok.vocab_size))) == sorted(["▁", "a", "b", "c"])


def test_normalizer_is_saved_with_the_tokenizer(tmp_path):
    tok = train_tokenizer(TEXTS, tmp_path, vocab_size=40, normalizer=NormalizerConfig(lowercase=False))
    assert Tokenizer(tmp_path).normalize("Hello") == "Hello"
    assert tok.normalizer.lowercase is False


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="no text"):
        train_tokenizer(["...", ""], tmp_path)
    with pytest.raises(ValueError, match="model type"):
        train_tokenizer(TEXTS, tmp_path, model_type="word")
    with pytest.raises(FileNotFoundError, match="asr tokenizer"):
        Tokenizer(tmp_path / "none")
