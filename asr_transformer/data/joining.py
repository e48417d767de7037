"""Consecutive utterances joined into longer training examples (`asr join`), e.g. 10–30-s windows for Whisper.

A model fine-tuned only on single sentences learns that an utterance is one sentence: it stops after the first
of two and drops words from long recordings. Joining keeps long outputs in the training data. Utterances are
taken in manifest order, one speaker at a time (a speaker change starts a new example); each example grows until
the next utterance would pass its target length, drawn for each example uniformly between `min_seconds` and
`max_seconds` from `seed`, so short and long windows both occur. The audio of an example is its utterances played
one after another with `gap_seconds` of silence between them, written as one 16-bit FLAC file
`<audio_dir>/<first id>+<count>.flac`; its text is theirs joined by spaces. A prompt read more than once (takes
of one sentence) is never joined with itself, which would teach the model to repeat: the first take of each text
comes first, then the second takes, and so on. Where the order means nothing (isolated words such as digits, listed
word by word), `shuffle` first puts each speaker's utterances in a random order (from `seed`), so that examples are
not the same sequence over and over. Every file is written atomically and the manifest last.
"""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path
from urllib.parse import quote

import numpy as np
import soundfile as sf

from asr_transformer.data.audio import load_utterance
from asr_transformer.progress import track
from asr_transformer.data.manifest import ManifestError, Utterance, read_manifest, write_manifest
from asr_transformer.fileio import atomic_open


def plan_examples(utterances: list[Utterance], min_seconds: float, max_seconds: float, gap_seconds: float,
                  seed: int = 0, shuffle: bool = False) -> list[list[Utterance]]:
    """Group consecutive utterances of one speaker (the first take of each text in manifest order, then the second
    takes, …; with `shuffle`, each speaker's in a random order, speakers in order of appearance) into examples of
    at most their drawn target length (an utterance longer than that is an example of its own); every utterance
    is in exactly one group, and no group holds a text twice."""
    if not 0 < min_seconds <= max_seconds:
        raise ManifestError(f"join lengths: need 0 < min ≤ max seconds, got {min_seconds:g} and {max_seconds:g}")
    draw = random.Random(seed)
    if shuffle:
        by_speaker: dict[str | None, list[Utterance]] = {}
        for utt in utterances:
            by_speaker.setdefault(utt.speaker, []).append(utt)
        utterances = [u for group in by_speaker.values() for u in draw.sample(group, len(group))]
    takes: dict[str, int] = {}
    rounds: list[list[Utterance]] = []
    for utt in utterances:
        take = takes[utt.text] = takes.get(utt.text, -1) + 1
        rounds += [[] for _ in range(take + 1 - len(rounds))]
        rounds[take].append(utt)
    groups: list[list[Utterance]] = []
    target, length = 0.0, 0.0
    for utt in (u for takes_of_round in rounds for u in takes_of_round):
        fits = groups and groups[-1][-1].speaker == utt.speaker and length + gap_seconds + utt.duration <= target
        if fits:
            groups[-1].append(utt)
            length += gap_seconds + utt.duration
        else:
            groups.append([utt])
            target, length = draw.uniform(min_seconds, max_seconds), utt.duration
    return groups


def join_manifest(manifest: str | os.PathLike, out: str | os.PathLike, min_seconds: float = 10.0,
                  max_seconds: float = 30.0, gap_seconds: float = 0.3, audio_dir: str | os.PathLike | None = None,
                  sample_rate: int = 16000, seed: int = 0, shuffle: bool = False) -> int:
    """Write `out`: the utterances of `manifest` joined into examples (see the module docstring), their audio in
    `audio_dir` (default: `joined` beside `out`); returns how many examples were written."""
    out = Path(out)
    audio_dir = Path(audio_dir) if audio_dir is not None else out.parent / "joined"
    audio_dir.mkdir(parents=True, exist_ok=True)
    groups = plan_examples(read_manifest(manifest), min_seconds, max_seconds, gap_seconds, seed, shuffle)
    silence = np.zeros(int(round(gap_seconds * sample_rate)), dtype=np.float32)
    joined = []
    for group in track(groups, f"joining {Path(manifest).name}", total=len(groups)):
        parts = []
        for utt in group:
            parts += [silence, load_utterance(utt, sample_rate)] if parts else [load_utterance(utt, sample_rate)]
        samples = np.concatenate(parts)
        example_id = group[0].id if len(group) == 1 else f"{group[0].id}+{len(group) - 1}"
        path = audio_dir / f"{quote(example_id, safe='')}.flac"
        with atomic_open(path, "wb") as f:
            sf.write(f, samples, sample_rate, format="FLAC", subtype="PCM_16")
        joined.append(dataclasses.replace(group[0], id=example_id, audio=str(path.absolute()), offset=None,
                                          duration=len(samples) / sample_rate,
                                          text=" ".join(u.text for u in group)))
    return write_manifest(out, joined)
