"""decode.numbers: numbers written as words or digits, whatever the model wrote, and a clear error otherwise."""

import pytest

from asr_transformer.numerals import cardinal, ordinal, spell_numbers


@pytest.mark.parametrize("n, words", [(0, "zero"), (13, "thirteen"), (40, "forty"), (99, "ninety-nine"),
                                      (101, "one hundred and one"), (1000, "one thousand"),
                                      (2024, "two thousand and twenty-four"),
                                      (1_000_215, "one million two hundred and fifteen"),
                                      (7_000_000_000, "seven billion")])
def test_cardinals(n, words):
    assert cardinal(n) == words


@pytest.mark.parametrize("n, words", [(1, "first"), (2, "second"), (3, "third"), (5, "fifth"), (12, "twelfth"),
                                      (20, "twentieth"), (21, "twenty-first"), (100, "one hundredth")])
def test_ordinals(n, words):
    assert ordinal(n) == words


def test_numbers_in_text_become_words_and_digits():
    text = "In 1465 they paid $3.50 for the 2nd of 1,000 copies, 2.5 each; version 2.0.1, A4, 1900."
    assert spell_numbers(text, "words") == (
        "In fourteen sixty-five they paid three dollars and fifty cents for the second of one thousand copies, "
        "two point five each; version 2.0.1, A4, one thousand nine hundred.")
    assert spell_numbers("Fifteen men read two hundred and five books.", "digits") == "15 men read 205 books."
    assert spell_numbers(text, "") == text
    with pytest.raises(ValueError, match="roman"):
        spell_numbers(text, "roman")


def test_recognizer_refuses_an_unknown_style(tiny_package):
    from asr_transformer.decode.search import DecodeError
    from asr_transformer.inference.recognizer import Recognizer

    with pytest.raises(DecodeError, match="decode.numbers='roman': must be digits, words"):
        Recognizer(tiny_package / "model.pt", device="cpu", threads=1, numbers="roman")
    rec = Recognizer(tiny_package / "model.pt", device="cpu", threads=1, numbers="words")
    assert rec.options.numbers == "words"
