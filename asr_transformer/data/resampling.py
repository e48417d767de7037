"""A manifest's audio copied at another sample rate (`asr resample`), e.g. a 16 kHz corpus in an 8 kHz corpus's band.

Each utterance (a segment too) is read at the new rate, band-limited by the resampler, and written as its own
16-bit FLAC file, `<audio_dir>/<id>.flac` (the id %-quoted where it holds a slash); the new manifest lists those
files with everything else unchanged. Every file is written atomically and the manifest last, so an interrupted
run leaves no manifest behind.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from urllib.parse import quote

import soundfile as sf

from asr_transformer.data.audio import load_utterance
from asr_transformer.progress import track
from asr_transformer.data.manifest import read_manifest, write_manifest
from asr_transformer.fileio import atomic_open


def resample_manifest(manifest: str | os.PathLike, out: str | os.PathLike, rate: int,
                      audio_dir: str | os.PathLike | None = None) -> int:
    """Write `out`, the utterances of `manifest` with their audio at `rate` Hz in `audio_dir`
    (default: `audio_<rate>` beside `out`); returns how many were written."""
    out = Path(out)
    audio_dir = Path(audio_dir) if audio_dir is not None else out.parent / f"audio_{rate}"
    audio_dir.mkdir(parents=True, exist_ok=True)
    resampled = []
    utterances = read_manifest(manifest)
    for utt in track(utterances, f"resampling {Path(manifest).name} to {rate} Hz", total=len(utterances)):
        samples = load_utterance(utt, sample_rate=rate)
        path = audio_dir / f"{quote(utt.id, safe='')}.flac"  # an id with a slash stays one file
        with atomic_open(path, "wb") as f:
            sf.write(f, samples, rate, format="FLAC", subtype="PCM_16")
        resampled.append(dataclasses.replace(utt, audio=str(path.absolute()), offset=None,
                                             duration=len(samples) / rate))
    return write_manifest(out, resampled)
