import math
import tracemalloc

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio.functional as AF
from typer.testing import CliRunner

from asr_transformer.cli import app
from asr_transformer.data.audio import block_reach, load_audio, resample, sinc_taps
from asr_transformer.data.corpora.synthetic import resample_many
from asr_transformer.data.manifest import Utterance, read_manifest, write_manifest


def band_energy(x: np.ndarray, rate: int, low: float, high: float) -> float:
    spectrum = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / rate)
    return float(spectrum[(freqs >= low) & (freqs < high)].sum())


def test_resample_copies_each_utterance_band_limited_and_keeps_the_rest(tmp_path):
    t = np.arange(32000) / 16000
    wave = (0.2 * np.sin(2 * np.pi * 1000 * t) + 0.2 * np.sin(2 * np.pi * 6000 * t)).astype(np.float32)
    sf.write(tmp_path / "long.wav", wave, 16000)
    utts = [Utterance("spk/whole", str(tmp_path / "long.wav"), 2.0, "one two", "spk"),
            Utterance("seg", str(tmp_path / "long.wav"), 0.5, "three", "other", offset=1.0)]
    write_manifest(tmp_path / "in.jsonl", utts)
    run = CliRunner().invoke(app, ["resample", str(tmp_path / "in.jsonl"), str(tmp_path / "out/train.jsonl"),
                                   "--rate", "8000"])
    assert run.exit_code == 0, run.output
    assert "2 utterances at 8000 Hz" in run.output
    got = read_manifest(tmp_path / "out/train.jsonl")
    assert [(u.id, u.text, u.speaker) for u in got] == [(u.id, u.text, u.speaker) for u in utts]
    assert [u.offset for u in got] == [None, None]
    assert [u.duration for u in got] == [2.0, 0.5]
    assert got[0].audio.endswith("audio_8000/spk%2Fwhole.flac")  # an id with a slash stays one file
    for u in got:
        assert sf.info(u.audio).samplerate == 8000
    back = load_audio(got[0].audio)  # at 16 kHz again: the 6 kHz tone is gone, the 1 kHz one kept
    assert band_energy(back, 16000, 5000, 7000) < 1e-4 * band_energy(wave, 16000, 5000, 7000)
    assert band_energy(back, 16000, 900, 1100) > 0.9 * band_energy(wave, 16000, 900, 1100)
    segment = load_audio(got[1].audio, sample_rate=8000)  # seconds 1.0-1.5; the resampler's edges differ
    assert len(segment) == 4000
    np.testing.assert_allclose(segment[100:-100], load_audio(got[0].audio, sample_rate=8000)[8100:11900], atol=1e-3)


def test_resample_names_an_unreadable_file_and_writes_no_manifest(tmp_path):
    (tmp_path / "bad.wav").write_bytes(b"not audio")
    write_manifest(tmp_path / "in.jsonl", [Utterance("bad", str(tmp_path / "bad.wav"), 1.0, "x")])
    run = CliRunner().invoke(app, ["resample", str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"), "--rate", "8000"])
    assert run.exit_code != 0
    assert "bad.wav" in run.output
    assert not (tmp_path / "out.jsonl").exists()


# ------------------------------------------------------------------------------ the resampler itself

COMMON_RATES = [8000, 11025, 22050, 44100, 48000, 96000]
ODD_RATES = [22051, 7919, 44101]  # gcd with 16000 is 1: torchaudio's kernel would be 16000 × rate taps


def sine(rate: int, freq: float, seconds: float, amplitude: float = 0.5) -> np.ndarray:
    return (amplitude * np.sin(2 * np.pi * freq * np.arange(int(rate * seconds)) / rate)).astype(np.float32)


def level_db(x: np.ndarray, amplitude: float = 0.5) -> float:
    """RMS of `x` in dB relative to a sine of `amplitude`."""
    return 20 * np.log10(np.sqrt(np.mean(x.astype(np.float64) ** 2)) / (amplitude / np.sqrt(2)))


@pytest.mark.parametrize("freq", [440.0, 3000.0])
@pytest.mark.parametrize("rate", COMMON_RATES + ODD_RATES)
def test_a_sine_resampled_to_16k_is_the_sine_at_16k(rate, freq):
    x = sine(rate, freq, 0.5)
    y = resample(x, rate, 16000)
    assert abs(len(y) - len(x) * 16000 / rate) <= 1
    truth = 0.5 * np.sin(2 * np.pi * freq * np.arange(len(y)) / 16000)
    error = np.abs(y - truth)[800:-800].max()  # 50 ms from each edge, where the signal starts and stops
    # torchaudio's Hann-windowed sinc loses 0.2 dB at 0.75 × the lower Nyquist (3 kHz from 8 kHz): 2.5 %;
    # the Kaiser-windowed sinc is flat to 0.01 dB there
    assert error < (0.025 if rate in COMMON_RATES else 1e-4) * 0.5


@pytest.mark.parametrize("rate", COMMON_RATES)
def test_common_rates_keep_torchaudios_polyphase_filter_exactly(rate):
    x = sine(rate, 440.0, 0.3) + sine(rate, 3000.0, 0.3, 0.2)
    g = math.gcd(rate, 16000)
    expected = AF.resample(torch.from_numpy(x), rate // g, 16000 // g).numpy()
    np.testing.assert_array_equal(resample(x, rate, 16000), expected)


@pytest.mark.parametrize("rate,freq,min_db", [
    (48000, 12000.0, 50.0),  # torchaudio (6 zero crossings, Hann): ≥ 45 dB from 10 kHz, 55 at 12 kHz → 4 kHz alias
    (96000, 12000.0, 50.0),
    (22051, 9600.0, 80.0),   # Kaiser β = 10, 32 zero crossings: ≥ 100 dB from 0.53 × 16 kHz; 20 dB of margin
    (44101, 9600.0, 80.0),
    (44101, 12000.0, 80.0),
])
def test_a_tone_above_the_new_nyquist_is_filtered_out(rate, freq, min_db):
    y = resample(sine(rate, freq, 1.0), rate, 16000)[1600:-1600]
    assert level_db(y) < -min_db


def test_upsampling_an_odd_rate_makes_no_images():
    y = resample(sine(7919, 3000.0, 2.0), 7919, 16000)[1600:-1600]
    spectrum = np.abs(np.fft.rfft(y * np.hanning(len(y)))) ** 2
    freqs = np.fft.rfftfreq(len(y), 1 / 16000)
    assert spectrum[freqs > 4200].sum() < 1e-8 * spectrum.sum()  # the image at 4919 Hz: below -80 dB


def test_odd_rates_resample_in_bounded_memory():
    """10 s at 22,051 Hz: torchaudio's gcd path would build a 16,000 × 22,069 float64 kernel (2.8 GB, 6.4 GB
    peak); the windowed sinc reads a fixed number of taps per output and works in chunks of them."""
    assert block_reach(22051, 16000) is None  # not torchaudio's path
    assert sinc_taps(22051, 16000) <= 100
    x = sine(22051, 440.0, 10.0)
    tracemalloc.start()
    try:
        y = resample(x, 22051, 16000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(y) == 160000
    assert peak < 3 * x.nbytes + 8 * 2**20  # input copy with padding, the output, and a few MB of chunks


@pytest.mark.parametrize("rate", ODD_RATES)
def test_odd_rates_resample_block_by_block_as_whole(rate):
    """A block cut at a whole second (orig/gcd samples) resamples as the same stretch of the whole signal,
    which is what streaming (transcribe) relies on."""
    x = np.random.default_rng(0).normal(0, 0.1, 3 * rate).astype(np.float32)
    whole = resample(x, rate, 16000)
    tail = resample(x[rate:], rate, 16000)
    np.testing.assert_allclose(tail[200:], whole[16000 + 200:], atol=1e-6)


def test_a_constant_stays_constant_at_an_odd_rate():
    y = resample(np.full(22051, 0.25, np.float32), 22051, 16000)
    np.testing.assert_allclose(y[100:-100], 0.25, atol=1e-6)


@pytest.mark.parametrize("rate,out_rate", [(22050, 16000), (22050, 8000), (8000, 16000), (16000, 8000),
                                           (22051, 16000), (16000, 16000)])
def test_resample_many_equals_resampling_each_signal_alone(rate, out_rate):
    rng = np.random.default_rng(rate)
    signals = [rng.normal(0, 0.2, n).astype(np.float32) for n in (rate // 3, 1, rate // 7 + 5)]
    pieces = resample_many(signals, rate, out_rate)
    assert len(pieces) == len(signals)
    g = math.gcd(rate, out_rate)
    for x, piece in zip(signals, pieces):
        alone = resample(x, rate, out_rate)
        assert len(alone) <= len(piece) < len(alone) + out_rate // g  # at most one block of padding more
        np.testing.assert_allclose(piece[:len(alone)], alone, atol=1e-5)
