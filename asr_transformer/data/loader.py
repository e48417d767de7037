"""Training and validation batches from manifests.

Features are computed on the fly (when training, with the augmentations of AugmentConfig: speed perturbation,
silence and non-speech sounds around the speech, vocal tract length perturbation, white noise, a random microphone,
SpecAugment), padded into batches (`collate`) of the indices a sampler plans (`sampler.FrameBatchSampler`:
bounded by total feature frames). Augmentation randomness depends only on (seed, epoch, utterance)
(`draws.py`), so results do not depend on worker count or on where a resumed run restarts; the speed factor and
the margins too, so the sampler batches each utterance by the length it will have in that epoch.

An utterance whose audio cannot be read (say a WAV holding NaN samples, found only when read) does not stop a
run: it is left out of its batch with a warning naming it, once, and each pass over the data ends with how many
were left out (`SkippingLoader`).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field

import torch

from asr_transformer.config import AugmentConfig, DataConfig, FeatureConfig
from asr_transformer.data.audio import AudioError, load_audio, load_utterance
from asr_transformer.data.draws import (margin_frames, seeded_generator, seeded_random, silence_frames, sound_frames,
                                        speed_factor, vtlp_warp)
from asr_transformer.data.features import (add_noise, add_silence, fbank, num_frames, random_equalizer, spec_augment,
                                           speaker_means, speed_perturb)
from asr_transformer.data.manifest import Utterance
from asr_transformer.data.sampler import FRAME_MULTIPLE, TOKEN_MULTIPLE, FrameBatchSampler, round_up
from asr_transformer.data.sounds import load_sounds, rms, sound_stretch
from asr_transformer.data.tokenizer import Tokenizer
from asr_transformer.frames import subsampled_length
from asr_transformer.tokens import UNK

log = logging.getLogger(__name__)


@dataclass
class Unreadable:
    """An utterance whose audio cannot be read: what `UtteranceDataset` gives in place of its item."""
    id: str
    message: str  # the AudioError's: file and what is wrong


_warned: set[tuple[str, str]] = set()  # (id, message) of the unreadable utterances warned about in this process


def warn_unreadable(utt_id: str, message: str) -> None:
    """One line on stderr, once per utterance and process, for an utterance left out because its audio cannot be
    read."""
    if (utt_id, message) not in _warned:
        _warned.add((utt_id, message))
        print(f"warning: utterance '{utt_id}' left out: {message}; fix the file or remove the utterance from the "
              f"manifest", file=sys.stderr, flush=True)


@dataclass
class Batch:
    ids: list[str]
    feats: torch.Tensor  # (B, T, F) float32, zero padded
    feat_lens: torch.Tensor  # (B,) int64
    tokens: torch.Tensor  # (B, L) int64, padded with -1
    token_lens: torch.Tensor  # (B,) int64
    texts: list[str]  # normalized references
    speaker_mean: torch.Tensor | None = None  # (B, F) float32: each utterance's speaker's mean log-mel (speaker_cmn)
    unreadable: list[Unreadable] = field(default_factory=list)  # the sampler's utterances left out of this batch

    def to(self, device, non_blocking: bool = False) -> "Batch":
        """The batch's tensors on `device`; `non_blocking` copies from pinned memory without waiting for them."""
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "Batch":
        """The batch in page-locked memory (DataLoader's pin_memory=True calls it), so copies to a GPU overlap."""
        return self._map(torch.Tensor.pin_memory)

    def _map(self, f) -> "Batch":
        mean = None if self.speaker_mean is None else f(self.speaker_mean)
        return Batch(self.ids, f(self.feats), f(self.feat_lens), f(self.tokens), f(self.token_lens), self.texts, mean,
                     self.unreadable)

    @property
    def frames(self) -> int:
        return int(self.feat_lens.sum())


@dataclass
class FilterCounts:
    kept: int = 0
    too_short: int = 0
    too_long: int = 0
    unalignable: int = 0  # fewer subsampled frames than tokens: CTC cannot align
    empty_text: int = 0
    unpronounceable: int = 0  # a phone tokenizer's lexicon lacks one of the words

    def summary(self) -> str:
        return (f"kept {self.kept}, dropped {self.too_short} too short, {self.too_long} too long, "
                f"{self.unalignable} with more tokens than frames, {self.empty_text} with empty text"
                + (f", {self.unpronounceable} with a word outside the lexicon" if self.unpronounceable else ""))


def filter_utterances(
    utterances: list[Utterance], tokenizer: Tokenizer, data: DataConfig, features: FeatureConfig,
    subsampling: int, speed_factors: list[float] = (1.0,),
) -> tuple[list[Utterance], list[list[int]], FilterCounts]:
    """Drop what training cannot use; returns (kept utterances, their token ids, counts)."""
    counts = FilterCounts()
    kept, token_ids = [], []
    fastest, slowest = max(speed_factors), min(speed_factors)
    for utt in utterances:
        if utt.duration < data.min_duration:
            counts.too_short += 1
            continue
        if utt.duration / slowest > data.max_duration:  # as long as speed perturbation may make it
            counts.too_long += 1
            continue
        ids = tokenizer.encode(utt.text)
        if not ids:
            counts.empty_text += 1
            continue
        if tokenizer.model_type == "phone" and UNK in ids:
            counts.unpronounceable += 1
            continue
        frames = num_frames(int(utt.duration / fastest * features.sample_rate), features)
        if subsampled_length(frames, subsampling) < len(ids):
            counts.unalignable += 1
            continue
        kept.append(utt)
        token_ids.append(ids)
    counts.kept = len(kept)
    return kept, token_ids, counts


class UtteranceDataset(torch.utils.data.Dataset):
    """Item ``(index, epoch)`` → (id, features (T, F), token ids, normalized text, speaker mean (F,) or None).

    With ``speaker_cmn`` each utterance carries its speaker's mean log-mel over the clean (unperturbed, unwarped,
    noiseless) features of all that speaker's utterances here (`speaker_means`), computed once at construction.
    With ``cache_audio`` the features of each (utterance, speed factor, warp) are computed once and kept
    in memory (SpecAugment is drawn afresh on top of them every epoch); with dither or noise, which make
    features random, the decoded waveforms are kept too.
    """

    def __init__(self, utterances: list[Utterance], token_ids: list[list[int]], tokenizer: Tokenizer,
                 features: FeatureConfig, augment: AugmentConfig | None = None, seed: int = 0,
                 cache_audio: bool = False, speaker_cmn: bool = False):
        self.utterances = utterances
        self.token_ids = token_ids
        self.tokenizer = tokenizer
        self.features = features
        self.augment = augment
        self.seed = seed
        self.dither = features.dither if augment is not None else 0.0
        self.noise_prob = augment.noise_prob if augment is not None else 0.0
        self.cache: dict[tuple[int, float, float], torch.Tensor] | None = {} if cache_audio else None
        self.held: dict[int, bytes] = {}  # audio files' bytes read from shards, by utterance (`item_from_bytes`)
        self.margins = margin_frames(augment, features)  # silence and sounds around utterances (`around_frames`)
        self.sounds = (load_sounds(augment.sounds, features.sample_rate) if self.margins.sound_prob > 0
                       else [])  # augment.sounds' clips, unit RMS
        self.hop = int(features.sample_rate * features.frame_shift_ms / 1000)
        if self.noise_prob > 0:
            snr = augment.noise_snr
            if not (self.noise_prob <= 1.0 and len(snr) == 2 and snr[0] <= snr[1]):
                raise ValueError(f"augment.noise_prob must be in [0, 1] and augment.noise_snr [low, high] dB, got "
                                 f"{self.noise_prob} and {snr}")
        if augment is not None and not (0.0 <= augment.silence_prob <= 1.0 and augment.silence_seconds >= 0.0):
            raise ValueError(f"augment.silence_prob must be in [0, 1] and augment.silence_seconds ≥ 0, got "
                             f"{augment.silence_prob} and {augment.silence_seconds}")
        if augment is not None and not all(w > 0 for w in augment.vtlp_warps):
            raise ValueError(f"augment.vtlp_warps must be positive factors, got {augment.vtlp_warps}")
        if augment is not None and not (0.0 <= augment.eq_prob <= 1.0 and augment.eq_db >= 0.0):
            raise ValueError(f"augment.eq_prob must be in [0, 1] and augment.eq_db ≥ 0, got {augment.eq_prob} and "
                             f"{augment.eq_db}")
        self.speaker_mean = (speaker_means([u.speaker for u in utterances], self._clean_feats) if speaker_cmn
                             else None)

    def __len__(self) -> int:
        return len(self.utterances)

    def waveform(self, index: int) -> torch.Tensor:
        key = (index, 0.0, 0.0)  # factor 0: the waveform itself
        if self.cache is not None and key in self.cache:
            return self.cache[key]
        if index in self.held:
            samples = load_audio(self.held[index], sample_rate=self.features.sample_rate, allow_silent=True)
        else:
            samples = load_utterance(self.utterances[index], self.features.sample_rate)
        wave = torch.from_numpy(samples)
        if self.cache is not None and (self.dither > 0 or self.noise_prob > 0):
            self.cache[key] = wave
        return wave

    def feats(self, index: int, factor: float = 1.0, snr: float | None = None,
              noise_rng: torch.Generator | None = None, warp: float = 1.0, silence: tuple[int, int] = (0, 0),
              silence_rng: torch.Generator | None = None, sound: tuple[int, int] = (0, 0)) -> torch.Tensor:
        """Filterbank features (T, F) of utterance `index` played `factor`× faster, with `silence` frames of silence
        before and after it and `sound` frames of the augment.sounds beyond that (both drawn from `silence_rng`),
        with white noise at `snr` dB (drawn from `noise_rng`) when given, through a filterbank warped by `warp`
        (vocal tract length perturbation); features with noise, silence or sound are new every time, so never
        cached."""
        key = (index, factor, warp)
        fixed = snr is None and not any(silence) and not any(sound)
        if fixed and self.cache is not None and key in self.cache:
            return self.cache[key]
        wave = speed_perturb(self.waveform(index), factor)
        speech_level = rms(wave) if any(sound) else 0.0  # the sound's level follows the speech's, not its silence
        if any(silence):
            wave = add_silence(wave, silence[0] * self.hop, silence[1] * self.hop, silence_rng)
        if any(sound):
            wave = self._add_sound(wave, sound, speech_level, silence_rng)
        if snr is not None:
            wave = add_noise(wave, snr, noise_rng)
        feats = fbank(wave, self.features, dither=self.dither, warp=warp)
        if fixed and self.cache is not None and self.dither == 0:
            self.cache[key] = feats
        return feats

    def _add_sound(self, wave: torch.Tensor, sound: tuple[int, int], speech_level: float,
                   rng: torch.Generator) -> torch.Tensor:
        """`wave` (samples,) with `sound` frames of the augment.sounds before and after it, at augment.sound_db
        of `speech_level` (the speech's RMS) → (sound[0] + samples + sound[1],)."""
        low, high = self.augment.sound_db
        db = low + (high - low) * float(torch.rand(1, generator=rng))
        level = speech_level * 10 ** (db / 20)
        before = sound_stretch(self.sounds, sound[0] * self.hop, level, rng)
        after = sound_stretch(self.sounds, sound[1] * self.hop, level, rng)
        return torch.cat([before.to(wave.dtype), wave, after.to(wave.dtype)])

    def _clean_feats(self, index: int) -> torch.Tensor:
        """`feats(index)`, or no frames (0, F) when the audio cannot be read (warned about: its speaker's mean
        leaves it out)."""
        try:
            return self.feats(index)
        except AudioError as e:
            warn_unreadable(self.utterances[index].id, str(e))
            return torch.zeros(0, self.features.num_mel_bins)

    def noise_snr(self, epoch: int, index: int) -> float | None:
        """The SNR (dB) of the white noise utterance `index` gets in `epoch`, or None for none; a pure function of
        (seed, epoch, index), drawn apart from SpecAugment's generator (its masks do not change)."""
        if self.noise_prob <= 0.0:
            return None
        draw = seeded_random(self.seed, epoch, index, 2)
        if draw.random() >= self.noise_prob:
            return None
        low, high = self.augment.noise_snr
        return draw.uniform(low, high)

    def __getitem__(self, key: tuple[int, int]):
        """The item (see the class docstring), or `Unreadable` when the utterance's audio cannot be read."""
        index, epoch = key
        try:
            return self._item(index, epoch)
        except AudioError as e:
            return Unreadable(self.utterances[index].id, str(e))

    def item_from_bytes(self, index: int, epoch: int, data: bytes):
        """`self[(index, epoch)]` with the utterance's audio read from `data` (its file's bytes, from a shard)."""
        self.held[index] = data
        try:
            item = self[(index, epoch)]
        finally:
            del self.held[index]
        if isinstance(item, Unreadable):  # the error names the shard's member, not "<bytes>"
            item.message = item.message.replace("<bytes>", self.utterances[index].audio, 1)
        return item

    def _item(self, index: int, epoch: int):
        mean = None if self.speaker_mean is None else self.speaker_mean[index]
        if self.augment is None:
            feats = self.feats(index)
        else:
            rng = seeded_generator(self.seed, epoch, index)
            factor = speed_factor(self.augment.speed_factors, self.seed, epoch, index)
            warp = vtlp_warp(self.augment.vtlp_warps, self.seed, epoch, index)
            snr = self.noise_snr(epoch, index)
            noise_rng = None if snr is None else seeded_generator(self.seed, epoch, index, 1)
            silence = silence_frames(self.margins, self.seed, epoch, index)
            sound = sound_frames(self.margins, self.seed, epoch, index)
            feats = self.feats(index, factor, snr, noise_rng, warp, silence, seeded_generator(self.seed, epoch, index, 6),
                               sound)
            if self.augment.eq_prob > 0 and seeded_random(self.seed, epoch, index, 5).random() < self.augment.eq_prob:
                feats = random_equalizer(feats, self.augment.eq_db, seeded_generator(self.seed, epoch, index, 5))
            if mean is not None and self.augment.own_mean_prob > 0:  # as if transcribed alone: its own mean
                if seeded_random(self.seed, epoch, index, 3).random() < self.augment.own_mean_prob:
                    mean = feats.mean(0)
            feats = spec_augment(feats, self.augment, rng)
        utt = self.utterances[index]
        return utt.id, feats, self.token_ids[index], self.tokenizer.normalize(utt.text), mean


def collate(items) -> Batch | list[Unreadable]:
    """Dataset items → a padded Batch; the `Unreadable` among them go to its `unreadable` (all of them, as a list,
    when no item is left)."""
    unreadable = [x for x in items if isinstance(x, Unreadable)]
    items = [x for x in items if not isinstance(x, Unreadable)]
    if not items:
        return unreadable
    ids, feats, tokens, texts, means = zip(*items)
    feat_lens = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
    token_lens = torch.tensor([len(t) for t in tokens], dtype=torch.long)
    padded = torch.zeros(len(feats), round_up(int(feat_lens.max()), FRAME_MULTIPLE), feats[0].shape[1])
    for i, f in enumerate(feats):
        padded[i, : f.shape[0]] = f
    targets = torch.full((len(tokens), round_up(max(1, int(token_lens.max())), TOKEN_MULTIPLE)), -1, dtype=torch.long)
    for i, t in enumerate(tokens):
        targets[i, : len(t)] = torch.tensor(t, dtype=torch.long)
    speaker_mean = None if means[0] is None else torch.stack(means)
    return Batch(list(ids), padded, feat_lens, targets, token_lens, list(texts), speaker_mean, unreadable)


def make_loader(dataset: UtteranceDataset, sampler: FrameBatchSampler, num_workers: int = 0,
                placeholders: bool = False, pin_memory: bool = False) -> "SkippingLoader":
    """Batches from `num_workers` processes (0: this one); `pin_memory` for a trainer on a GPU."""
    # A private generator: creating an iterator must not draw from the global RNG, or a resumed
    # run (which creates one mid-epoch) would see different dropout masks than an uninterrupted one.
    return SkippingLoader(torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, collate_fn=collate, num_workers=num_workers,
        worker_init_fn=single_thread_worker if num_workers else None, persistent_workers=False,
        generator=torch.Generator(), pin_memory=pin_memory,
    ), placeholders)


class SkippingLoader:
    """A DataLoader's batches without the utterances whose audio cannot be read: each is warned about once (in
    this process, whichever worker read it), a batch of nothing else is left out (or, with `placeholders`, given
    as None, so that a trainer counting the sampler's batches stays in step with it), and a pass over the data
    that left any out ends with their count on stderr; `skipped` holds the count of the last (or current) pass."""

    def __init__(self, loader: torch.utils.data.DataLoader, placeholders: bool = False):
        self.loader = loader
        self.placeholders = placeholders
        self.skipped = 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        self.skipped = 0
        for batch in self.loader:
            unreadable = batch if isinstance(batch, list) else batch.unreadable
            for u in unreadable:
                warn_unreadable(u.id, u.message)
            self.skipped += len(unreadable)
            if isinstance(batch, Batch):
                yield batch
            elif self.placeholders:
                yield None
        if self.skipped:
            print(f"warning: {self.skipped} utterance(s) with unreadable audio left out of this pass over the data",
                  file=sys.stderr, flush=True)


def single_thread_worker(_worker_id: int) -> None:
    torch.set_num_threads(1)
