import random
import unicodedata

import pytest

from asr_transformer.text import NormalizerConfig, normalize

CFG = NormalizerConfig()


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Hello, World!", "hello world"),
        ("twenty-one", "twenty one"),
        ("Don't stop — twenty-one, OK?!", "don't stop twenty one ok"),
        ("It’s the cats’ toys", "it's the cats toys"),  # typographic apostrophe; trailing one dropped
        ("'quoted' words", "quoted words"),
        ("  many \t spaces\n\nhere  ", "many spaces here"),
        ("ﬁne Ｆｕｌｌｗｉｄｔｈ", "fine fullwidth"),  # NFKC folds ligatures and full-width forms
        ("Café ÉCOLE", "café école"),
        ("a+b=c $5 50% #1", "a b c 5 50 1"),  # symbols too
        ("snake_case", "snake case"),
        ("", ""),
        ("?!...", ""),
    ],
)
def test_examples(raw, expected):
    assert normalize(raw, CFG) == expected


def test_options():
    assert normalize("Don't-Stop", NormalizerConfig(lowercase=False)) == "Don't Stop"
    assert normalize("don't", NormalizerConfig(keep_apostrophes=False)) == "don t"
    assert normalize("Hi, there", NormalizerConfig(remove_punctuation=False)) == "hi, there"
    assert normalize(" a  b ", NormalizerConfig(collapse_whitespace=False)) == "a  b"
    assert normalize("ﬁ", NormalizerConfig(unicode_form=None)) == "ﬁ"
    decomposed = normalize("é", NormalizerConfig(unicode_form="NFD"))
    assert decomposed == unicodedata.normalize("NFD", "é")


def _random_text(rng: random.Random) -> str:
    ranges = [(0x20, 0x7F), (0xA0, 0x250), (0x300, 0x370), (0x370, 0x530), (0x600, 0x700),
              (0x1D00, 0x1DC0), (0x2000, 0x2200), (0x3000, 0x3100), (0xAC00, 0xAC40),
              (0xFB00, 0xFB50), (0xFF00, 0xFFF0), (0x1F300, 0x1F350), (0x0, 0x20)]
    tricky = "ab 'c-d.,’ʼİẞ_\u00b4"
    out = []
    for _ in range(rng.randint(0, 24)):
        if rng.random() < 0.5:
            lo, hi = rng.choice(ranges)
            out.append(chr(rng.randrange(lo, hi)))
        else:
            out.append(rng.choice(tricky))
    return "".join(out)


@pytest.mark.parametrize(
    "cfg",
    [
        NormalizerConfig(),
        NormalizerConfig(lowercase=False),
        NormalizerConfig(keep_apostrophes=False),
        NormalizerConfig(remove_punctuation=False),
        NormalizerConfig(collapse_whitespace=False),
        NormalizerConfig(unicode_form="NFC"),
        NormalizerConfig(unicode_form=None),
    ],
)
def test_idempotent_on_random_unicode(cfg):
    rng = random.Random(1234)
    for _ in range(2000):
        text = _random_text(rng)
        once = normalize(text, cfg)
        assert normalize(once, cfg) == once, repr(text)


def test_default_output_has_no_punctuation_or_extra_spaces():
    rng = random.Random(7)
    for _ in range(1000):
        out = normalize(_random_text(rng), CFG)
        assert out == out.strip() and "  " not in out
        for i, ch in enumerate(out):
            if unicodedata.category(ch)[0] in "PS":
                # only an apostrophe between two letters/digits survives
                assert ch == "'" and out[i - 1].isalnum() and out[i + 1].isalnum(), repr(out)


def test_dict_round_trip():
    cfg = NormalizerConfig(lowercase=False, unicode_form="NFC")
    d = cfg.to_dict()
    assert d["format_version"] == 1
    assert NormalizerConfig.from_dict(d) == cfg
    assert NormalizerConfig.from_dict({}) == NormalizerConfig()


def test_from_dict_rejects_unknown_keys_and_newer_versions():
    with pytest.raises(ValueError, match="lowercaze"):
        NormalizerConfig.from_dict({"lowercaze": True})
    with pytest.raises(ValueError, match="format_version"):
        NormalizerConfig.from_dict({"format_version": 99})
