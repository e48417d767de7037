"""Silero's voice detector (inference/silero_vad.py) as the segmenter of `transcribe`: the wheel's graph read as its
own streaming model reads it, the same segments from a file and a stream, spoken digits found and noise or tones
not, and no text from audio it hears no speech in."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from asr_transformer.data.audio import SAMPLE_RATE, load_audio
from asr_transformer.inference import silero_vad
from asr_transformer.inference.segmenter import VadOptions, iter_segments
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.skipif(not silero_vad.available(), reason="needs the vad extra (silero-vad, onnxruntime)")

FSDD = SHARED_DATA / "fsdd" / "recordings"


def _test_audio(seconds: float = 6.0, seed: int = 0) -> np.ndarray:
    """Something with structure for the network to read: chirps and noise bursts over quiet noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    x = 0.003 * rng.standard_normal(t.size)
    x += 0.2 * np.sin(2 * np.pi * (200 + 300 * t) * t) * (np.sin(2 * np.pi * 0.7 * t) > 0)
    x[SAMPLE_RATE:2 * SAMPLE_RATE] += 0.1 * rng.standard_normal(SAMPLE_RATE)
    return x.astype(np.float32)


def test_the_sequence_graph_gives_the_stock_streaming_models_probabilities():
    """The wheel's per-frame model (state carried by hand, 64 samples of context) and the block-at-once graph that
    the detector runs agree on every frame."""
    import onnxruntime as ort

    stock = ort.InferenceSession(str(silero_vad.model_path().with_name("silero_vad.onnx")),
                                 providers=["CPUExecutionProvider"])
    x = _test_audio()
    frames = x[: len(x) // 512 * 512].reshape(-1, 512)
    state, context, expected = np.zeros((2, 1, 128), np.float32), np.zeros(64, np.float32), []
    for frame in frames:
        out, state = stock.run(None, {"input": np.concatenate([context, frame])[None], "state": state,
                                      "sr": np.array(SAMPLE_RATE, np.int64)})
        context = frame[-64:]
        expected.append(float(out.reshape(-1)[0]))
    ours = silero_vad.SileroDetector().probabilities(frames)
    np.testing.assert_allclose(ours, expected, atol=1e-4)
    assert np.ptp(expected) > 0.01  # the audio moved the network: the comparison says something


def test_a_stream_in_any_blocks_gets_the_probabilities_and_segments_of_the_whole():
    x = _test_audio(12.0, seed=1)
    frames = x[: len(x) // 512 * 512].reshape(-1, 512)
    whole = silero_vad.SileroDetector().probabilities(frames)
    detector, parts, i = silero_vad.SileroDetector(), [], 0
    for size in (1, 7, 300, 3, 9999):
        parts.append(detector.probabilities(frames[i:i + size]))
        i += size
    np.testing.assert_allclose(np.concatenate(parts), whole, atol=1e-6)
    vad = VadOptions("silero", threshold=0.3)
    reference = [(s.start, s.end, s.audio.size) for s in iter_segments(x, vad=vad)]
    rng = np.random.default_rng(0)
    segmenter, streamed, at = vad.segmenter(), [], 0
    while at < x.size:
        block = int(rng.integers(1, 40000))
        streamed += segmenter.push(x[at:at + block])
        at += block
    streamed += segmenter.finish()
    assert [(s.start, s.end, s.audio.size) for s in streamed] == reference


def _digits_noise_tone() -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Three spoken digits (FSDD, three speakers) between silence, loud white noise and a steady tone →
    (audio, the digits' spans in seconds)."""
    names = ["3_jackson_10.wav", "7_theo_20.wav", "5_nicolas_5.wav"]
    if not all((FSDD / n).exists() for n in names):
        pytest.skip(f"{FSDD} not found (set ASR_SHARED_DATA to the folder holding fsdd/)")
    rng = np.random.default_rng(0)
    digits = [load_audio(FSDD / n) for n in names]
    level = max(float(np.sqrt(np.mean(d ** 2))) for d in digits)
    t = np.arange(2 * SAMPLE_RATE) / SAMPLE_RATE
    fillers = [np.zeros(SAMPLE_RATE, np.float32), (level * rng.standard_normal(2 * SAMPLE_RATE)).astype(np.float32),
               (level * np.sqrt(2) * np.sin(2 * np.pi * 440 * t)).astype(np.float32), np.zeros(SAMPLE_RATE, np.float32)]
    parts, spans, at = [fillers[0]], [], len(fillers[0])
    for digit, filler in zip(digits, fillers[1:]):
        spans.append((at / SAMPLE_RATE, (at + digit.size) / SAMPLE_RATE))
        parts += [digit, filler]
        at += digit.size + filler.size
    return np.concatenate(parts), spans


def test_silero_finds_spoken_digits_and_not_noise_or_a_tone():
    x, spans = _digits_noise_tone()
    segments = list(iter_segments(x, vad=VadOptions("silero")))
    assert len(segments) == len(spans), [(s.start, s.end) for s in segments]
    for segment, (start, end) in zip(segments, spans):
        assert start - 0.1 <= segment.start and segment.end <= end + 0.1  # inside its digit, not the filler
        assert segment.end - segment.start >= 0.5 * (end - start)


@pytest.fixture(scope="module")
def talker(tiny_package, tmp_path_factory) -> Path:
    """The tiny package made to write "o" for anything it hears (its CTC head never prefers blank), so every
    segment decoded shows in the transcript."""
    import torch

    from asr_transformer.package import load_package, save_package
    from asr_transformer.tokens import BLANK

    model, tok, cfg = load_package(tiny_package / "model.pt")
    with torch.no_grad():
        model.ctc.proj.bias.zero_()
        model.ctc.proj.bias[BLANK] = -30.0
        model.ctc.proj.bias[tok.sp.piece_to_id("o")] = 30.0
    cfg.decode.vad, cfg.decode.mode = "auto", "ctc"
    path = tmp_path_factory.mktemp("talker") / "model.pt"
    save_package(path, cfg, tok, model.state_dict())
    return path


def test_audio_without_speech_gives_no_text_with_silero_and_all_pieces_with_none(talker):
    """Loud noise: Silero hears no speech, so nothing is decoded (a warning says so); `vad none` decodes all of it,
    in pieces of the longest segment."""
    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.inference.transcribe import NoSpeechWarning

    noise = (0.1 * np.random.default_rng(3).standard_normal(25 * SAMPLE_RATE)).astype(np.float32)
    with pytest.warns(NoSpeechWarning, match="Silero.*found no speech in 25.0 s.*nothing decoded"):
        result = Recognizer(talker, device="cpu", threads=1, vad="silero").transcribe(noise)
    assert result == {"text": "", "segments": [], "duration": 25.0}
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoSpeechWarning)
        rec = Recognizer(talker, device="cpu", threads=1, vad="none")
        pieces = rec.transcribe(noise, max_segment=10.0)
    assert [(s["start"], s["end"], s["text"]) for s in pieces["segments"]] == [
        (0.0, 10.0, "o"), (10.0, 20.0, "o"), (20.0, 25.0, "o")]


def test_the_cli_takes_the_detector_and_its_knobs(talker, tmp_path):
    import soundfile as sf
    from typer.testing import CliRunner

    from asr_transformer.cli import app

    x, _ = _digits_noise_tone()
    sf.write(tmp_path / "d.wav", x, SAMPLE_RATE)
    base = ["transcribe", str(tmp_path / "d.wav"), "-m", str(talker), "--threads", "1", "-f", "json"]
    import json

    found = {}
    for option in (["--vad", "silero"], ["--vad", "silero", "--min-silence", "10"], ["--vad", "energy"]):
        out = CliRunner().invoke(app, base + option)
        assert out.exit_code == 0, out.output
        found[" ".join(option)] = [(s["start"], s["end"]) for s in json.loads(out.stdout)["segments"]]
    assert len(found["--vad silero"]) == 3
    assert len(found["--vad silero --min-silence 10"]) == 1  # no pause long enough: one segment, digit to digit
    assert found["--vad silero --min-silence 10"][0][0] == found["--vad silero"][0][0]
    # levels alone: the noise and the tone count as speech, joining the digits into one stretch
    assert sum(end - start for start, end in found["--vad energy"]) > 4.0


def test_a_pause_shorter_than_min_silence_keeps_one_segment_and_a_longer_one_splits():
    """The segmenter's rule in seconds holds with Silero's 32-ms frames: two digits 0.15 s apart are one segment,
    a third 0.8 s later is another."""
    names = ["1_george_3.wav", "2_george_3.wav", "4_george_3.wav"]
    if not all((FSDD / n).exists() for n in names):
        pytest.skip(f"{FSDD} not found (set ASR_SHARED_DATA to the folder holding fsdd/)")
    a, b, c = (load_audio(FSDD / n) for n in names)
    gap = lambda seconds: np.zeros(round(seconds * SAMPLE_RATE), np.float32)  # noqa: E731
    x = np.concatenate([gap(0.5), a, gap(0.15), b, gap(0.8), c, gap(0.5)])
    segments = list(iter_segments(x, vad=VadOptions("silero", min_silence=0.3)))
    assert len(segments) == 2, [(s.start, s.end) for s in segments]
    second_starts = (0.5 + (a.size + b.size) / SAMPLE_RATE + 0.15 + 0.8)
    assert segments[0].end < second_starts <= segments[1].start + 0.1


# ------------------------------------------------------------------ no words from non-speech, every package kind

def _non_speech() -> dict[str, np.ndarray]:
    """Six seconds each of digital silence, loud white noise and a steady tone."""
    t = np.arange(6 * SAMPLE_RATE) / SAMPLE_RATE
    return {"silence": np.zeros(t.size, np.float32),
            "noise": (0.1 * np.random.default_rng(7).standard_normal(t.size)).astype(np.float32),
            "tone": (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)}


@pytest.fixture(scope="module")
def streaming_talker(streaming_package, tmp_path_factory) -> Path:
    """The streaming package made to write "o" for anything it hears, with the package's default detector."""
    import torch

    from asr_transformer.package import load_package, save_package
    from asr_transformer.tokens import BLANK

    root, _ = streaming_package
    model, tok, cfg = load_package(root / "model.pt")
    with torch.no_grad():
        model.ctc.proj.bias.zero_()
        model.ctc.proj.bias[BLANK] = -30.0
        model.ctc.proj.bias[tok.sp.piece_to_id("o")] = 30.0
    cfg.decode.vad = "auto"
    path = tmp_path_factory.mktemp("streaming_talker") / "model.pt"
    save_package(path, cfg, tok, model.state_dict())
    return path


@pytest.fixture(scope="module")
def whisper_package(tmp_path_factory) -> Path:
    """A random Whisper (a 3-s window) imported as a package with the default detector."""
    pytest.importorskip("tokenizers")
    import torch

    from asr_transformer.whisper import import_whisper
    from tests.whisper_reference import Dims, Whisper, make_tokenizer, write_openai

    tmp = tmp_path_factory.mktemp("whisper_vad")
    tokenizer, special = make_tokenizer(tmp)
    torch.manual_seed(0)
    whisper = Whisper(Dims(n_vocab=special["<|notimestamps|>"] + 4, n_audio_ctx=150))
    import_whisper(write_openai(whisper, tmp / "tiny.pt"), tmp / "model.pt", tokenizer_json=tokenizer,
                   pad_to_seconds=0)
    return tmp / "model.pt"


def _streamed(package: Path, wave: np.ndarray, block: float = 0.1, **options) -> list:
    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.inference.streaming import stream_file

    rec = Recognizer(package, device="cpu", threads=1, **options)
    return list(stream_file(rec, wave, chunk_ms=320, block_seconds=block))


def test_silence_noise_and_a_tone_give_no_text_with_every_package_kind(talker, streaming_talker, whisper_package,
                                                                        tmp_path):
    """A package that writes for anything it hears, its ONNX export, a Whisper package and a streaming package
    each give no text for silence, noise or a tone under the default detector (Silero); without one (`vad none`,
    or the energy detector for the stream) the same audio gives text, so each check could fail."""
    from asr_transformer.inference.export import export_package
    from asr_transformer.inference.exported import ExportedRecognizer
    from asr_transformer.inference.recognizer import Recognizer

    export_package(talker, tmp_path / "onnx")
    offline = {"package": lambda **o: Recognizer(talker, device="cpu", threads=1, **o),
               "export": lambda **o: ExportedRecognizer(tmp_path / "onnx", threads=1, **o),
               "whisper": lambda **o: Recognizer(whisper_package, device="cpu", threads=1, mode="greedy",
                                                 no_speech_threshold=1.0, **o)}
    for name, wave in _non_speech().items():
        for kind, make in offline.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert make().transcribe(wave)["text"] == "", (kind, name)
                if name != "silence":  # digital silence is never decoded, whatever the detector
                    assert make(vad="none").transcribe(wave)["text"] != "", (kind, name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert _streamed(streaming_talker, wave) == [], name  # not even a partial
            assert any(e.kind == "final" and e.text for e in _streamed(streaming_talker, wave, vad="energy")), name


def test_a_gated_stream_gives_finals_where_there_is_speech_and_the_same_for_any_blocks(streaming_talker):
    """Spoken digits between noise and a tone: the stream's finals lie on the digits (none on the fillers), and
    blocks of 0.1 s, 0.37 s or all at once give the same finals."""
    x, spans = _digits_noise_tone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        finals = {block: [(e.start, e.end, e.text) for e in _streamed(streaming_talker, x, block)
                          if e.kind == "final"] for block in (0.1, 0.37, 100.0)}
    assert finals[0.1] == finals[0.37] == finals[100.0]
    assert len(finals[0.1]) == len(spans), finals[0.1]
    for (start, end, text), (a, b) in zip(finals[0.1], spans):
        assert text and a - 0.4 <= start and end <= b + 1.2  # on its digit, not the noise or tone after it


def test_a_voice_gate_forgets_what_no_later_question_reaches_and_answers_the_same():
    """VoiceGate.forget drops the flags before an utterance's start (a stream of hours keeps its current
    utterance's only); questions about later stretches get the answers they got before, earlier ones an error."""
    from asr_transformer.inference.energy_vad import EnergyDetector
    from asr_transformer.inference.voice_gate import VoiceGate

    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    tone = (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    x = np.concatenate([tone, np.zeros(SAMPLE_RATE, np.float32)] * 3)
    gate = VoiceGate(EnergyDetector())
    for i in range(0, x.size, 1234):
        gate.push(x[i:i + 1234])
    gate.finish()
    spans = [(2 * SAMPLE_RATE + k * 4000, 2 * SAMPLE_RATE + k * 4000 + 12000) for k in range(8)]
    before = [(gate.heard(a, b), gate.quiet(a, b)) for a, b in spans]
    held = gate._flags.size
    gate.forget(2 * SAMPLE_RATE)
    assert gate._flags.size == held - 2 * SAMPLE_RATE // gate.frame
    assert [(gate.heard(a, b), gate.quiet(a, b)) for a, b in spans] == before
    assert any(h for h, _ in before) and any(not h for h, _ in before)  # tone and silence both asked about
    with pytest.raises(ValueError, match="forgotten"):
        gate.heard(0, SAMPLE_RATE)
