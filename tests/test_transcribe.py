"""transcribe: streaming reader, silence segmentation, batched decoding, the `asr transcribe` command, and
bounded memory on a 30-minute file. The model is a tiny random-weights package whose CTC head is biased
so that greedy CTC says "a" for every segment (deterministic text without training)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asr_transformer.config import Config, apply_preset
from asr_transformer.data.audio import AudioError, load_audio, resample
from asr_transformer.data.tokenizer import train_tokenizer
from asr_transformer.model.asr import ASRModel
from asr_transformer.package import load_package, save_package
from asr_transformer.inference.recognizer import Recognizer
from asr_transformer.tokens import BLANK, EOS
from asr_transformer.data.audio_stream import stream_audio
from asr_transformer.inference.segmenter import Segmenter, VadOptions, iter_segments
from asr_transformer.inference.transcribe import NoSpeechWarning
from tests.conftest import ALPHABET, speak

SR = 16000
SENTENCES = ["a cab", "bad dab", "add a bead", "cede a deed", "be ace"]


def tone(seconds: float, freq: float = 440.0, amp: float = 0.3) -> np.ndarray:
    """A sine with 10 ms fades (crisp boundaries for the segmentation checks)."""
    t = np.arange(int(round(seconds * SR))) / SR
    x = amp * np.sin(2 * np.pi * freq * t)
    r = int(0.01 * SR)
    x[:r] *= np.linspace(0, 1, r)
    x[-r:] *= np.linspace(1, 0, r)
    return x.astype(np.float32)


def tones_with_silences(durations, gap: float = 1.0, lead: float = 0.5, seed: int = 0):
    """Tones separated by `gap` s of near-silence (noise at 0.003), → (signal, [(start, end)])."""
    parts, truth, t = [np.zeros(int(lead * SR), np.float32)], [], lead
    for i, d in enumerate(durations):
        parts.append(tone(d, 300.0 + 150 * i))
        truth.append((t, t + d))
        t += d
        parts.append(np.zeros(int(gap * SR), np.float32))
        t += gap
    x = np.concatenate(parts)
    rng = np.random.default_rng(seed)
    return x + 0.003 * rng.standard_normal(x.size).astype(np.float32), truth


def babble(seconds: float, seed: int = 0) -> np.ndarray:
    """Speech-like audio without any pause: 0.2 s tones of random pitch and loudness, back to back."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(0.2 * SR)) / SR
    pieces = [rng.uniform(0.1, 0.4) * np.sin(2 * np.pi * rng.uniform(200, 2000) * t) for _ in range(int(seconds / 0.2))]
    x = np.concatenate(pieces).astype(np.float32)
    return x + 0.003 * rng.standard_normal(x.size).astype(np.float32)


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """A tiny random-weights model package; its CTC head always prefers 'a' (never blank)."""
    root = tmp_path_factory.mktemp("package")
    tok = train_tokenizer(SENTENCES, root / "tokenizer", model_type="char")
    cfg = Config()
    apply_preset(cfg.model, "tiny")
    cfg.model.vocab_size = tok.vocab_size
    cfg.decode.max_len_ratio = 0.1  # random decoders stop early
    cfg.decode.beam = 2
    cfg.decode.vad = "energy"  # tones, not speech: Silero's detector hears none
    torch.manual_seed(0)
    model = ASRModel(cfg.model)
    with torch.no_grad():
        model.ctc.proj.bias.zero_()
        model.ctc.proj.bias[BLANK] = -30.0
        model.ctc.proj.bias[tok.sp.piece_to_id("a")] = 30.0
        model.decoder.output.bias[EOS] = 5.0
    path = root / "model.pt"
    save_package(path, cfg, tok, model.state_dict())
    return path


def write_wav(path: Path, x: np.ndarray, rate: int = SR) -> Path:
    sf.write(path, x, rate, subtype="PCM_16")
    return path


# ------------------------------------------------------------------------------ reading, segmenting


def test_stream_resamples_like_whole_file(tmp_path):
    x, _ = tones_with_silences([0.7, 1.2], gap=0.5)
    for rate in (44100, 8000, 22051):  # 22,051 Hz: the sinc resampler's path, whose reach is its own
        stereo = np.stack([resample(x, SR, rate), 0.5 * resample(x, SR, rate)], axis=1)
        path = tmp_path / f"s{rate}.flac"
        sf.write(path, stereo, rate, subtype="PCM_24")
        streamed = np.concatenate(list(stream_audio(path, block_seconds=0.37)))
        whole = load_audio(path)
        assert streamed.shape == whole.shape
        np.testing.assert_allclose(streamed, whole, atol=1e-5)


def test_a_transcription_opens_its_file_once(package, tmp_path):
    """`transcribe` reads the header (duration, truncation check) and the samples through one open file, and
    the no-speech fallback reads it again from the start through the same one."""
    import sys

    x, _ = tones_with_silences([0.8, 1.0])
    steady = (0.05 * np.random.default_rng(0).standard_normal(3 * SR)).astype(np.float32)  # sound, no speech
    speech, noise = write_wav(tmp_path / "speech.wav", x), write_wav(tmp_path / "noise.wav", steady)
    opened = []
    folder = str(tmp_path)
    sys.addaudithook(lambda event, args: opened.append(str(args[0]))
                     if event == "open" and str(args[0]).startswith(folder) else None)
    rec = ctc_recognizer(package)
    for path, fallback in ((speech, False), (noise, True)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = rec.transcribe(path, progress=lambda *a: None)
        assert any(isinstance(w.message, NoSpeechWarning) for w in caught) == fallback
        assert opened.count(str(path)) == 1, (path, opened.count(str(path)))
        assert result["duration"] == pytest.approx(sf.info(path).duration, abs=0.01)


def test_segments_split_at_silences():
    x, truth = tones_with_silences([1.0, 2.5, 0.4, 3.0, 1.5])
    segments = list(iter_segments(x, max_segment=20.0))
    assert len(segments) == len(truth)
    for seg, (start, end) in zip(segments, truth):
        assert abs(seg.start - start) <= 0.1 and abs(seg.end - end) <= 0.1, (seg.start, seg.end, start, end)
        # the decoded audio covers the speech, with at most 0.2 s of context each side
        assert seg.audio_start <= seg.start and seg.start - seg.audio_start <= 0.2 + 1e-9
        assert seg.audio_start + len(seg.audio) / SR >= seg.end


def test_segmentation_does_not_depend_on_block_size():
    x, _ = tones_with_silences([1.0, 2.5, 0.4, 3.0], gap=0.6)
    whole = Segmenter(max_segment=20.0)
    a = whole.push(x) + whole.finish()
    pieces = Segmenter(max_segment=20.0)
    b = []
    for i in range(0, x.size, 7919):  # odd block size: partial frames at every boundary
        b += pieces.push(x[i:i + 7919])
    b += pieces.finish()
    assert [(s.start, s.end) for s in a] == [(s.start, s.end) for s in b]


def test_a_burst_shorter_than_min_speech_is_no_segment():
    """A 0.15-s tone between silences is a click to the default (0.25 s, Silero's own) and speech to 0.1 s; the
    0.6-s tone after it is speech to both."""
    x, truth = tones_with_silences([0.15, 0.6], gap=1.0)
    found = lambda **kw: [(round(s.start, 1), round(s.end, 1)) for s in iter_segments(x, **kw)]  # noqa: E731
    default = found()
    assert len(default) == 1 and abs(default[0][0] - truth[1][0]) <= 0.1
    assert len(found(vad=VadOptions("energy", min_speech=0.1))) == 2


def test_silence_and_steady_noise_give_no_segments():
    rng = np.random.default_rng(1)
    assert list(iter_segments(np.zeros(10 * SR, np.float32))) == []
    assert list(iter_segments((0.01 * rng.standard_normal(30 * SR)).astype(np.float32))) == []


def test_long_stretch_without_silence_is_cut():
    x = np.concatenate([np.zeros(SR, np.float32), babble(50.0), np.zeros(SR, np.float32)])
    segments = list(iter_segments(x, max_segment=10.0))
    assert len(segments) >= 5
    for seg in segments:
        assert seg.end - seg.start <= 10.0 + 1e-9
        assert len(seg.audio) / SR <= 10.0 + 0.2 + 1e-9  # forced cuts add no context at the cut
    for a, b in zip(segments, segments[1:]):
        assert b.start == pytest.approx(a.end)  # cut without overlap or gap
        assert a.end - a.start >= 8.0 - 1e-9  # cut within the last 2 s before the limit
    assert segments[0].start == pytest.approx(1.0, abs=0.05)
    assert segments[-1].end == pytest.approx(51.0, abs=0.05)


# ------------------------------------------------------------------------------------- transcribe


def ctc_recognizer(package, **options):
    return Recognizer(package, device="cpu", threads=1, mode="ctc", batch_size=2, **options)


def test_transcribe_gives_segments_and_text(package):
    x, truth = tones_with_silences([1.0, 2.0, 0.6])
    seen = []
    result = ctc_recognizer(package).transcribe(x, progress=lambda *a: seen.append(a))
    assert result["duration"] == pytest.approx(x.size / SR)
    assert [s["text"] for s in result["segments"]] == ["a"] * 3
    assert result["text"] == "a a a"
    for seg, (start, end) in zip(result["segments"], truth):
        assert abs(seg["start"] - start) <= 0.1 and abs(seg["end"] - end) <= 0.1
        assert isinstance(seg["score"], float) and seg["score"] <= 0.0
    assert seen[-1][0] == pytest.approx(result["duration"]) and seen[-1][2] == 3


def test_speaker_cmn_model_normalizes_by_the_files_running_mean(package, monkeypatch):
    """A file is one speaker: each batch gets the mean of the file's segments decoded so far, its own included."""
    import asr_transformer.inference.recognizer as recognizer
    from asr_transformer.data.features import fbank

    rec = ctc_recognizer(package)
    cfg = rec.config
    x, _ = tones_with_silences([1.0, 2.0, 0.6])
    segments = list(iter_segments(x))
    feats = [fbank(torch.from_numpy(s.audio), cfg.features) for s in segments]
    seen = []
    recognize = recognizer.recognize
    monkeypatch.setattr(recognizer, "recognize", lambda *a, **k: seen.append(k["speaker_mean"]) or recognize(*a, **k))
    rec.transcribe(x)
    assert seen == [None, None]  # a model without speaker_cmn
    seen.clear()
    cfg.model.speaker_cmn = True
    rec.transcribe(x)
    assert [m.shape for m in seen] == [(2, cfg.features.num_mel_bins), (1, cfg.features.num_mel_bins)]
    torch.testing.assert_close(seen[0][1], torch.cat(feats[:2]).mean(0))
    torch.testing.assert_close(seen[1][0], torch.cat(feats).mean(0))
    # --same-speaker: one accumulator carried across files; the second file's first batch also counts the first file
    from asr_transformer.data.features import CMVNAccumulator
    seen.clear()
    speaker = CMVNAccumulator(cfg.features.num_mel_bins)
    for _ in range(2):
        rec.transcribe(x, speaker=speaker)
    torch.testing.assert_close(seen[2][0], torch.cat(feats + feats[:2]).mean(0))
    assert speaker.frames == 2 * sum(f.size(0) for f in feats)


def test_transcribe_silence_gives_empty_result(package):
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoSpeechWarning)  # silence is no reason to decode anything
        result = ctc_recognizer(package).transcribe(np.zeros(3 * SR, np.float32))
    assert result == {"text": "", "segments": [], "duration": 3.0}


def test_dc_offset_does_not_change_the_segments():
    x, truth = tones_with_silences([1.0, 2.5, 0.4, 3.0, 1.5])
    reference = [(s.start, s.end) for s in iter_segments(x)]
    assert len(reference) == len(truth)
    for dc in (0.05, 0.2, 0.5, -0.5):
        assert [(s.start, s.end) for s in iter_segments(np.clip(x + dc, -1.0, 1.0))] == reference, dc


def test_sound_without_detected_speech_is_decoded_whole_with_a_warning(package):
    """A steady tone is no speech to the detector (no dynamics): rather than an empty transcript, all of it is
    decoded, in pieces of max_segment."""
    x = tone(25.0)
    assert list(iter_segments(x, max_segment=10.0)) == []
    with pytest.warns(NoSpeechWarning, match="<array>: the voice detector found no speech in 25.0 s"):
        result = ctc_recognizer(package).transcribe(x, max_segment=10.0)
    assert [(s["start"], s["end"], s["text"]) for s in result["segments"]] == [(0.0, 10.0, "a"), (10.0, 20.0, "a"),
                                                                               (20.0, 25.0, "a")]


def test_speech_that_gives_no_text_is_reported_once_with_its_times(package, tmp_path):
    """A model that writes nothing for what the detector took for speech: the segments are left out of the
    transcript, and one EmptySegmentWarning (one `warning:` line in the CLI) says where, so words are never lost
    unseen."""
    from asr_transformer.inference.transcribe import EmptySegmentWarning

    model, tok, cfg = load_package(package)
    with torch.no_grad():
        model.ctc.proj.bias[BLANK] = 60.0  # blank everywhere: empty text
    mute = tmp_path / "mute.pt"
    save_package(mute, cfg, tok, model.state_dict())
    x, truth = tones_with_silences([1.0, 2.0])
    with pytest.warns(EmptySegmentWarning) as caught:
        result = ctc_recognizer(mute).transcribe(x)
    assert result["segments"] == [] and result["text"] == ""
    (warning,) = [w.message for w in caught if isinstance(w.message, EmptySegmentWarning)]
    assert len(warning.spans) == 2
    for (start, end), (a, b) in zip(warning.spans, truth):
        assert start <= a + 0.1 and end >= b - 0.1
    wav = write_wav(tmp_path / "two.wav", x)
    out = _run([wav, "-m", mute, "--mode", "ctc", "--threads", "1"])
    assert out.exit_code == 0, out.output
    assert out.stderr.strip().startswith(f"warning: {wav}: 2 stretches of sound the voice detector took for speech "
                                         "gave no text (")


def test_cli_warns_when_it_decodes_a_file_without_detected_speech(package, tmp_path):
    wav = write_wav(tmp_path / "hum.wav", tone(3.0))
    result = _run([wav, "-m", package, "--mode", "ctc", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "a"
    assert result.stderr.strip() == (f"warning: {wav}: the voice detector found no speech in 3.0 s of audio that is "
                                     f"not silent (loudest frame: -13 dBFS); decoded all of it, in pieces of 20 s")


# --------------------------------------------------------------------------------------------- CLI


def _run(args, input=None):
    from typer.testing import CliRunner

    from asr_transformer.cli import app

    return CliRunner().invoke(app, ["transcribe", *map(str, args)], input=input)


def _times(text: str, sep: str) -> list[tuple[float, float]]:
    def secs(h, m, s, ms):
        return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000

    pattern = rf"(\d\d):(\d\d):(\d\d){sep}(\d\d\d) --> (\d\d):(\d\d):(\d\d){sep}(\d\d\d)"
    return [(secs(*m[:4]), secs(*m[4:])) for m in re.findall(pattern, text)]


def test_cli_writes_subtitles_that_parse(package, tmp_path):
    x, truth = tones_with_silences([1.0, 2.0, 0.6, 1.4])
    wav = write_wav(tmp_path / "talk.wav", x)
    out = tmp_path / "out"
    result = _run([wav, "-m", package, "-o", out, "-f", "all", "--threads", "1"])  # default mode: joint
    assert result.exit_code == 0, result.output
    duration = x.size / SR
    for ext, sep in (("srt", ","), ("vtt", r"\.")):
        text = (out / f"talk.{ext}").read_text()
        times = _times(text, sep)
        assert len(times) == len(truth), text
        flat = [t for pair in times for t in pair]
        assert flat == sorted(flat) and flat[0] >= 0 and flat[-1] <= duration
        for (start, end), (ref_start, ref_end) in zip(times, truth):
            assert start < end and abs(start - ref_start) <= 0.1 and abs(end - ref_end) <= 0.1
    assert (out / "talk.vtt").read_text().startswith("WEBVTT")
    data = json.loads((out / "talk.json").read_text())
    assert len(data["segments"]) == len(truth)
    assert (out / "talk.tsv").read_text().startswith("start\tend\ttext")
    assert len((out / "talk.txt").read_text().splitlines()) == len(truth)


def test_cli_same_speaker_carries_the_mean_across_files(package, tmp_path, monkeypatch):
    import asr_transformer.inference.recognizer as recognizer

    model, tok, cfg = load_package(package)
    cfg.model.speaker_cmn = True
    save_package(tmp_path / "spk.pt", cfg, tok, model.state_dict())
    first = write_wav(tmp_path / "first.wav", tones_with_silences([0.8, 1.2])[0])
    second = write_wav(tmp_path / "second.wav", 0.2 * tones_with_silences([1.5], seed=1)[0])
    seen = []
    recognize = recognizer.recognize
    monkeypatch.setattr(recognizer, "recognize", lambda *a, **k: seen.append(k["speaker_mean"]) or recognize(*a, **k))

    def means(*options):  # the speaker mean each file's (single) batch was normalized with
        seen.clear()
        result = _run([first, second, "-m", tmp_path / "spk.pt", "--mode", "ctc", "--threads", "1", *options])
        assert result.exit_code == 0, result.output
        assert len(seen) == 2
        return [m[0] for m in seen]

    alone, together = means(), means("--same-speaker")
    torch.testing.assert_close(together[0], alone[0])  # no speech before the first file
    assert not torch.allclose(together[1], alone[1], atol=1e-3)  # the second: both files' mean
    assert together[1].sub(alone[0]).abs().max() < alone[1].sub(alone[0]).abs().max()  # between the two


def test_cli_stdin(package, tmp_path):
    x, _ = tones_with_silences([0.8, 1.2])
    data = write_wav(tmp_path / "in.wav", x).read_bytes()
    result = _run(["-", "-m", package, "--mode", "ctc"], input=data)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "a a"
    out = tmp_path / "out"
    result = _run(["-", "-m", package, "--mode", "ctc", "-o", out, "-f", "srt"], input=data)
    assert result.exit_code == 0, result.output
    assert len(_times((out / "stdin.srt").read_text(), ",")) == 2


def test_command_reads_stdin_after_restarting_with_malloc_tunables(package, tmp_path):
    """The real entry point (`python -m asr_transformer`) re-executes itself before reading stdin."""
    x, _ = tones_with_silences([0.8, 1.2])
    data = write_wav(tmp_path / "in.wav", x).read_bytes()
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "ASR_MALLOC_TUNING")}
    proc = subprocess.run([sys.executable, "-m", "asr_transformer", "transcribe", "-", "-m", str(package),
                           "--mode", "ctc", "--threads", "1"], input=data, capture_output=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().strip() == "a a"


def test_cli_srt_to_stdout(package, tmp_path):
    x, _ = tones_with_silences([0.8])
    wav = write_wav(tmp_path / "one.wav", x)
    result = _run([wav, "-m", package, "--mode", "ctc", "-f", "srt"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("1\n00:00:00,")


def test_cli_damaged_package(package, tmp_path):
    wav = write_wav(tmp_path / "x.wav", tones_with_silences([0.5])[0])
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(package.read_bytes()[:5000])  # truncated, no checksum sidecar
    for bad in (damaged, tmp_path / "missing.pt", wav):
        result = _run([wav, "-m", bad])
        assert result.exit_code == 1
        assert isinstance(result.exception, SystemExit)  # a message, not a traceback
        assert str(bad) in result.stderr and "error" in result.stderr
        assert "Traceback" not in result.output


def test_cli_bad_input_does_not_stop_the_others(package, tmp_path):
    good = write_wav(tmp_path / "good.wav", tones_with_silences([0.8])[0])
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"RIFF this is not audio" * 10)
    missing = tmp_path / "missing.wav"
    out = tmp_path / "out"
    result = _run([garbage, missing, good, "-m", package, "--mode", "ctc", "-o", out])
    assert result.exit_code == 1
    assert str(garbage) in result.stderr and str(missing) in result.stderr
    assert (out / "good.txt").read_text() == "a\n"
    assert not (out / "garbage.txt").exists()


def test_cli_rejects_bad_options(package, tmp_path):
    wav = write_wav(tmp_path / "x.wav", tones_with_silences([0.5])[0])
    for args in (["-f", "doc"], ["--mode", "fast"], ["-f", "all"], ["--max-segment", "0"]):
        result = _run([wav, "-m", package, *args])
        assert result.exit_code == 1 and "error" in result.stderr, args


# ---------------------------------------------------------------------------------- word timestamps


WORD_PAUSE = 0.1  # s of silence between words, besides conftest.speak's 0.05 s at each end of a word: 0.2 s in all


def say(words: list[str], rng: random.Random) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """Words as conftest.speak says them (0.05 s of silence, a 0.12 s tone per letter, 0.05 s of silence),
    WORD_PAUSE s apart → (audio, [(word, start, end)] in seconds): each word's bounds are known."""
    parts, truth, t = [], [], 0.0
    for word in words:
        if parts:
            parts.append(np.zeros(int(WORD_PAUSE * SR), np.float32))
            t += WORD_PAUSE
        wave = speak(word, rng)
        truth.append((word, t + 0.05, t + 0.05 + 0.12 * len(word)))
        parts.append(wave)
        t += wave.size / SR
    return np.concatenate(parts), truth


def random_words(rng: random.Random) -> list[str]:
    return ["".join(rng.choice(sorted(ALPHABET)) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 4))]


@pytest.fixture(scope="module")
def tone_model(tmp_path_factory) -> Path:
    """A tiny CTC-only model trained on conftest.py's tone letters, its words 0.2 s apart (at 0.06 s, as in
    `tone_corpus`, a model this small and this quickly trained often hears a word break between two letters):
    40 utterances, 15 epochs, ~5 s on one core. Its CTC spikes time each letter."""
    from asr_transformer.config import load_config
    from asr_transformer.data.manifest import Utterance, write_manifest
    from asr_transformer.package import average_checkpoints
    from asr_transformer.train.trainer import train

    root, rng = tmp_path_factory.mktemp("tone_model"), random.Random(0)
    texts = []
    for split, count in (("train", 40), ("dev", 4)):
        utts = []
        for i in range(count):
            words = random_words(rng)
            wave, _ = say(words, rng)
            utts.append(Utterance(f"{split}{i}", str(write_wav(root / f"{split}{i}.wav", wave)), wave.size / SR,
                                  " ".join(words)))
        write_manifest(root / f"{split}.jsonl", utts)
        texts += [u.text for u in utts]
    train_tokenizer(texts, root / "tokenizer", model_type="char")
    cfg = load_config(None, ["model.preset=tiny", "model.ctc_weight=1.0", "data.max_frames=1500", "data.max_batch=8",
                             "train.warmup_steps=5", "train.lr=4e-3", "train.max_epochs=15",
                             "decode.vad=energy"])  # tones, not speech: Silero's detector hears none
    train(cfg, root / "train.jsonl", root / "dev.jsonl", root / "tokenizer", root / "exp", device="cpu", threads=1)
    average_checkpoints(root / "exp", root / "model.pt", last=1)
    return root / "model.pt"


def concatenated_recordings(gaps, seed: int = 1) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """Recordings of new random words (not the training ones), each followed by `gaps[i]` s of silence (0.5 s
    before the first), in light noise → (audio, [(word, start, end)])."""
    rng = random.Random(seed)
    parts, truth, t = [np.zeros(int(0.5 * SR), np.float32)], [], 0.5
    for gap in gaps:
        wave, words = say(random_words(rng), rng)
        truth += [(word, t + start, t + end) for word, start, end in words]
        parts += [wave, np.zeros(int(gap * SR), np.float32)]
        t += (wave.size + int(gap * SR)) / SR
    x = np.concatenate(parts)
    return x + 0.003 * np.random.default_rng(seed).standard_normal(x.size).astype(np.float32), truth


GAPS = (0.8, 0.1, 0.8, 0.8, 0.1, 0.8)  # 0.1 s (+ 0.1 s at the recordings' ends): under the segmenter's 0.3 s, so
# two recordings share a segment


def test_word_timestamps_on_concatenated_recordings(tone_model):
    x, truth = concatenated_recordings(GAPS)
    result = Recognizer(tone_model, device="cpu", threads=1, mode="ctc").transcribe(x, word_timestamps=True)
    assert len(result["segments"]) == 4
    for seg in result["segments"]:
        assert " ".join(w["word"] for w in seg["words"]) == seg["text"]  # the words are the text's
        assert all(seg["start"] <= w["start"] <= w["end"] <= seg["end"] for w in seg["words"])
        assert all(0.0 < w["probability"] <= 1.0 for w in seg["words"])
    words = [w for seg in result["segments"] for w in seg["words"]]
    assert len(words) == len(truth), (result["text"], " ".join(w for w, _, _ in truth))
    errors = [max(abs(w["start"] - start), abs(w["end"] - end)) for w, (_, start, end) in zip(words, truth)]
    print(f"\nword boundaries: max |error| {max(errors):.3f} s over {len(words)} words")
    assert max(errors) <= 0.1, list(zip(words, truth))
    starts = [w["start"] for w in words]
    assert starts == sorted(starts)


def test_dc_offset_does_not_change_the_transcript(tone_model):
    """Speech recorded with a DC offset (clipped at ±1) is found and transcribed as without it; before the
    detector removed each frame's mean, an offset of 0.05 or more left no speech at all."""
    x, truth = concatenated_recordings(GAPS[:3])
    rec = Recognizer(tone_model, device="cpu", threads=1, mode="ctc")
    reference = rec.transcribe(x)
    assert len(reference["text"].split()) == len(truth)
    for dc in (0.05, 0.2, 0.5):
        with warnings.catch_warnings():
            warnings.simplefilter("error", NoSpeechWarning)  # found by the detector, not by the fallback
            result = rec.transcribe(np.clip(x + dc, -1.0, 1.0))
        assert result["text"] == reference["text"], dc
        assert [(s["start"], s["end"]) for s in result["segments"]] == \
            [(s["start"], s["end"]) for s in reference["segments"]]


def test_cli_word_timestamps_in_every_format(tone_model, tmp_path):
    x, truth = concatenated_recordings(GAPS[:3])
    wav = write_wav(tmp_path / "talk.wav", x)
    out = tmp_path / "out"
    result = _run([wav, "-m", tone_model, "--mode", "ctc", "--word-timestamps", "-o", out, "-f", "all",
                   "--threads", "1", "--max-words-per-cue", "1"])
    assert result.exit_code == 0, result.output
    expected = Recognizer(tone_model, device="cpu", threads=1, mode="ctc").transcribe(wav, word_timestamps=True)
    words = [w for seg in expected["segments"] for w in seg["words"]]
    assert len(words) == len(truth)
    data = json.loads((out / "talk.json").read_text())
    assert [w for seg in data["segments"] for w in seg["words"]] == words
    assert set(words[0]) == {"word", "start", "end", "probability"}  # whisper's layout
    spans = [t for w in words for t in (w["start"], w["end"])]
    for ext, sep in (("srt", ","), ("vtt", r"\.")):  # a cue per word, as asked
        assert [t for cue in _times((out / f"talk.{ext}").read_text(), sep) for t in cue] == pytest.approx(spans)
    rows = [line.split("\t") for line in (out / "talk.tsv").read_text().splitlines()[1:]]
    assert rows == [[str(round(w["start"] * 1000)), str(round(w["end"] * 1000)), w["word"]] for w in words]
    assert (out / "talk.txt").read_text().splitlines() == [seg["text"] for seg in expected["segments"]]
    assert "--word-timestamps" in _run(["--help"]).output


def test_exported_model_gives_the_same_word_timestamps(tone_model, tmp_path):
    pytest.importorskip("onnxruntime", reason="ONNX export needs the onnx extra: pip install -e '.[onnx]'")
    from asr_transformer.inference.export import export_package
    from asr_transformer.inference.exported import ExportedRecognizer

    x, _ = concatenated_recordings(GAPS[:2])
    export_package(tone_model, tmp_path / "onnx")
    exported = ExportedRecognizer(tmp_path / "onnx", threads=1, mode="ctc").transcribe(x, word_timestamps=True)
    reference = Recognizer(tone_model, device="cpu", threads=1, mode="ctc").transcribe(x, word_timestamps=True)
    assert exported["text"] == reference["text"]
    for got, want in zip(exported["segments"], reference["segments"]):
        assert [(w["word"], w["start"], w["end"]) for w in got["words"]] == \
            [(w["word"], w["start"], w["end"]) for w in want["words"]]
        assert [w["probability"] for w in got["words"]] == pytest.approx([w["probability"] for w in want["words"]],
                                                                          abs=1e-3)


def test_word_timestamps_when_the_hypothesis_cannot_be_aligned(package, monkeypatch):
    """The 'a' model's one-word segments are aligned (the word spans its segment); a hypothesis with more tokens
    than the frames allow has its words share the segment evenly, with probability None."""
    from asr_transformer.decode import Hypothesis

    x, _ = tones_with_silences([1.0, 0.6])
    rec = ctc_recognizer(package)
    aligned = rec.transcribe(x, word_timestamps=True)
    for seg in aligned["segments"]:
        assert [(w["word"], w["start"], w["end"]) for w in seg["words"]] == [("a", seg["start"], seg["end"])]
        assert seg["words"][0]["probability"] > 0.99
    space, a = (rec.tokenizer.sp.piece_to_id(p) for p in ("▁", "a"))
    decode = rec.decode_waves_with_ctc

    def too_long(waves, speaker=None):
        hyps, log_probs = decode(waves, speaker)
        return [Hypothesis([space, a] * 100, h.score) for h in hyps], log_probs

    monkeypatch.setattr(rec, "decode_waves_with_ctc", too_long)
    result = rec.transcribe(x, word_timestamps=True)
    for seg in result["segments"]:
        words = seg["words"]
        assert len(words) == 100 and all(w["probability"] is None for w in words)
        assert words[0]["start"] == seg["start"] and words[-1]["end"] == pytest.approx(seg["end"], abs=1e-3)
        assert all(b["start"] == pytest.approx(a["end"], abs=1e-3) for a, b in zip(words, words[1:]))


# ----------------------------------------------------------------------------------- bounded memory


CHILD = """
import json, resource, sys, time, tracemalloc
from asr_transformer import Recognizer

package, warmup, big = sys.argv[1:4]
rec = Recognizer(package, device="cpu", threads=2, mode="ctc", batch_size=8)
rec.transcribe(warmup, max_segment=20.0)
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
rss0, peak0 = rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
tracemalloc.start()
t0 = time.perf_counter()
result = rec.transcribe(big, max_segment=20.0)
seconds = time.perf_counter() - t0
traced_peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps({"seconds": seconds, "traced_peak": traced_peak, "rss_before": rss0, "peak_before": peak0,
                  "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "duration": result["duration"], "segments": len(result["segments"]),
                  "last_end": result["segments"][-1]["end"] if result["segments"] else None}))
"""


def write_long_file(path: Path, minutes: float, seed: int = 0) -> float:
    """Noise + tone bursts (0.3-3 s) separated by 0.4-4 s pauses, written in 10 s blocks (16 kHz, 16-bit);
    about 40 % is "speech", which keeps the decoding time of the test down."""
    rng = np.random.default_rng(seed)
    total = int(minutes * 60 * SR)
    block = 10 * SR
    # one long on/off plan, then each block rendered from it
    edges, t, on = [], 0, False
    while t < total:
        n = int((rng.uniform(0.3, 3.0) if on else rng.uniform(0.4, 4.0)) * SR)
        edges.append((t, min(t + n, total), on, rng.uniform(200, 1500)))
        t, on = t + n, not on
    with sf.SoundFile(path, "w", SR, 1, "PCM_16") as f:
        k = 0
        for start in range(0, total, block):
            stop = min(start + block, total)
            x = 0.003 * rng.standard_normal(stop - start)
            while k < len(edges) and edges[k][1] <= start:
                k += 1
            j = k
            while j < len(edges) and edges[j][0] < stop:
                a, b, speech, freq = edges[j]
                if speech:
                    lo, hi = max(a, start), min(b, stop)
                    n = np.arange(lo, hi)
                    x[lo - start:hi - start] += 0.3 * np.sin(2 * np.pi * freq * n / SR)
                j += 1
            f.write(x.astype(np.float32))
    return total / SR


def test_thirty_minute_file_in_bounded_memory(package, tmp_path):
    big = tmp_path / "long.wav"
    duration = write_long_file(big, 30.0)
    assert big.stat().st_size > 55e6  # ~58 MB of 16-bit samples; 115 MB as float32
    warmup = tmp_path / "warmup.wav"
    write_long_file(warmup, 1.0, seed=1)
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    # glibc raises its mmap threshold as large blocks are freed, after which freed tensors stay in the heap
    # and RSS creeps up with fragmentation (~130 MB over 30 minutes here, then flat); a fixed threshold
    # makes RSS show what the process actually holds.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    proc = subprocess.run([sys.executable, str(script), str(package), str(warmup), str(big)],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    peak_growth = info["max_rss"] - info["peak_before"]  # vs the peak of the 1-minute warm-up
    print(f"\n30-minute file: {info['seconds']:.1f} s, traced peak {info['traced_peak'] / 1e6:.1f} MB, "
          f"peak growth over a 1-minute file {peak_growth / 1e6:.1f} MB, "
          f"{info['segments']} segments")
    assert info["duration"] == pytest.approx(duration)
    assert info["segments"] > 200 and info["last_end"] <= duration
    assert info["traced_peak"] < 30e6  # Python/numpy allocations: far below the 115 MB float32 file
    # the process-wide peak (torch included) is set by the 1-minute warm-up: 30 minutes need no more, and
    # far less than one float32 copy of the file (115 MB) would
    assert peak_growth < 40e6


@pytest.mark.parametrize("rate", [8000, 11025, 22050, 22051, 44100, 48000, 96000, 7919])
def test_a_recording_at_any_sample_rate_transcribes_as_at_16_khz(tone_model, tmp_path, rate):
    """The same speech stored at common and odd sample rates gives the letters of the 16 kHz file (odd rates
    resample in bounded memory, data/audio.py). Letters, not words: this toy model hears its word breaks partly
    in the noise floor above 4 kHz, which a telephone-band file does not hold."""
    x, truth = concatenated_recordings(GAPS[:3])
    rec = Recognizer(tone_model, device="cpu", threads=1, mode="ctc")
    reference = rec.transcribe(write_wav(tmp_path / "16k.wav", x))["text"]
    assert len(reference.split()) == len(truth)
    stored = write_wav(tmp_path / f"{rate}.wav", np.clip(resample(x, SR, rate), -1.0, 1.0), rate)
    text = rec.transcribe(stored)["text"]
    assert text.replace(" ", "") == reference.replace(" ", "")
    if rate > 2 * 4000 * 1.2:  # all of the noise floor too: the same words
        assert text == reference


def test_transcribe_refuses_a_truncated_wav_and_samples_out_of_range(package, tmp_path):
    """The streaming reader of `asr transcribe` checks what load_audio checks: one error, never a silent result."""
    full = tmp_path / "full.wav"
    sf.write(full, 0.3 * np.sin(np.arange(3 * SR) / SR * 2 * np.pi * 440).astype(np.float32), SR, subtype="PCM_16")
    data = full.read_bytes()
    (tmp_path / "cut.wav").write_bytes(data[:len(data) // 3])
    huge = tmp_path / "huge.wav"
    sf.write(huge, 1e30 * np.sin(np.arange(SR) / SR * 2 * np.pi * 440), SR, subtype="FLOAT")
    rec = Recognizer(package, device="cpu", threads=1, mode="ctc")
    with pytest.raises(AudioError, match=r"cut.wav: truncated: header says 3.00 s, file holds 1.00 s"):
        rec.transcribe(tmp_path / "cut.wav")
    with pytest.raises(AudioError, match=r"huge.wav: samples out of range"):
        rec.transcribe(huge)
    with pytest.raises(AudioError, match=r"samples out of range"):
        rec.transcribe(np.full(SR, 1e30, np.float32))


def test_whisper_windows_hold_their_segments_and_never_pass_the_window():
    """WindowMerger: windows in order, each segment in one window, every window's audio (context and lead-in
    included) within the window's seconds, starting where the last one ended when it fits."""
    from asr_transformer.inference.segmenter import Segment
    from asr_transformer.inference.transcribe import WindowMerger

    rng = np.random.default_rng(3)
    segments, t = [], 0.4
    for _ in range(60):
        speech = rng.uniform(0.3, 12.0)
        start = t + rng.uniform(0.3, 4.0)
        audio_start = start - 0.2
        audio = rng.standard_normal(int((speech + 0.4) * SR)).astype(np.float32)
        segments.append(Segment(start, start + speech, audio, audio_start))
        t = start + speech
    merger = WindowMerger(30.0)
    windows = [w for s in segments for w in merger.push(s)] + merger.finish()
    assert len(windows) < len(segments)
    covered = 0
    for w in windows:
        assert w.audio.size / SR <= 30.0 + 1e-6
        inside = [s for s in segments if w.start <= s.start and s.end <= w.end]
        assert inside and inside[0].start == w.start and inside[-1].end == w.end
        covered += len(inside)
        for s in inside:  # the segment's audio up to its speech's end is in the window where it was
            offset, speech = round((s.audio_start - w.audio_start) * SR), round((s.end - s.audio_start) * SR)
            assert np.array_equal(w.audio[offset:offset + speech], s.audio[:speech])
        assert w.gaps == tuple((a.end, b.start) for a, b in zip(inside, inside[1:]))  # the pauses between them
    assert covered == len(segments)
    assert windows[0].audio_start == 0.0  # the first window reads the file from its start


def test_word_times_are_moved_out_of_the_pauses_inside_a_window():
    """A window's attention can time the words before a pause late, inside the pause (where the detector found
    no speech), and the first one after it early: a word that starts in a gap's first half moves back to its
    start, one in its second half to its end; one that runs into a gap ends at it; the words stay in order."""
    from asr_transformer.inference.transcribe import out_of_gaps

    words = [{"word": "a", "start": 0.5, "end": 0.9}, {"word": "late", "start": 1.4, "end": 2.3},
             {"word": "later", "start": 2.3, "end": 2.6}, {"word": "early", "start": 2.7, "end": 3.5},
             {"word": "next", "start": 3.8, "end": 4.3}, {"word": "long", "start": 4.4, "end": 6.5},
             {"word": "in", "start": 6.2, "end": 6.4}]
    out = out_of_gaps([dict(w) for w in words], ((1.0, 4.0), (6.0, 9.0)))
    assert [(w["start"], w["end"]) for w in out] == [(0.5, 0.9), (1.0, 1.0), (1.0, 1.0), (4.0, 4.0), (4.0, 4.3),
                                                     (4.4, 6.0), (6.0, 6.0)]
    assert out_of_gaps([dict(w) for w in words], ()) == words  # no gaps: unchanged


def test_speech_a_window_skipped_is_found_cut_out_and_put_back_where_it_lies():
    """inference/reread.py: a run of a window's speech parts with no word timed in it is skipped when one of its
    parts lasts MIN_SKIPPED seconds (shorter bursts are noise); its cut keeps the window's audio and gaps; its
    words go in before the first word that starts after it, and the text is the words joined."""
    from asr_transformer.inference.reread import MIN_SKIPPED, cut, skipped, spliced
    from asr_transformer.inference.segmenter import Segment

    audio = np.arange(16 * SR, dtype=np.float32)
    # speech 0-3, pause, 4-4.4 (a burst), pause, 5-6.5 and 6.8-7.2 (a sentence), pause, 8-10
    window = Segment(0.0, 10.0, audio, 0.0, ((3.0, 4.0), (4.4, 5.0), (6.5, 6.8), (7.2, 8.0)))
    words = [{"word": "one", "start": 0.5, "end": 1.0}, {"word": "two.", "start": 2.0, "end": 2.9},
             {"word": "five", "start": 8.1, "end": 8.6}]
    assert MIN_SKIPPED <= 1.5
    assert skipped(window, words) == [(4.0, 7.2)]  # the burst joins the run; the run has a 1.5-s part
    assert skipped(window, words + [{"word": "x", "start": 5.5, "end": 5.9}]) == []  # covered
    assert skipped(window, words + [{"word": "x", "start": 4.1, "end": 4.3}]) == [(5.0, 7.2)]
    assert skipped(Segment(0.0, 10.0, audio, 0.0, ((3.0, 4.0), (4.4, 9.5))), words[:2]) == []  # bursts only
    part = cut(window, 5.0, 7.2, 0.2)
    assert (part.start, part.end, part.audio_start, part.gaps) == (5.0, 7.2, 4.8, ((6.5, 6.8),))
    assert np.array_equal(part.audio, audio[round(4.8 * SR):round(7.4 * SR)])
    found = {"text": "three four.", "words": [{"word": "three", "start": 5.1, "end": 5.6},
                                              {"word": "four.", "start": 6.9, "end": 7.1}]}
    out = spliced({"text": "one two. five", "words": words, "score": -1.0}, [(5.0, found)])
    assert out["text"] == "one two. three four. five" and out["score"] == -1.0
    assert [w["word"] for w in out["words"]] == ["one", "two.", "three", "four.", "five"]
