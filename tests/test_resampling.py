import numpy as np
import soundfile as sf
from typer.testing import CliRunner

from asr_transformer.cli import app
from asr_transformer.data.audio import load_audio
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
