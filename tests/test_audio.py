import io
import math

import numpy as np
import pytest
import soundfile as sf
import torch

from asr_transformer.data.audio import AudioError, audio_info, load_audio, wav_declared_frames
from asr_transformer.data.features import fbank, num_frames


def tone(rate, seconds=0.5, freq=440.0):
    t = np.arange(int(rate * seconds)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.mark.parametrize("fmt,subtype", [("WAV", "PCM_16"), ("WAV", "PCM_24"), ("WAV", "PCM_32"), ("WAV", "FLOAT"),
                                         ("FLAC", "PCM_16"), ("OGG", "VORBIS"), ("WAV", "PCM_U8")])
def test_formats_load_as_mono_float32_16k(tmp_path, fmt, subtype):
    path = tmp_path / f"a.{fmt.lower()}"
    sf.write(path, tone(16000), 16000, format=fmt, subtype=subtype)
    x = load_audio(path)
    assert x.dtype == np.float32 and x.ndim == 1
    assert abs(len(x) - 8000) <= 1
    assert np.corrcoef(x[:7000], tone(16000)[:7000])[0, 1] > 0.95


def test_mp3_loads(tmp_path):
    path = tmp_path / "a.mp3"
    try:
        sf.write(path, tone(16000, 1.0), 16000, format="MP3")
    except Exception as e:  # libsndfile built without mp3
        pytest.skip(f"this libsndfile cannot write mp3: {e}")
    x = load_audio(path)
    assert abs(len(x) / 16000 - 1.0) < 0.1


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_resampled_to_16k_keeps_pitch(tmp_path, rate):
    path = tmp_path / "a.wav"
    sf.write(path, tone(rate, 1.0, 1000.0), rate)
    x = load_audio(path)
    assert abs(len(x) - 16000) <= 2
    spectrum = np.abs(np.fft.rfft(x))
    assert abs(np.argmax(spectrum) * 16000 / len(x) - 1000.0) < 5


def test_stereo_is_downmixed(tmp_path):
    left, right = tone(16000), np.zeros(8000, np.float32)
    path = tmp_path / "s.wav"
    sf.write(path, np.stack([left, right], 1), 16000, subtype="FLOAT")
    np.testing.assert_allclose(load_audio(path), left / 2, atol=1e-6)


def test_offset_and_duration_select_a_segment(tmp_path):
    x = np.arange(16000, dtype=np.float32) / 16000
    path = tmp_path / "r.wav"
    sf.write(path, x, 16000, subtype="FLOAT")
    np.testing.assert_allclose(load_audio(path, offset=0.25, duration=0.5), x[4000:12000])


def test_bad_audio_errors_name_the_file(tmp_path):
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x00\x00garbage" * 10)
    with pytest.raises(AudioError, match="corrupt.wav") as e:
        load_audio(corrupt)
    assert e.value.kind == "unreadable"
    with pytest.raises(AudioError, match="corrupt.wav"):
        audio_info(corrupt)

    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.float32), 16000)
    with pytest.raises(AudioError, match="empty.wav") as e:
        load_audio(empty)
    assert e.value.kind == "empty"

    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(1600, np.float32), 16000)
    with pytest.raises(AudioError, match="silent.wav") as e:
        load_audio(silent)
    assert e.value.kind == "silent"
    assert load_audio(silent, allow_silent=True).shape == (1600,)

    nan = tmp_path / "nan.wav"
    sf.write(nan, np.array([0.1, np.nan, 0.2] * 100, np.float32), 16000, subtype="FLOAT")
    with pytest.raises(AudioError, match="nan.wav") as e:
        load_audio(nan)
    assert e.value.kind == "nonfinite"

    with pytest.raises(AudioError, match="missing.wav"):
        load_audio(tmp_path / "missing.wav")


def test_bytes_input(tmp_path):
    path = tmp_path / "a.wav"
    sf.write(path, tone(16000), 16000)
    np.testing.assert_allclose(load_audio(path.read_bytes()), load_audio(path))


# ------------------------------------------------------------------------------ out-of-range samples


def test_float_samples_far_out_of_range_are_refused(tmp_path):
    path = tmp_path / "huge.wav"
    sf.write(path, tone(16000) * 1e30, 16000, subtype="FLOAT")
    with pytest.raises(AudioError, match=r"huge.wav: samples out of range \(peak 3e\+29\); expected -1..1") as e:
        load_audio(path)
    assert e.value.kind == "range"
    int16_scaled = tmp_path / "int16_scaled.wav"  # int16 values stored as float
    sf.write(int16_scaled, tone(16000) * 32768, 16000, subtype="FLOAT")
    with pytest.raises(AudioError, match="int16_scaled.wav"):
        load_audio(int16_scaled)


def test_float_samples_a_little_over_full_scale_are_kept(tmp_path):
    path = tmp_path / "hot.wav"
    sf.write(path, tone(16000) * 8, 16000, subtype="FLOAT")  # peak 2.4: +8 dB over full scale
    np.testing.assert_allclose(load_audio(path), tone(16000) * 8, rtol=1e-6)


@pytest.mark.parametrize("peak", [1e-30, 1.0, 1e3, 1e6, 1e7, 1e30, 3e38])
def test_features_of_any_finite_waveform_are_finite(peak):
    wave = torch.from_numpy(tone(16000)) / 0.3 * peak
    feats = fbank(wave)
    assert feats.shape == (num_frames(len(wave)), 80)
    assert torch.isfinite(feats).all()


def test_features_of_a_huge_waveform_are_the_features_shifted_by_its_scale():
    wave = 0.1 * torch.randn(16000, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(fbank(wave * 1e30), fbank(wave) + 2 * math.log(1e30), atol=2e-3, rtol=1e-5)


# ------------------------------------------------------------------------------ truncated files


def wav_bytes(seconds: float, subtype: str = "PCM_16", fmt: str = "WAV") -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, tone(16000, seconds), 16000, format=fmt, subtype=subtype)
    return buffer.getvalue()


@pytest.mark.parametrize("fmt,subtype", [("WAV", "PCM_16"), ("WAV", "FLOAT"), ("RF64", "PCM_24")])
def test_a_truncated_wav_is_refused_naming_both_lengths(tmp_path, fmt, subtype):
    full = wav_bytes(3.2, subtype, fmt)
    header = full.index(b"data") + 8
    kept = full[:header + 17600 * (len(full) - header) // 51200]  # 1.10 s of the 3.20 s
    path = tmp_path / "cut.wav"
    path.write_bytes(kept)
    message = r"cut.wav: truncated: header says 3.20 s, file holds 1.10 s"
    with pytest.raises(AudioError, match=message) as e:
        load_audio(path)
    assert e.value.kind == "truncated"
    with pytest.raises(AudioError, match=message):
        audio_info(path)  # a corpus import skips it before training reads it
    with pytest.raises(AudioError, match=r"<bytes>: truncated"):
        load_audio(kept)
    with pytest.raises(AudioError, match="truncated"):
        load_audio(path, offset=0.5, duration=0.2)  # even a segment that is there: the file is damaged


def test_a_wav_with_a_few_bytes_fewer_than_its_header_says_loads(tmp_path):
    path = tmp_path / "sloppy.wav"
    path.write_bytes(wav_bytes(1.0)[:-44])  # as a writer that counted its header into the data size
    assert abs(len(load_audio(path)) - 16000) <= 22


def test_a_streamed_wav_of_unknown_length_loads_whole(tmp_path):
    data = bytearray(wav_bytes(1.0))
    at = data.index(b"data")
    data[at + 4:at + 8] = (0xFFFFFFFF).to_bytes(4, "little")  # as a writer to a pipe leaves it
    data[4:8] = (0xFFFFFFFF).to_bytes(4, "little")
    path = tmp_path / "streamed.wav"
    path.write_bytes(bytes(data))
    assert len(load_audio(path)) == 16000
    assert audio_info(path) == (1.0, 16000)


def test_a_wav_with_chunks_before_its_data_is_measured_from_its_data_chunk(tmp_path):
    data = wav_bytes(1.0)
    at = data.index(b"data")
    extra = b"LIST" + (5).to_bytes(4, "little") + b"INFO!" + b"\0"  # an odd size, padded to even
    riff = (int.from_bytes(data[4:8], "little") + len(extra)).to_bytes(4, "little")
    path = tmp_path / "list.wav"
    path.write_bytes(data[:4] + riff + data[8:at] + extra + data[at:])
    assert wav_declared_frames(path) == 16000
    assert len(load_audio(path)) == 16000
    path.write_bytes((data[:4] + riff + data[8:at] + extra + data[at:])[:-16000])
    with pytest.raises(AudioError, match="truncated: header says 1.00 s, file holds 0.50 s"):
        load_audio(path)
