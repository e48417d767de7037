import numpy as np
import pytest
import soundfile as sf

from asr_transformer.data.audio import AudioError, audio_info, load_audio


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
