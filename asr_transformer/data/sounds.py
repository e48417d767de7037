"""Non-speech sounds beside the speech, a training augmentation (augment.sounds, sound_prob, sound_seconds, sound_db).

A model trained only on utterances cut close to their speech has never heard a bell, a ring tone or a jingle, and
writes words into them when a long recording puts them next to speech. With this augmentation an utterance gets,
on one side, a stretch of such sounds (clips of a folder of real recordings, drawn and joined) at a level drawn
relative to its speech, and its transcript stays the same: the model learns that those sounds carry no words.
"""

from __future__ import annotations

from pathlib import Path

import torch

from asr_transformer.data.audio import AUDIO_EXTENSIONS, AudioError, load_audio
from asr_transformer.errors import UserError

MIN_SOUND_SECONDS = 0.5  # the shortest stretch of sound an utterance gets


def load_sounds(folder: str | Path, sample_rate: int) -> list[torch.Tensor]:
    """Every sound file under `folder` (recursively) → (samples,) float32 waveforms at `sample_rate`, each
    scaled to an RMS of 1; silent files are left out. UserError naming the folder when none is named, it is
    missing or it holds no sound, or naming the file that cannot be read."""
    if not str(folder):
        raise UserError("augment.sound_prob > 0 puts sounds beside the utterances, but augment.sounds names no folder "
                        "of them: set it (`--set augment.sounds=FOLDER`) or set augment.sound_prob to 0")
    return list(sound_files(folder, sample_rate, "augment.sounds").values())


def sound_files(folder: str | Path, sample_rate: int, option: str) -> dict[Path, torch.Tensor]:
    """`load_sounds`, each waveform under its file's path; errors begin with `option`, the setting that named
    the folder."""
    root = Path(folder)
    if not root.is_dir():
        raise UserError(f"{option}: no folder {root}")
    clips = {}
    for path in sorted(p for p in root.rglob("*") if p.suffix.lower() in AUDIO_EXTENSIONS):
        try:
            wave = torch.from_numpy(load_audio(path, sample_rate=sample_rate, allow_silent=True))
        except AudioError as e:
            raise UserError(f"{option}: {e}") from e
        level = rms(wave)
        if level > 0:
            clips[path] = wave / level
    if not clips:
        raise UserError(f"{option}: {root} holds no sound file that is not silent (files ending in "
                        f"{', '.join(sorted(AUDIO_EXTENSIONS))})")
    return clips


def rms(wave: torch.Tensor) -> float:
    """Root mean square of a waveform (samples,)."""
    return float(wave.double().pow(2).mean().sqrt()) if wave.numel() else 0.0


def sound_stretch(clips: list[torch.Tensor], samples: int, level: float, rng: torch.Generator) -> torch.Tensor:
    """`samples` samples of sound: clips drawn from `clips` (unit RMS) one after another, the first from a random
    start within it, scaled to RMS `level` → (samples,)."""
    parts, held = [torch.zeros(0)], 0
    while held < samples:
        clip = clips[int(torch.randint(len(clips), (1,), generator=rng))]
        if held == 0:  # begin anywhere in the first clip, so a long clip does not always open the same way
            clip = clip[int(torch.randint(len(clip), (1,), generator=rng)):]
        parts.append(clip)
        held += len(clip)
    return torch.cat(parts)[:samples] * level
