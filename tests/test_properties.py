"""Property-based tests (hypothesis): whatever bytes, lines, values or arrays a user hands over, the readers, the
parsers, `score`, the Recognizer, the stream and `asr transcribe` answer with a result or a UserError naming what
is wrong: never another exception, never a result for what is not valid, never a file outside the output folder.
"""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import soundfile as sf
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from asr_transformer.errors import UserError

FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# the test below keeps only inputs that mix good and bad files (`assume`), so most draws are filtered out
FILTERED = settings(FEW, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
MANY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def wav_bytes(seconds: float = 0.3, rate: int = 16000, subtype: str = "PCM_16", fmt: str = "WAV") -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buffer = io.BytesIO()
    sf.write(buffer, (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), rate, subtype=subtype, format=fmt)
    return buffer.getvalue()


GOOD = [wav_bytes(), wav_bytes(rate=22050, subtype="FLOAT"), wav_bytes(fmt="FLAC", subtype="PCM_16")]


@st.composite
def damaged_audio(draw) -> bytes:
    """A real audio file cut short, with bytes overwritten, inserted or dropped, or random bytes."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=400))
    data = bytearray(draw(st.sampled_from(GOOD)))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, max(0, len(data) - 1)))
        action = draw(st.sampled_from(["set", "insert", "drop", "cut"]))
        if action == "set" and data:
            data[at] = draw(st.integers(0, 255))
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif action == "drop":
            del data[at:at + draw(st.integers(1, 64))]
        else:
            del data[at:]
    return bytes(data)


def is_good_audio(samples) -> bool:
    return samples.dtype == np.float32 and samples.ndim == 1 and samples.size > 0 and np.isfinite(samples).all()


@MANY
@given(damaged_audio())
def test_audio_readers_give_samples_or_an_audio_error(data):
    from asr_transformer.data.audio import AudioError, load_audio
    from asr_transformer.data.audio_stream import stream_audio

    for read in (lambda: load_audio(data, allow_silent=True), lambda: np.concatenate(list(stream_audio(data)))):
        try:
            samples = read()
        except AudioError as e:
            assert str(e).startswith("<bytes>: ")
            continue
        assert is_good_audio(samples)


arrays = st.one_of(
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=300).map(
        lambda v: np.array(v, dtype=np.float32)),
    st.tuples(st.integers(1, 2000), st.integers(1, 12), st.sampled_from([np.float32, np.float64, np.int16, np.int32,
                                                                          np.uint8, bool, complex]))
    .map(lambda s: (np.random.default_rng(s[0]).standard_normal((s[0], s[1])) * 0.3).astype(s[2])),
    st.integers(0, 3).map(lambda d: np.zeros((2,) * d, np.float32)),
    st.sampled_from([None, "text", [0.1, 0.2], 3.0]),
)


@MANY
@given(arrays)
def test_arrays_pass_one_gate(array):
    from asr_transformer.data.audio import AudioError, checked_samples

    try:
        samples = checked_samples(array, "array 0")
    except AudioError as e:
        assert str(e).startswith("array 0: ")
        return
    assert is_good_audio(samples) and np.abs(samples).max() <= 100.0


@MANY
@given(st.lists(st.one_of(st.text(max_size=80), st.sampled_from([
    '{"id": "a", "audio": "a.wav", "duration": 1.0, "text": "hi"}', '{"id": "a", "audio": 3, "text": "hi"}',
    '{"format": "asr-manifest", "version": 1}', '{"id": "", "audio": "x.wav", "text": null}', "[1, 2]", "{}",
    '{"audio_filepath": "x.wav", "duration": "long", "text": "t"}'])), max_size=6))
def test_manifest_lines_give_utterances_or_an_error_naming_the_line(tmp_path_factory, lines):
    from asr_transformer.data.manifest import read_manifest

    path = tmp_path_factory.mktemp("m") / "m.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    try:
        utts = read_manifest(path)
    except UserError as e:
        assert str(path) in str(e)
        return
    assert all(u.id and isinstance(u.audio, str) and isinstance(u.text, str) for u in utts)


config_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(-10, 10),
                                       st.text(max_size=8)), lambda inner: st.lists(inner, max_size=3), max_leaves=4)
config_keys = st.sampled_from(["model.d_model", "model.heads", "model.block", "model.conv_kernel", "train.lr",
                               "train.max_epochs", "decode.beam", "decode.ctc_weight", "decode.mode", "data.max_duration",
                               "features.num_mel_bins", "augment.speed_factors", "model.nonsense", "nothing"])


@MANY
@given(st.dictionaries(config_keys, config_values, max_size=4))
def test_config_overrides_give_a_checked_config_or_a_config_error(overrides):
    import yaml

    from asr_transformer.config import ConfigError, load_config, validate

    items = [f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"
             for key, value in overrides.items()]
    try:
        cfg = load_config(None, items)
    except ConfigError:
        return
    validate(cfg)  # what was taken is in range


@MANY
@given(st.lists(st.text(alphabet="ab c\t(\n)é1", max_size=30), max_size=5),
       st.lists(st.text(alphabet="ab c\t(\n)é1", max_size=30), max_size=5))
def test_score_gives_a_report_or_an_error_naming_the_file(tmp_path_factory, refs, hyps):
    from asr_transformer.scoring import score_files
    from asr_transformer.text import text_normalizer

    folder = tmp_path_factory.mktemp("s")
    (folder / "ref").write_text("\n".join(refs), encoding="utf-8")
    (folder / "hyp").write_text("\n".join(hyps), encoding="utf-8")
    try:
        report, _ = score_files(folder / "ref", folder / "hyp", text_normalizer("toolkit"))
    except UserError as e:
        assert str(folder) in str(e)
        return
    assert report.wer >= 0 and report.cer >= 0


@pytest.fixture(scope="module")
def recognizer(tiny_package):
    from asr_transformer.inference.recognizer import Recognizer

    return Recognizer(tiny_package / "model.pt", device="cpu", threads=1, mode="ctc")


@FEW
@given(st.one_of(arrays, damaged_audio()))
def test_the_recognizer_transcribes_audio_or_says_what_is_wrong(recognizer, audio):
    try:
        result = recognizer.transcribe(audio)
    except UserError:  # AudioError naming the audio, or DecodeError naming what transcribe takes
        return
    assert isinstance(result["text"], str) and result["duration"] > 0


@FEW
@given(arrays)
def test_recognize_arrays_decodes_audio_or_names_the_array(recognizer, array):
    from asr_transformer.data.audio import AudioError

    try:
        texts = recognizer.recognize_arrays([array])
    except AudioError as e:
        assert str(e).startswith("array 0: ")
        return
    assert len(texts) == 1 and isinstance(texts[0], str)


@FEW
@given(st.lists(arrays, min_size=1, max_size=4))
def test_a_stream_takes_audio_or_names_it(streaming_recognizer, blocks):
    from asr_transformer.data.audio import AudioError
    from asr_transformer.inference.streaming import StreamingRecognizer

    stream = StreamingRecognizer(streaming_recognizer, chunk_ms=160)
    for block in blocks:
        try:
            events = stream.feed(block)
        except AudioError as e:
            assert str(e).startswith("stream: ")
            continue
        assert all(isinstance(e.text, str) for e in events)
    assert all(isinstance(e.text, str) for e in stream.finish())


@pytest.fixture(scope="module")
def streaming_recognizer(streaming_package):
    from asr_transformer.inference.recognizer import Recognizer

    return Recognizer(streaming_package[0] / "model.pt", device="cpu", threads=1)


@FILTERED
@given(st.lists(damaged_audio(), min_size=1, max_size=3))
def test_transcribe_touches_nothing_outside_its_output_folder(tiny_package, tmp_path_factory, files):
    """`asr transcribe` on damaged files: exit 1 when any input is bad, every good one transcribed, and nothing
    written but files in --out."""
    from typer.testing import CliRunner

    from asr_transformer.cli import app
    from asr_transformer.data.audio import AudioError, load_audio

    folder = tmp_path_factory.mktemp("t")
    inputs = []
    for i, data in enumerate(files):
        (folder / f"in{i}.wav").write_bytes(data)
        inputs.append(str(folder / f"in{i}.wav"))
    before = {p: p.stat().st_mtime_ns for p in folder.iterdir()}
    result = CliRunner().invoke(app, ["transcribe", *inputs, "-m", str(tiny_package / "model.pt"), "-o",
                                      str(folder / "out"), "-f", "json", "--threads", "1", "--mode", "ctc"])
    good = []
    for path in inputs:
        try:
            load_audio(path, allow_silent=True)
            good.append(path)
        except AudioError:
            pass
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == (0 if len(good) == len(inputs) else 1), result.output
    assert {p: p.stat().st_mtime_ns for p in folder.iterdir() if p.name != "out"} == before
    written = sorted(os.listdir(folder / "out")) if (folder / "out").exists() else []
    assume(len(good) == len(inputs) or written != [])  # the interesting case: some good, some bad
    assert len(written) <= len(inputs)
