"""An offline, multi-voice synthetic speech corpus: grammar sentences spoken by espeak-ng (and flite).

``prepare(out_dir)`` writes ``out_dir/wav/<split>/<id>.wav`` (16 kHz 16-bit mono),
``out_dir/{train,dev,test}.jsonl`` manifests, ``out_dir/speakers.json`` and ``out_dir/summary.json``.

A *speaker* is an engine voice with settings: for espeak-ng a language voice (accent, e.g.
``en-us``, ``en-gb-scotland``), a voice *variant* (``f3``, ``m2``, ``klatt4``: pitch, formants,
breathiness) and a speaking rate, pitch and pitch range; for flite one of its voices and a rate.

What is held out: the espeak variants are split into families of near-identical variants (e.g.
``linda``/``belinda``/``aunty``/``f4``), and every family belongs to one split only
(:data:`DEV_VARIANTS`, :data:`TEST_VARIANTS`, the rest train). So a dev or test speaker's variant,
and therefore its voice+variant combination, never occurs in train, nor in the other held-out
split. The accents (:data:`VOICES`) occur in every split. Flite voices are split whole
(:data:`FLITE_SPLITS`). Dev and test sentences come from their own grammar streams and never
occur in train (or, for dev, in test).

Determinism: espeak-ng keeps synthesis state (pitch flutter, wave phase) in C statics that
carry over from one utterance to the next, so utterances are synthesized in fixed *lanes* of
:data:`LANE` consecutive utterances, each lane in a fresh worker process. The same seed gives
the same texts, speakers and audio bytes whatever ``jobs`` is.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import multiprocessing as mp
import os
import random
import shutil
import subprocess
import tempfile
import time
import zlib
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import soundfile as sf

from asr_transformer.data.corpora import grammar
from asr_transformer.data.audio import SAMPLE_RATE, block_reach, resample
from asr_transformer.data.manifest import Utterance, write_manifest
from asr_transformer.fileio import write_json

FORMAT = "asr-synthetic-summary"
VERSION = 1
SPLITS = ("train", "dev", "test")
LANE = 32  # utterances per fresh synthesis process (part of what fixes the audio bytes)
KEEP_SILENCE = 0.1  # seconds of silence kept before and after speech

# espeak-ng English voices (accents) in the bundled data; en-shaw (Shavian script) left out.
VOICES = ["en-us", "en", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd",
          "en-029", "en-us-nyc"]

# Variants in espeak-ng-data/voices/!v, grouped by family where files are near copies.
# Left out as hard to understand or broken for this purpose: whispered (whisper, whisperf,
# caleb), heavy echo or roughness (Demonic, RicishayMax*, robosoft*, announcer, UniRobot,
# anikaRobot), zeroed formants (Andy, AnxiousAndy, Lee, Jacky, ian, sandro, kaukovalta, Tweaky),
# a child's pitch (zac), 'fast' (a test file) and 'Mr serious' (a space in its name).
TRAIN_VARIANTS = [
    "m1", "m2", "m4", "m5", "m7", "m8", "Nguyen", "f1", "f3", "f5", "Alicia", "Andrea", "Annie",
    "anika", "shelby", "grandma", "grandpa", "croak", "Alex", "Mike", "mike2", "gustave",
    "marcelo", "Diogo", "Henrique", "Hugo", "michel", "miguel", "Marco", "antonio", "pablo",
    "pedro", "john", "norbert", "max", "boris", "paul", "quincy", "rob", "iven", "iven2", "iven3",
    "iven4", "travis", "Storm", "victor", "Denis", "ed", "adam", "benjamin", "Reed", "klatt",
    "klatt2", "klatt3", "klatt4", "klatt5", "klatt6",
]
DEV_VARIANTS = ["f2", "steph", "steph2", "steph3", "m6", "Mario", "Michael", "edward", "edward2"]
TEST_VARIANTS = ["f4", "aunty", "linda", "belinda", "m3", "Gene", "Gene2", "david", "robert"]
SPLIT_VARIANTS = {"train": TRAIN_VARIANTS, "dev": DEV_VARIANTS, "test": TEST_VARIANTS}
SPEAKERS_PER_COMBINATION = {"train": 2, "dev": 1, "test": 1}

# flite voices (Debian package): kal and kal16 are one speaker; awb_time is limited-domain.
FLITE_SPLITS = {"train": ["kal", "kal16", "awb"], "dev": ["rms"], "test": ["slt"]}
FLITE_RATES = {"train": [150, 175, 200], "dev": [175], "test": [175]}

RATE_RANGE = (115, 185)  # espeak words per minute (default 175; espeak speaks fast)
PITCH_RANGE = (30, 70)  # espeak 0-100 (default 50)
INTONATION_RANGE = (25, 75)  # espeak pitch range 0-100 (default 50)


@dataclass(frozen=True)
class Speaker:
    """One synthetic speaker: engine, voice, variant and prosody settings."""

    id: str
    engine: str  # "espeak" or "flite"
    voice: str
    variant: str = ""
    rate: int = 175  # words per minute
    pitch: int = 50
    range: int = 50


# ---------------------------------------------------------------- voices and speakers


def espeak_data_path() -> Path:
    import espeakng_loader

    return Path(espeakng_loader.get_data_path())


def espeak_variants() -> list[str]:
    """Variant names in the bundled espeak-ng-data/voices/!v."""
    folder = espeak_data_path() / "voices" / "!v"
    return sorted(p.name for p in folder.iterdir() if p.is_file())


def flite_voices() -> list[str]:
    """Voices of the `flite` binary on PATH ([] when there is none)."""
    exe = shutil.which("flite")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "-lv"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return out.split(":", 1)[-1].split()


def build_speakers(seed: int = 0, flite: bool = True) -> dict[str, list[Speaker]]:
    """Speakers per split: every accent × the split's variants (× 2 in train), random prosody.

    Variants missing from the installed espeak data are skipped; flite voices are added when
    `flite` is on PATH. Deterministic given `seed` and what is installed.
    """
    have = set(espeak_variants())
    fl = set(flite_voices()) if flite else set()
    rng = random.Random(f"speakers-{seed}")
    speakers: dict[str, list[Speaker]] = {}
    for split in SPLITS:
        out = []
        for voice in VOICES:
            for variant in SPLIT_VARIANTS[split]:
                for k in range(SPEAKERS_PER_COMBINATION[split]):
                    rate, pitch, intonation = (rng.randint(*RATE_RANGE), rng.randint(*PITCH_RANGE),
                                               rng.randint(*INTONATION_RANGE))
                    if variant in have:
                        sid = f"es-{voice}-{variant.lower()}-{k}"
                        out.append(Speaker(sid, "espeak", voice, variant, rate, pitch, intonation))
        for voice in FLITE_SPLITS[split]:
            if voice in fl:
                out += [Speaker(f"fl-{voice}-{r}", "flite", voice, rate=r) for r in FLITE_RATES[split]]
        speakers[split] = out
    return speakers


# ---------------------------------------------------------------- engines


class Espeak:
    """The espeak-ng shared library, synchronous mode; one per process (it is not thread-safe)."""

    RATE, PITCH, RANGE = 1, 3, 4  # espeak_PARAMETER
    SYNCHRONOUS, CHARS_UTF8, POS_CHARACTER, DONT_EXIT = 2, 1, 1, 0x8000

    def __init__(self) -> None:
        import espeakng_loader

        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                     ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        lib.espeak_Info.restype = ctypes.c_char_p
        rate = lib.espeak_Initialize(self.SYNCHRONOUS, 1000, espeakng_loader.get_data_path().encode(),
                                     self.DONT_EXIT)
        if rate <= 0:
            raise RuntimeError(f"espeak-ng failed to initialize with data {espeakng_loader.get_data_path()}")
        self.lib, self.sample_rate = lib, rate
        self.version = lib.espeak_Info(None).decode()
        self._chunks: list[np.ndarray] = []
        callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                                         ctypes.c_void_p)
        self._callback = callback_type(self._collect)  # keep a reference: C holds the pointer
        lib.espeak_SetSynthCallback(self._callback)

    def _collect(self, wav, count, events) -> int:
        if wav and count > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        return 0  # continue

    def synth(self, text: str, speaker: Speaker, seed: int = 0) -> np.ndarray:
        """Speak `text` → (samples,) int16 at `self.sample_rate`."""
        name = f"{speaker.voice}+{speaker.variant}" if speaker.variant else speaker.voice
        if self.lib.espeak_SetVoiceByName(name.encode()) != 0:
            raise RuntimeError(f"espeak-ng has no voice '{name}'")
        for param, value in ((self.RATE, speaker.rate), (self.PITCH, speaker.pitch), (self.RANGE, speaker.range)):
            self.lib.espeak_SetParameter(param, value, 0)
        if hasattr(self.lib, "espeak_ng_SetRandSeed"):
            self.lib.espeak_ng_SetRandSeed(ctypes.c_long(seed))
        self._chunks = []
        data = text.encode("utf-8")
        err = self.lib.espeak_Synth(data, len(data) + 1, 0, self.POS_CHARACTER, 0, self.CHARS_UTF8, None, None)
        self.lib.espeak_Synchronize()
        if err != 0:
            raise RuntimeError(f"espeak-ng failed on '{text}' (error {err})")
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)


def synth_flite(text: str, speaker: Speaker) -> tuple[np.ndarray, int]:
    """Speak `text` with the flite binary → (samples float32, sample rate)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.wav")
        stretch = f"{175 / speaker.rate:.3f}"
        cmd = ["flite", "-voice", speaker.voice, "--setf", f"duration_stretch={stretch}", "-t", text, "-o", out]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"flite failed ({proc.returncode}): {proc.stderr.strip()[:200]}")
        samples, rate = sf.read(out, dtype="float32", always_2d=True)
    return samples.mean(axis=1), rate


def trim_silence(samples: np.ndarray, rate: int, keep: float = KEEP_SILENCE, floor_db: float = -45.0) -> np.ndarray:
    """Cut leading/trailing silence beyond `keep` seconds (10 ms frames below peak + floor_db)."""
    x = samples.astype(np.float32)
    hop = max(1, rate // 100)
    n = len(x) // hop
    if n == 0:
        return samples
    energy = (x[: n * hop].reshape(n, hop) ** 2).mean(axis=1)
    if energy.max() <= 0:
        return samples[:0]
    loud = np.flatnonzero(energy > energy.max() * 10 ** (floor_db / 10))
    start = max(0, loud[0] * hop - int(keep * rate))
    end = min(len(x), (loud[-1] + 1) * hop + int(keep * rate))
    return samples[start:end]


def to_pcm16(samples: np.ndarray) -> np.ndarray:
    return np.clip(np.round(samples * 32767.0), -32768, 32767).astype(np.int16)


def resample_many(signals: list[np.ndarray], rate: int, out_rate: int = SAMPLE_RATE) -> list[np.ndarray]:
    """Resample several float32 signals at `rate` to `out_rate` in one call (one filter, one conv).

    Each signal is zero-padded to whole resampling blocks (rate/gcd samples, 20 ms for 22050 Hz)
    and followed by enough blocks of zeros to cover the filter's reach (`block_reach`), so no signal
    leaks into the next and each piece equals resampling that padded signal alone. Ratios that
    `resample` does not hand to torchaudio (odd rates: blocks of up to a second) are resampled one
    signal at a time.
    """
    reach = block_reach(rate, out_rate)
    if rate == out_rate or reach is None:
        return [resample(x, rate, out_rate) for x in signals]
    block_in = rate // math.gcd(rate, out_rate)
    block_out = out_rate // math.gcd(rate, out_rate)
    gap = -(-reach // block_in)  # whole blocks of zeros between signals
    blocks = [-(-len(x) // block_in) for x in signals]  # ceil
    joined = np.zeros((sum(blocks) + gap * len(signals)) * block_in, np.float32)
    start = 0
    for x, n in zip(signals, blocks):
        joined[start:start + len(x)] = x
        start += (n + gap) * block_in
    out = resample(joined, rate, out_rate)
    pieces, start = [], 0
    for n in blocks:
        pieces.append(out[start:start + n * block_out])
        start += (n + gap) * block_out
    return pieces


def _synth_lane(job: tuple[list[tuple[str, str, Speaker, str]], int]) -> list[tuple[str, float, str | None]]:
    """Worker: synthesize one lane (id, text, speaker, wav path) in order, written at the job's sample
    rate → (id, seconds, error)."""
    lane, out_rate = job
    import torch

    torch.set_num_threads(1)
    engine: Espeak | None = None
    made: dict[int, list[tuple[str, str, np.ndarray]]] = {}  # sample rate → (id, path, samples)
    results: dict[str, tuple[float, str | None]] = {}
    for uid, text, speaker, path in lane:
        try:
            if speaker.engine == "espeak":
                engine = engine or Espeak()
                pcm, rate = engine.synth(text, speaker, seed=zlib.crc32(uid.encode())), engine.sample_rate
                samples = pcm.astype(np.float32) / 32768.0
            else:
                samples, rate = synth_flite(text, speaker)
            samples = trim_silence(samples, rate)
            if len(samples) < rate // 10 or not samples.any():
                raise RuntimeError("synthesis produced no audio")
            made.setdefault(rate, []).append((uid, path, samples.astype(np.float32)))
        except Exception as e:  # counted and reported, never silently dropped
            results[uid] = (0.0, f"{type(e).__name__}: {e}")
    for rate, group in sorted(made.items()):
        for (uid, path, _), audio in zip(group, resample_many([x for _, _, x in group], rate, out_rate)):
            try:
                pcm16 = to_pcm16(audio)
                tmp = f"{path}.tmp.wav"
                sf.write(tmp, pcm16, out_rate, subtype="PCM_16", format="WAV")
                os.replace(tmp, path)
                results[uid] = (len(pcm16) / out_rate, None)
            except Exception as e:
                results[uid] = (0.0, f"{type(e).__name__}: {e}")
    return [(uid, *results[uid]) for uid, *_ in lane]


# ---------------------------------------------------------------- texts and plans


def _cycle_speakers(speakers: list[Speaker], seed: str) -> Iterator[Speaker]:
    """Speakers in a fresh seeded shuffle per round, so every speaker gets a fair share."""
    for round_ in range(1_000_000_000):
        order = list(speakers)
        random.Random(f"{seed}-{round_}").shuffle(order)
        yield from order


def _cycle_texts(texts: list[str], seed: str) -> Iterator[str]:
    for round_ in range(1_000_000_000):
        order = list(texts)
        random.Random(f"{seed}-{round_}").shuffle(order)
        yield from order


def _unique(stream: Iterable[str], n: int, exclude: set[str], max_tries: int) -> tuple[list[str], bool]:
    """Up to `n` distinct texts from `stream` not in `exclude`; (texts, whether all were disjoint)."""
    out: list[str] = []
    seen = set(exclude)
    tries = 0
    it = iter(stream)
    while len(out) < n and tries < max_tries:
        text = next(it)
        tries += 1
        if text not in seen:
            seen.add(text)
            out.append(text)
    if len(out) < n:  # grammar exhausted: fill with repeats, and say so
        out += list(islice(it, n - len(out)))
        return out, False
    return out, True


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _sub_seed(seed: int, name: str) -> int:
    return zlib.crc32(f"{name}-{seed}".encode())


# ---------------------------------------------------------------- prepare


def prepare(
    out_dir: str | os.PathLike,
    hours_train: float = 1.0,
    utts_dev: int = 200,
    utts_test: int = 200,
    seed: int = 0,
    text_file: str | os.PathLike | None = None,
    jobs: int | None = None,
    share_texts: bool = False,
    train_weights: dict[str, float] | None = None,
    sample_rate: int = SAMPLE_RATE,
) -> dict:
    """Synthesize train (about `hours_train` hours), dev and test; write wavs, manifests, summary.

    Texts come from :mod:`asr_transformer.data.corpora.grammar` or, with `text_file`, from its lines
    (shuffled; about a tenth each reserved for dev and test when the file has 10+ sentences; with `share_texts`
    every split speaks every line, for a closed vocabulary such as digits: the voices stay disjoint).
    `train_weights` changes the grammar's mix of sentence categories in train only (e.g. ``{"letters": 24}``
    for more spelled letters); dev and test keep the grammar's own mix.
    `sample_rate` is the rate of the written files: 8000 gives telephone-band speech (nothing above 4 kHz)
    to match a corpus recorded at 8 kHz.
    Returns the summary written to ``out_dir/summary.json``.
    """
    start_time = time.perf_counter()
    out_dir = Path(out_dir).resolve()
    jobs = max(1, jobs or os.cpu_count() or 1)
    speakers = build_speakers(seed)
    _make_folders(out_dir, speakers)
    if train_weights and text_file is not None:
        raise ValueError("train_weights reweigh the grammar's categories; a text file has none")
    texts = _Texts.make(seed, text_file, utts_dev, utts_test, share_texts, train_weights)
    with _Synthesizer(out_dir, jobs, sample_rate) as synth:
        train_texts = _synthesize_train(synth, texts.train, speakers["train"], hours_train * 3600.0, seed)
        disjoint = _synthesize_held_out(synth, texts, speakers, train_texts, utts_dev, utts_test, seed)
    for split in SPLITS:
        write_manifest(out_dir / f"{split}.jsonl", synth.records[split])
    write_json(out_dir / "speakers.json", {split: [asdict(s) for s in speakers[split]] for split in SPLITS})
    summary = _summary(synth, speakers, seed, text_file, disjoint, train_weights, jobs, time.perf_counter() - start_time)
    write_json(out_dir / "summary.json", summary)
    return summary


def _make_folders(out_dir: Path, speakers: dict[str, list[Speaker]]) -> None:
    """An empty out_dir/wav/<split>/ per split (an earlier run's files removed); RuntimeError when a split has no
    speakers."""
    for split in SPLITS:
        if not speakers[split]:
            raise RuntimeError(f"no {split} speakers: espeak-ng data at {espeak_data_path()} lacks the variants")
        folder = out_dir / "wav" / split
        if folder.exists():
            shutil.rmtree(folder)  # stale files of an earlier run
        folder.mkdir(parents=True)


@dataclass
class _Texts:
    """The sentence streams of the splits: a train stream, and dev/test streams disjoint from train where
    possible. `k_dev`, `k_test`: lines of a text file reserved for dev and test (None with the grammar)."""

    train: Iterator[str]
    dev: Iterator[str]
    test: Iterator[str]
    from_grammar: bool
    k_dev: int | None = None
    k_test: int | None = None

    @classmethod
    def make(cls, seed: int, text_file, utts_dev: int, utts_test: int, share_texts: bool, train_weights) -> "_Texts":
        if text_file is None:
            return cls(grammar.sentences(seed, train_weights), grammar.sentences(_sub_seed(seed, "dev")),
                       grammar.sentences(_sub_seed(seed, "test")), from_grammar=True)
        lines = list(dict.fromkeys(grammar.read_text_file(text_file)))
        random.Random(f"textfile-{seed}").shuffle(lines)
        k_dev, k_test = (0, 0) if share_texts else (min(utts_dev, len(lines) // 10), min(utts_test, len(lines) // 10))
        test_lines, dev_lines = lines[:k_test] or lines, lines[k_test:k_test + k_dev] or lines
        train_lines = lines[k_test + k_dev:] or lines
        return cls(_cycle_texts(train_lines, f"train-{seed}"), _cycle_texts(dev_lines, f"dev-{seed}"),
                   _cycle_texts(test_lines, f"test-{seed}"), from_grammar=False, k_dev=k_dev, k_test=k_test)


class _Synthesizer:
    """A pool of synthesis workers and a progress bar per split; collects the utterances made (`records`) and
    the failures (`failed`)."""

    def __init__(self, out_dir: Path, jobs: int, sample_rate: int):
        self.out_dir, self.jobs, self.sample_rate = out_dir, jobs, sample_rate
        self.records: dict[str, list[Utterance]] = {split: [] for split in SPLITS}
        self.failed: list[str] = []
        self.tasks: dict[str, tuple] = {}  # split → (progress task, planned count)

    def __enter__(self) -> "_Synthesizer":
        from asr_transformer.progress import progress_bar

        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(method)
        if method == "forkserver":  # import once in the server, fork cheaply per lane
            ctx.set_forkserver_preload([__name__, "torch", "torchaudio.functional"])
        self._stack = contextlib.ExitStack()
        self.pool = self._stack.enter_context(ctx.Pool(self.jobs, maxtasksperchild=1))
        self.progress = self._stack.enter_context(progress_bar())
        return self

    def __exit__(self, *exc) -> bool:
        return self._stack.__exit__(*exc)

    def plan(self, split: str, texts: Iterator[str], speaker_cycle: Iterator[Speaker], first: int,
             n: int) -> list[tuple[str, str, Speaker, str]]:
        """The next `n` utterances of `split` (numbered from `first`): (id, text, speaker, wav path)."""
        plan = []
        for i, text in enumerate(islice(texts, n), first):
            spk = next(speaker_cycle)
            uid = f"{spk.id}_{split}{i:06d}"
            plan.append((uid, text, spk, str(self.out_dir / "wav" / split / f"{uid}.wav")))
        return plan

    def run(self, split: str, plan: list[tuple[str, str, Speaker, str]]) -> dict[str, float]:
        """Synthesize `plan` in lanes; return id → seconds (failures recorded, left out)."""
        if split not in self.tasks:
            self.tasks[split] = (self.progress.add_task(f"synthesizing {split}", total=0), 0)
        task, total = self.tasks[split]
        self.tasks[split] = (task, total + len(plan))
        self.progress.update(task, total=total + len(plan))
        lanes = [plan[i:i + LANE] for i in range(0, len(plan), LANE)]
        seconds: dict[str, float] = {}
        for lane_result in self.pool.imap_unordered(_synth_lane, [(lane, self.sample_rate) for lane in lanes]):
            for uid, duration, error in lane_result:
                if error is None:
                    seconds[uid] = duration
                else:
                    self.failed.append(f"{uid}: {error}")
            self.progress.advance(task, len(lane_result))
        return seconds

    def keep(self, split: str, plan, seconds: dict[str, float]) -> None:
        """Record the utterances of `plan` that were made."""
        for uid, text, spk, path in plan:
            if uid in seconds:
                self.records[split].append(Utterance(uid, path, seconds[uid], text, spk.id))


def _synthesize_train(synth: _Synthesizer, stream: Iterator[str], speakers: list[Speaker], target: float,
                      seed: int) -> set[str]:
    """Train: plan in batches until `target` seconds are reached, then drop the overshoot. → the texts spoken."""
    cycle = _cycle_speakers(speakers, f"train-{seed}")
    total, count, mean = 0.0, 0, 1.8  # mean seconds per utterance, re-estimated per batch
    train_texts: set[str] = set()
    while total < target:
        n = max(LANE, math.ceil((target - total) / mean * 1.02))
        plan = synth.plan("train", stream, cycle, count, n)
        count += n
        seconds = synth.run("train", plan)
        for item in plan:
            uid, path = item[0], item[3]
            if uid not in seconds:
                continue
            if total >= target:
                os.unlink(path)
                continue
            total += seconds[uid]
            train_texts.add(item[1])
            synth.keep("train", [item], seconds)
        done = [seconds[i[0]] for i in plan if i[0] in seconds]
        if not done:
            raise RuntimeError("synthesis failed for a whole batch: " + "; ".join(synth.failed[:3]))
        mean = sum(done) / len(done)
    return train_texts


def _synthesize_held_out(synth: _Synthesizer, texts: _Texts, speakers: dict[str, list[Speaker]],
                         train_texts: set[str], utts_dev: int, utts_test: int, seed: int) -> bool:
    """Test, then dev: their own sentences (with the grammar: none of train's, nor dev of test's) spoken by their
    own voices. → whether all the splits' texts are disjoint."""
    disjoint = texts.from_grammar or (texts.k_dev > 0 and texts.k_test > 0)
    held_out: set[str] = set()
    for split, stream, n in (("test", texts.test, utts_test), ("dev", texts.dev, utts_dev)):
        if texts.from_grammar:
            chosen, ok = _unique(stream, n, train_texts | held_out, max_tries=200 * n + 1000)
        else:
            chosen, ok = list(islice(stream, n)), disjoint
        disjoint = disjoint and ok
        held_out.update(chosen)
        plan = synth.plan(split, iter(chosen), _cycle_speakers(speakers[split], f"{split}-{seed}"), 0, n)
        synth.keep(split, plan, synth.run(split, plan))
    return disjoint


def _summary(synth: _Synthesizer, speakers: dict[str, list[Speaker]], seed: int, text_file, disjoint: bool,
             train_weights, jobs: int, wall: float) -> dict:
    """What summary.json says: the splits, what is held out, the engines, failures and speed."""
    records = synth.records
    audio = sum(u.duration for split in SPLITS for u in records[split])
    return {
        "format": FORMAT,
        "version": VERSION,
        "seed": seed,
        "texts": "grammar" if text_file is None else str(Path(text_file).resolve()),
        "texts_disjoint": disjoint,
        "sample_rate": synth.sample_rate,
        "train_weights": grammar.category_weights(train_weights) if text_file is None else None,
        "splits": {
            split: {
                "utterances": len(records[split]),
                "hours": round(sum(u.duration for u in records[split]) / 3600.0, 4),
                "speakers": len({u.speaker for u in records[split]}),
                "speakers_defined": len(speakers[split]),
            }
            for split in SPLITS
        },
        "held_out": {
            "dev_variants": [v for v in DEV_VARIANTS if any(s.variant == v for s in speakers["dev"])],
            "test_variants": [v for v in TEST_VARIANTS if any(s.variant == v for s in speakers["test"])],
            "flite": {split: sorted({s.voice for s in speakers[split] if s.engine == "flite"}) for split in SPLITS},
            "accents_shared": VOICES,
            "rule": "dev and test espeak variants (whole families of near-identical variants) and "
                    "flite voices never occur in train; accents occur in every split",
        },
        "engines": {"espeakng_loader": _version("espeakng-loader"), "flite": bool(flite_voices())},
        "failed": len(synth.failed),
        "failures": synth.failed[:20],
        "jobs": jobs,
        "lane": LANE,
        "audio_seconds": round(audio, 2),
        "wall_seconds": round(wall, 2),
        "x_realtime": round(audio / wall, 1),  # seconds of audio made per second of wall time
        "realtime_factor": round(wall / audio, 5) if audio else None,  # wall / audio
    }
