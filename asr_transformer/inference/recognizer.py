"""A model package loaded once, and the one way to recognize speech with it: arrays, files, manifests.

    from asr_transformer import Recognizer
    asr = Recognizer("exp/phone/model.pt")
    print(asr.transcribe("audio.wav")["text"])

A package carries its decoding defaults (mode, beam, weights: `asr package` sets them to the values chosen on
dev) and the n-gram LMs they use; a `Recognizer` decodes with them unless told otherwise: any `DecodeConfig`
field as a keyword (`Recognizer(path, beam=5)`), another ARPA file (`lm=`, `word_lm=`), or no LM
(`lm=False`, `word_lm=False`). Hotwords are a field too: `Recognizer(path, hotwords=["Kathleen", "Saint
Petersburg\t3"])` (decode/hotwords.py), and `with_hotwords` gives a recognizer with another list that shares the
model. `asr decode`, `asr transcribe`, `asr plot` and the benchmarks all decode
through this class.
"""

from __future__ import annotations

import copy
import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import torch

from asr_transformer.config import ConfigError, DecodeConfig, validate_decoding
from asr_transformer.data.audio import checked_samples
from asr_transformer.decode import Hypothesis
from asr_transformer.device import pick_device, synchronize
from asr_transformer.progress import progress_bar
from asr_transformer.threads import cpu_threads
from asr_transformer.decode.hotwords import HotwordError, context_graph
from asr_transformer.decode.fusion import fused_lms
from asr_transformer.decode.search import (BIASED_MODES, LM_MODES, DecodeError, check_modes, fusion_lm, read_lm,
                                           recognize, rescore, search_encoded, transcriber)
from asr_transformer.model.asr import NoCTCError
from asr_transformer.numerals import spell_numbers
from asr_transformer.package import check_precision, load_package, read_package
from asr_transformer.inference.segmenter import check_vad
from asr_transformer.inference.writers import write_decoding


class HotwordWarning(UserWarning):
    """Hotwords given with a decoding mode that cannot use them."""


class Recognizer:
    """A model package, loaded once, with its decoding setup.

    Args:
        package: a model package (`asr average`, `asr package`).
        device: cpu, cuda, cuda:N or auto. threads: CPU threads for torch (0: OMP_NUM_THREADS when set, else all cores).
        precision: fp32 | bf16 | fp16 | int8 | auto (`package.load_package`).
        lm, word_lm: the token / word n-gram LM: None (default) the package's own, if it has one; True the
            package's, an error if it has none; False none; a path: that ARPA file (`asr lm`, `asr lm --words`).
        options: DecodeConfig fields that override the package's decoding defaults (DecodeError when out of range).
    Attributes:
        model (ASRModel), tokenizer, config (the package's Config), options (the DecodeConfig in use), device,
        precision, lms ({"lm" | "word_lm": the file it came from: its name when the package stores it}).
    """

    def __init__(self, package: str | os.PathLike, *, device: str = "auto", precision: str = "fp32",
                 threads: int = 0, lm: str | os.PathLike | bool | None = None,
                 word_lm: str | os.PathLike | bool | None = None, **options):
        self.path = Path(package)
        try:
            torch.set_num_threads(cpu_threads(threads))
            self.device = pick_device(device)
            self.precision = check_precision(precision, self.device)
        except ValueError as e:  # DeviceError included
            raise DecodeError(str(e)) from None
        known = {f.name for f in fields(DecodeConfig)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise DecodeError(f"unknown decoding option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        try:  # before the model loads
            validate_decoding(replace(DecodeConfig(), **options))
        except ConfigError as e:
            raise DecodeError(str(e)) from None
        state = read_package(self.path)
        self.model, self.tokenizer, self.config = load_package(self.path, self.device, self.precision, state)
        self.options = replace(self.config.decode, **options)
        check_modes(self.options.mode, self.config.model)
        try:
            check_vad(self.options)
        except ValueError as e:
            raise DecodeError(str(e)) from None
        self.lms: dict[str, str] = {}
        self._lm_sources, self._stored_lms = {"lm": lm, "word_lm": word_lm}, state.get("lms") or {}
        self._fusion = None  # (the LM to fuse, its weight), read when a mode that fuses one first runs
        if self.options.mode in LM_MODES:
            self._fused()
        self.context = self._context()
        if self.options.language or self.options.initial_prompt:
            self._set_start()

    def _set_start(self, initial_prompt: str | None = None) -> None:
        """The options' language and initial prompt (or `initial_prompt`), as the ids a Whisper decoder reads before
        BEGIN; DecodeError for a package that reads none (its language is the one it was trained on) or a language
        it cannot take."""
        from asr_transformer.data.whisper_tokenizer import decoder_start

        if initial_prompt is None:
            initial_prompt = self.options.initial_prompt
        try:
            ids = decoder_start(self.tokenizer, self.options.language, initial_prompt,
                                self.config.model.max_target_positions)
            self.model.decoder.set_prompt(ids)
        except ValueError as e:  # WhisperTokenizerError, or a prompt that leaves no room
            raise DecodeError(str(e)) from None

    def _context(self):
        """The context graph of the options' hotwords (None without any); DecodeError for a phrase the model
        cannot write. Hotwords with a mode that cannot use them are said once, as a warning."""
        try:
            graph = context_graph(self.tokenizer, self.options.hotwords, self.options.hotword_score)
        except HotwordError as e:
            raise DecodeError(str(e)) from None
        if graph is not None and self.options.mode not in BIASED_MODES:
            warnings.warn(f"hotwords do not bias {self.options.mode} decoding (greedy searches keep no alternatives); "
                          f"use {', '.join(BIASED_MODES)}", HotwordWarning, stacklevel=3)
        return graph

    @property
    def reads_prompt(self) -> bool:
        """Whether the model reads an initial prompt (an imported Whisper)."""
        from asr_transformer.data.whisper_tokenizer import WhisperTokenizer

        return isinstance(self.tokenizer, WhisperTokenizer)

    @contextmanager
    def prompted(self, initial_prompt: str):
        """Inside the block, decode with `initial_prompt` in place of the options' (a server's per-request prompt);
        the options' own start is back after it. DecodeError for a model that reads no prompt. The prompt is the
        model's state, so one thread at a time decodes with a recognizer and the recognizers sharing its model."""
        own = self.model.decoder.prompt.tolist()
        self._set_start(initial_prompt)
        try:
            yield self
        finally:
            self.model.decoder.set_prompt(own)

    def with_hotwords(self, hotwords: list[str], hotword_score: float | None = None) -> "Recognizer":
        """A recognizer that shares this one's model, tokenizer and LMs, with another hotword list (each entry
        "phrase" or "phrase<TAB>score"; [] for none) — a server's per-request list."""
        other = copy.copy(self)
        other.options = replace(self.options, hotwords=list(hotwords),
                                hotword_score=self.options.hotword_score if hotword_score is None else hotword_score)
        other.context = other._context()
        return other

    def _fused(self) -> tuple:
        """(the LM to fuse or None, its weight): `search.fusion_lm` of the LMs, read on the first call."""
        if self._fusion is None:
            loaded = {kind: self._read_lm(kind, source) for kind, source in self._lm_sources.items()}
            self._fusion = fusion_lm(self.tokenizer, loaded["lm"], self.options.lm_weight, loaded["word_lm"],
                                     self.options.word_lm_weight)
        return self._fusion

    @property
    def fusion(self):
        """The LM fused in the beam, joint and rescore modes (an NgramLM, WordBoundaryLM or LexiconLM), or None."""
        return self._fused()[0]

    def _read_lm(self, kind: str, source):
        """The NgramLM of `kind` from `source` (see the class docstring), or None."""
        if source is False:
            return None
        if source is None or source is True:
            stored = self._stored_lms.get(kind)
            if stored is None:
                if source is True:
                    raise DecodeError(f"{self.path}: the package holds no {kind.replace('_', ' ')}")
                return None
            self.lms[kind] = stored["name"]
            return read_lm(stored["arpa_gz"].numpy().tobytes(), self.tokenizer, kind == "word_lm",
                           f"{self.path}:{stored['name']}")
        self.lms[kind] = str(source)
        return read_lm(source, self.tokenizer, kind == "word_lm")

    # ---------------------------------------------------------------------------------------- batches

    def features(self, wave: np.ndarray) -> torch.Tensor:
        """16 kHz mono samples (N,) → raw log-mel features (T, F) (the model applies its CMVN)."""
        from asr_transformer.data.features import fbank

        return fbank(torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32)), self.config.features)

    def recognize(self, feats: torch.Tensor, feat_lens: torch.Tensor, mode: str | None = None,
                  speaker_mean: torch.Tensor | None = None) -> list[list[Hypothesis]]:
        """Decode a batch: feats (B, T, F) raw log-mel, feat_lens (B,) → per utterance its n-best, best first.
        `mode` overrides the options' mode; the LMs take part in the modes that fuse one (beam, joint, rescore);
        speaker_mean (B, F) as `search.recognize`."""
        opts, lm = self._mode_options(mode)
        return recognize(self.model, feats, feat_lens, opts, lm=lm, speaker_mean=speaker_mean, context=self.context,
                         text_of=lambda tokens: self.text(tokens, opts.mode), no_speech=self._no_speech())

    def _no_speech(self) -> tuple[int, int] | None:
        """A Whisper package's (<|startoftranscript|>, no-speech token) ids, where its decoder reads the first
        (Whisper's silence check, decode/fallback.py); else None."""
        ids = getattr(self.tokenizer, "no_speech", None)
        return ids if ids is not None and bool((self.model.decoder.prompt == ids[0]).any()) else None

    def _mode_options(self, mode: str | None, **changes) -> tuple[DecodeConfig, object]:
        """(the options with `mode` (default: theirs) and `changes`, the LM that mode fuses or None): the LMs take
        part in beam, joint and rescore only."""
        mode = mode or self.options.mode
        lm, weight = self._fused() if mode in LM_MODES else (None, 0.0)
        return replace(self.options, mode=mode, lm_weight=weight, **changes), lm

    def rescore(self, enc: torch.Tensor, nbest: list[Hypothesis]) -> Hypothesis:
        """One utterance's CTC n-best rescored as the `rescore` mode does (attention decoder, the LMs, the options'
        CTC weight and length bonus) → the best. enc (1, T', D): the utterance's encoder output."""
        lm, weight = self._fused()
        with torch.inference_mode():
            best = rescore(self.model, enc, torch.tensor([enc.size(1)]), [nbest], self.options.ctc_weight,
                           self.options.length_penalty, lm, weight, self.context)[0][0]
        return best

    def search(self, enc: torch.Tensor, mode: str | None = None) -> Hypothesis:
        """One utterance decoded from its encoder output enc (1, T', D) (a stream's chunks) in `mode` (default:
        the options' mode), with the LMs where the mode fuses them → the best hypothesis."""
        opts, lm = self._mode_options(mode, nbest=1)
        with torch.inference_mode():
            return search_encoded(self.model, enc, torch.tensor([enc.size(1)], device=enc.device), opts, lm=lm,
                                  context=self.context, text_of=lambda tokens: self.text(tokens, opts.mode),
                                  no_speech=self._no_speech())[0][0]

    def text(self, tokens: list[int], mode: str | None = None) -> str:
        """A hypothesis' tokens → its text (a phone model's: words, through the LM's lexicon where it took part,
        else the tokenizer's nearest words)."""
        mode = mode or self.options.mode
        text = transcriber(self.tokenizer, self.fusion if mode in LM_MODES else None)(tokens)
        return spell_numbers(text, self.options.numbers)

    def decode_waves(self, waves: list[np.ndarray], speaker=None) -> list[Hypothesis]:
        """Utterances of 16 kHz mono samples, decoded together → the best hypothesis of each.
        speaker: a model.speaker_cmn model's `CMVNAccumulator` of the speaker's features so far; these are added
        to it first, and all are normalized by its mean (see `transcribe.transcribe`)."""
        feats, lens, speaker_mean = self._batch(waves, speaker)
        hyps = self.recognize(feats, lens, speaker_mean=speaker_mean)
        return _best(hyps)

    def decode_waves_with_ctc(self, waves: list[np.ndarray],
                              speaker=None) -> tuple[list[Hypothesis], list[np.ndarray]]:
        """As `decode_waves`, and each utterance's CTC log-probs (T'_b, V) float32, to align its hypothesis with
        (`decode.align`, word timestamps). The encoder runs once more for them."""
        if self.model.ctc is None:
            raise NoCTCError("word timestamps align the words with the CTC head, which this model does not have "
                             "(an imported Whisper: import it with --ctc and fine-tune that head)")
        feats, lens, speaker_mean = self._batch(waves, speaker)
        hyps = self.recognize(feats, lens, speaker_mean=speaker_mean)
        with torch.inference_mode():
            enc, enc_lens = self.model.encode(feats, lens.to(self.device), speaker_mean)
            log_probs = self.model.ctc_log_probs(enc).cpu().numpy()
        return (_best(hyps),
                [lp[:n] for lp, n in zip(log_probs, enc_lens.tolist())])

    def decode_waves_with_attention(self, waves: list[np.ndarray],
                                    speaker=None) -> tuple[list[Hypothesis], list[tuple[np.ndarray, np.ndarray]]]:
        """As `decode_waves`, and for each utterance what times its words without a CTC head: its hypothesis
        read again by the decoder, giving the `attention_align.alignment_matrix` (L + 1, T') of the alignment
        heads over the frames of its audio, and the decoder's probability of each of its L tokens."""
        from asr_transformer.decode.attention_align import alignment_matrix
        from asr_transformer.tokens import EOS, SOS

        feats, lens, speaker_mean = self._batch(waves, speaker)
        hyps = _best(self.recognize(feats, lens, speaker_mean=speaker_mean))
        hop = self.config.features.sample_rate * self.config.features.frame_shift_ms / 1000
        out = []
        with torch.inference_mode():
            enc, enc_lens = self.model.encode(feats, lens.to(self.device), speaker_mean)
            for b, (hyp, wave) in enumerate(zip(hyps, waves)):
                n = int(enc_lens[b])
                tokens = torch.tensor([[SOS] + hyp.tokens], device=self.device)
                weights, logits = self.model.decoder.alignment(
                    enc[b:b + 1, :n], torch.ones(1, n, dtype=torch.bool, device=self.device), tokens,
                    torch.tensor([tokens.size(1)], device=self.device), self.config.model.alignment_heads)
                probs = torch.softmax(logits[0].float(), -1).gather(
                    1, torch.tensor(hyp.tokens + [EOS], device=self.device).unsqueeze(1)).squeeze(1)
                frames = min(n, int(np.ceil(len(wave) / hop / self.config.model.subsampling)))  # not the padding
                out.append((alignment_matrix(weights[0].float().cpu().numpy(), frames), probs[:-1].cpu().numpy()))
        return hyps, out

    def _batch(self, waves: list[np.ndarray],
               speaker=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Samples → padded raw log-mel (B, T, F) on the device, lengths (B,), and the speaker mean (B, F) or None
        (see `decode_waves`)."""
        feats = [self.features(w) for w in waves]
        lens = torch.tensor([f.size(0) for f in feats])
        padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True).to(self.device)
        speaker_mean = None
        if speaker is not None:
            for f in feats:
                speaker.add(f)
            speaker_mean = torch.from_numpy(speaker.mean()).float().to(self.device).expand(len(feats), -1)
        return padded, lens, speaker_mean

    def recognize_arrays(self, waves: list[np.ndarray]) -> list[str]:
        """Utterances of 16 kHz samples ((n,) or (n, channels) float arrays, checked as files are), each decoded
        whole, in batches of `options.batch_size` → texts. For long recordings use `transcribe`, which splits at
        silences. AudioError naming the array ("array 2: …") for one that is not audio."""
        if isinstance(waves, np.ndarray) or not isinstance(waves, (list, tuple)):
            raise DecodeError(f"recognize_arrays takes a list of arrays, got {type(waves).__name__} (one utterance: "
                              "[samples])")
        waves = [checked_samples(w, f"array {i}") for i, w in enumerate(waves)]
        size = self.options.batch_size
        return [self.text(h.tokens) for i in range(0, len(waves), size) for h in self.decode_waves(waves[i:i + size])]

    # ------------------------------------------------------------------------------------------ files

    def transcribe(self, audio, *, max_segment: float | None = None, progress=None, speaker=None,
                   word_timestamps: bool = False) -> dict:
        """One audio file of any length (a path, the bytes of a file, or a 1-D float32 array at 16 kHz) →
        {"text", "segments": [{"start", "end", "text", "score"}], "duration"}; with `word_timestamps` each segment
        also has "words": [{"word", "start", "end", "probability"}]. max_segment: seconds (None:
        transcribe.MAX_SEGMENT). See `transcribe.transcribe`."""
        from asr_transformer.inference.transcribe import MAX_SEGMENT, transcribe

        if not isinstance(audio, (np.ndarray, str, os.PathLike, bytes, bytearray)):  # arrays: transcribe checks them
            raise DecodeError(f"transcribe takes a path, the bytes of an audio file or an array of 16 kHz samples, "
                              f"got {type(audio).__name__}" + (" (several files: call it for each)"
                                                               if isinstance(audio, (list, tuple)) else ""))
        if max_segment is None:
            max_segment = MAX_SEGMENT
        return transcribe(self, audio, max_segment=max_segment, progress=progress, speaker=speaker,
                          word_timestamps=word_timestamps)

    # -------------------------------------------------------------------------------------- manifests

    def decode_manifest(self, manifest: str | os.PathLike, out: str | os.PathLike, modes: list[str] | None = None,
                        score: bool = True, skip_bad: bool = False) -> dict:
        """Decode every utterance of a manifest with each of `modes` (default: the options' mode).

        Writes, into `out` (one mode) or `out/<mode>/` (several): `hyp.jsonl` ({"id", "text", "ref", "tokens",
        "score"}, and "nbest" when options.nbest > 1), a Kaldi-style `text` file (`<id> <hyp>`, sorted by id),
        `rtf.json` (decode wall time of the batches — encoder and search, features excluded — audio seconds,
        RTF; feature time apart; precision, options and LMs), and with `score`, `result.txt`/`alignments.txt`/
        `result.json` (asr_transformer.scoring), all at the end.
        Before decoding, every line and audio header is checked (`decode_inputs.DecodeInputs`): a bad utterance, or one
        whose samples turn out unreadable, stops it with ManifestError before anything is written, or with
        `skip_bad` is left out and listed in `out/skipped.jsonl`.
        Returns {mode: {"dir", "rtf", "decode_seconds", "audio_seconds", ["wer", "cer"]}}.
        """
        from asr_transformer.inference.decode_inputs import DecodeInputs

        modes = check_modes(modes or [self.options.mode], self.config.model)
        folders = [Path(out)] if len(modes) == 1 else [Path(out) / m for m in modes]
        inputs = DecodeInputs(manifest, folders, skip_bad)
        t0 = time.perf_counter()
        means = self._speaker_means(inputs)
        means_seconds = time.perf_counter() - t0  # feature time too
        results, times = self._decode_inputs(inputs, modes, means)
        times["features"] += means_seconds
        kept = inputs.finish(out)
        summary = {}
        for m, folder in zip(modes, folders):
            summary[m] = write_decoding(folder, [inputs.utts[i] for i in kept], [results[m][i] for i in kept],
                                        lambda t: self.text(t, m),
                                        {"audio": times["audio"], "decode": times[m], "features": times["features"]},
                                        self._about(m), self.tokenizer.normalizer, score)
            print(f"{m}: RTF {summary[m]['rtf']:.4f} ({times[m]:.2f} s decoding {times['audio']:.1f} s of audio "
                  f"on {self.device}, {torch.get_num_threads()} threads, {self.precision}; features "
                  f"{times['features']:.2f} s, RTF {times['features'] / max(times['audio'], 1e-9):.4f})")
        return summary

    def _speaker_means(self, inputs) -> dict | None:
        """model.speaker_cmn: a first pass over the audio for each speaker's mean log-mel (no transcripts used);
        None for other models."""
        if not self.config.model.speaker_cmn:
            return None
        from asr_transformer.data.features import speaker_means

        rate = self.config.features.sample_rate

        def speaker_feats(i: int) -> torch.Tensor:
            """Utterance i's log-mel (T, F); none (0, F) when its audio cannot be read."""
            wave = inputs.load(i, rate)
            return torch.zeros(0, self.config.features.num_mel_bins) if wave is None else self.features(wave)

        return speaker_means([u.speaker for u in inputs.utts], speaker_feats)

    def _decode_inputs(self, inputs, modes: list[str], means: dict | None) -> tuple[dict, dict]:
        """Decode the readable utterances of `inputs` in batches with each mode. → ({mode: {index: n-best}},
        {mode: decoding seconds, "audio": audio seconds, "features": seconds reading and computing features}).
        Decoding time is the encoder and search, synchronized on CUDA."""
        rate = self.config.features.sample_rate
        results: dict[str, dict[int, list[Hypothesis]]] = {m: {} for m in modes}
        times = {**dict.fromkeys(modes, 0.0), "audio": 0.0, "features": 0.0}
        with progress_bar() as bar:
            task = bar.add_task(f"decode {','.join(modes)}", total=len(inputs.utts))
            t0 = time.perf_counter()
            for batch, waves in inputs.batches(self.options.batch_size, rate, lambda n: bar.advance(task, n)):
                feats = [self.features(w) for w in waves]
                times["audio"] += sum(len(w) for w in waves) / rate
                lens = torch.tensor([f.size(0) for f in feats])
                padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True).to(self.device)
                speaker_mean = None if means is None else torch.stack([means[i] for i in batch]).to(self.device)
                synchronize(self.device)
                times["features"] += time.perf_counter() - t0
                for m in modes:
                    t0 = time.perf_counter()
                    hyps = self.recognize(padded, lens, m, speaker_mean)
                    synchronize(self.device)
                    times[m] += time.perf_counter() - t0
                    results[m].update(zip(batch, hyps))
                t0 = time.perf_counter()  # the next batch's reading counts as feature time
        return results, times

    def _about(self, mode: str) -> dict:
        """What decided a decoding's hypotheses besides the audio, for its rtf.json: device, precision, options, LMs."""
        return {
            "mode": mode, "device": str(self.device), "threads": torch.get_num_threads(),
            "batch_size": self.options.batch_size, "precision": self.precision, "runtime": "pytorch",
            "model": str(self.path), "model_mb": round(self.path.stat().st_size / 1e6, 2),
            **fused_lms(self.fusion if mode in LM_MODES else None, self.lms, self.options.word_lm_weight),
            "options": vars(replace(self.options, mode=mode))}


def _best(nbest_lists: list[list[Hypothesis]]) -> list[Hypothesis]:
    """Each utterance's best hypothesis (an empty one scored -inf where its list is empty)."""
    return [hyps[0] if hyps else Hypothesis([], float("-inf")) for hyps in nbest_lists]
