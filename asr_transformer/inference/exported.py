"""Run an exported model (`asr export`) with onnxruntime and numpy alone: PyTorch is never imported.

    from asr_transformer.inference.exported import ExportedRecognizer
    asr = ExportedRecognizer("exp/phone/onnx")
    print(asr.transcribe("audio.wav")["text"])

`asr transcribe --model DIR` takes this path when DIR is an export. Decoding modes (`EXPORTED_MODES`):
ctc (best path), ctc_beam (CTC prefix beam search), rescore (ctc_beam's n-best rescored by the attention decoder,
all positions at once: λ·log P_ctc + (1−λ)·log p_att + length bonus) and greedy (autoregressive attention
decoding, a step at a time with the key/value cache). Joint CTC/attention beam search and the n-gram LMs need the PyTorch package. Audio at
other rates than 16 kHz is resampled with torchaudio, so 16 kHz input keeps PyTorch out entirely.
"""

from __future__ import annotations

import math
import os
from dataclasses import fields, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from asr_transformer.config import DecodeConfig, FeatureConfig, from_dict, max_output_tokens
from asr_transformer.decode import Hypothesis
from asr_transformer.errors import UserError
from asr_transformer.fileio import read_json
from asr_transformer.numerals import spell_numbers
from asr_transformer.inference.segmenter import check_vad
from asr_transformer.threads import cpu_threads
from asr_transformer.tokens import BLANK, EOS, IGNORE_ID, MASK, PAD, SOS

FORMAT, VERSION = "asr-export", 1  # as export.py writes them (that module imports torch)
EXPORTED_MODES = ("ctc", "ctc_beam", "rescore", "greedy")
NEG_INF = -np.inf
INT16_SCALE = 32768.0


class ExportError(UserError, ValueError):
    """An export folder that cannot be run as asked; the message says what to change."""


def is_exported(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder written by `asr export`."""
    return Path(path).is_dir() and (Path(path) / "export.json").is_file()


# ----------------------------------------------------------------------------------------------- features


@lru_cache(maxsize=8)
def _mel_banks(num_bins: int, padded: int, sample_rate: int, low_freq: float = 20.0) -> np.ndarray:
    """Kaldi's triangular mel filters (num_bins, padded // 2 + 1), as features.mel_banks."""
    def mel(f):
        return 1127.0 * np.log1p(f / 700.0)

    low, high = mel(low_freq), mel(0.5 * sample_rate)
    delta = (high - low) / (num_bins + 1)
    i = np.arange(num_bins, dtype=np.float64)[:, None]
    left, center, right = low + i * delta, low + (i + 1) * delta, low + (i + 2) * delta
    m = mel(sample_rate / padded * np.arange(padded // 2, dtype=np.float64))[None, :]
    banks = np.maximum(np.minimum((m - left) / (center - left), (right - m) / (right - center)), 0.0)
    return np.pad(banks, ((0, 0), (0, 1))).astype(np.float32)  # the Nyquist bin gets no weight


def fbank(wave: np.ndarray, cfg: FeatureConfig = FeatureConfig()) -> np.ndarray:
    """(samples,) float in [-1, 1] → (frames, num_mel_bins) float32 log-mel energies; the numpy twin of
    `data.features.fbank` (Kaldi's: povey window, pre-emphasis 0.97, DC removal, snip edges); with
    ``cfg.kind == "whisper"`` Whisper's features (`whisper_log_mel`), as there."""
    if cfg.kind == "whisper":
        return whisper_log_mel(wave, cfg.num_mel_bins, int(cfg.pad_to_seconds * cfg.sample_rate))
    win = int(cfg.sample_rate * cfg.frame_length_ms / 1000)
    hop = int(cfg.sample_rate * cfg.frame_shift_ms / 1000)
    padded = 1 << (win - 1).bit_length()
    wave = np.asarray(wave, dtype=np.float32)
    if wave.size < win:
        return np.zeros((0, cfg.num_mel_bins), np.float32)
    frames = np.lib.stride_tricks.sliding_window_view(wave * np.float32(INT16_SCALE), win)[::hop]
    frames = frames - frames.mean(axis=1, keepdims=True)
    frames = np.concatenate([frames[:, :1] * (1 - 0.97), frames[:, 1:] - 0.97 * frames[:, :-1]], axis=1)
    window = ((0.5 - 0.5 * np.cos(2 * math.pi * np.arange(win) / (win - 1))) ** 0.85).astype(np.float32)
    power = np.abs(np.fft.rfft(frames * window, n=padded)) ** 2
    mel = power.astype(np.float32) @ _mel_banks(cfg.num_mel_bins, padded, cfg.sample_rate).T
    return np.log(np.maximum(mel, np.finfo(np.float32).eps)).astype(np.float32)


def whisper_log_mel(wave: np.ndarray, num_bins: int = 80, pad_to: int = 0) -> np.ndarray:
    """(samples,) float in [-1, 1] → (samples // 160, num_bins) float32; the numpy twin of
    `data.features.whisper_log_mel` (Whisper's features)."""
    wave = np.asarray(wave, dtype=np.float32)
    if wave.size < pad_to:
        wave = np.pad(wave, (0, pad_to - wave.size))
    n_fft, hop, frames = 400, 160, wave.size // 160
    if frames == 0:
        return np.zeros((0, num_bins), np.float32)
    if wave.size <= n_fft // 2:  # too short to reflect: zeros beyond the end, as the torch version
        wave = np.pad(wave, (0, n_fft // 2 + 1 - wave.size))
    padded = np.pad(wave, n_fft // 2, mode="reflect")
    window = (0.5 - 0.5 * np.cos(2 * math.pi * np.arange(n_fft) / n_fft)).astype(np.float32)  # periodic Hann
    chunks = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop][:frames]
    power = np.abs(np.fft.rfft(chunks * window, n=n_fft)) ** 2  # (frames, 201)
    log_mel = np.log10(np.maximum(power.astype(np.float32) @ _slaney_banks(num_bins, n_fft).T, 1e-10))
    log_mel = np.maximum(log_mel, log_mel.max() - 8.0)
    return ((log_mel + 4.0) / 4.0).astype(np.float32)


@lru_cache(maxsize=4)
def _slaney_banks(num_bins: int, n_fft: int, sample_rate: int = 16000) -> np.ndarray:
    """Slaney-scale triangular filters of unit area (num_bins, n_fft // 2 + 1), as features.slaney_mel_banks."""
    step = math.log(6.4) / 27.0
    to_mel = lambda hz: np.where(hz < 1000.0, 3.0 * hz / 200.0, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / step)  # noqa: E731
    to_hz = lambda mel: np.where(mel < 15.0, 200.0 * mel / 3.0, 1000.0 * np.exp(step * (mel - 15.0)))  # noqa: E731
    fft_hz = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    edges = to_hz(np.linspace(0.0, float(to_mel(np.float64(sample_rate / 2))), num_bins + 2))
    left, center, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    banks = np.maximum(np.minimum((fft_hz - left) / (center - left), (right - fft_hz) / (right - center)), 0.0)
    return (banks * (2.0 / (right - left))).astype(np.float32)


# ------------------------------------------------------------------------------------------- CTC search


def ctc_greedy(log_probs: np.ndarray, length: int) -> Hypothesis:
    """Best path of one utterance: log_probs (T, V) → tokens (repeats merged, blanks dropped), log P(path)."""
    best = log_probs[:length].argmax(-1)
    score = float(log_probs[np.arange(length), best].sum())
    tokens = [int(t) for i, t in enumerate(best) if t != BLANK and (i == 0 or t != best[i - 1])]
    return Hypothesis(tokens, score, {"ctc": score})


_HASH_MUL = 1_000_003  # prefix hash h·c = h·_HASH_MUL + c + 1 (int64, wrapping), as decode/ctc_prefix.py


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return (np.log(np.exp(x - safe).sum(axis=axis, keepdims=True)) + safe).squeeze(axis)


def ctc_prefix_beam_search(log_probs: np.ndarray, length: int, beam: int) -> list[Hypothesis]:
    """CTC prefix beam search over one utterance's log_probs (T, V), the numpy twin of
    `decode.ctc_prefix.ctc_prefix_beam_search` (the same steps, vectorized over beams × tokens): each frame,
    every prefix stays or grows by one of the `beam` most probable tokens; an extension equal to a prefix in the
    beam merges into it; the `beam` most probable survive. → hypotheses, best first."""
    x = log_probs[:length].astype(np.float32)
    T, V = x.shape
    W, K = beam, max(1, min(beam, V - 1))
    tokens_only = x.copy()
    tokens_only[:, BLANK] = NEG_INF
    top_tok = np.argsort(-tokens_only, axis=1, kind="stable")[:, :K]  # (T, K)
    top_lp = np.take_along_axis(x, top_tok, 1)
    pb = np.full(W, NEG_INF, np.float32)
    pb[0] = 0.0
    pnb = np.full(W, NEG_INF, np.float32)
    last, size, hsh = np.full(W, -1), np.zeros(W, np.int64), np.zeros(W, np.int64)
    parents, emits = [], []
    with np.errstate(over="ignore"):
        for t in range(T):
            ck, lk = top_tok[t], top_lp[t]
            total = np.logaddexp(pb, pnb)
            stay_b = total + x[t, BLANK]
            stay_nb = pnb + np.where(last >= 0, x[t, np.maximum(last, 0)], NEG_INF)
            ext = (np.where(ck[None, :] == last[:, None], pb[:, None], total[:, None]) + lk[None, :]).ravel()
            ext_hash = (hsh[:, None] * _HASH_MUL + ck[None, :] + 1).ravel()
            ext_size, ext_last = np.repeat(size + 1, K), np.tile(ck, W)
            match = ((hsh[:, None] == ext_hash[None, :]) & (size[:, None] == ext_size[None, :])
                     & (last[:, None] == ext_last[None, :]) & np.isfinite(total)[:, None])  # (W, W·K)
            stay_nb = np.logaddexp(stay_nb, _logsumexp(np.where(match, ext[None, :], NEG_INF), 1)).astype(np.float32)
            ext = np.where(match.any(0), NEG_INF, ext).astype(np.float32)
            idx = np.argsort(-np.concatenate([np.logaddexp(stay_b, stay_nb), ext]), kind="stable")[:W]
            stay = idx < W
            e = np.maximum(idx - W, 0)
            src = np.where(stay, idx, e // K)
            token = np.where(stay, -1, ext_last[e])
            pb = np.where(stay, stay_b[src], NEG_INF).astype(np.float32)
            pnb = np.where(stay, stay_nb[src], ext[e]).astype(np.float32)
            last, size = np.where(stay, last[src], token), np.where(stay, size[src], ext_size[e])
            hsh = np.where(stay, hsh[src], ext_hash[e])
            parents.append(src)
            emits.append(token)
    scores = np.logaddexp(pb, pnb)
    hyps = []
    for w in np.argsort(-scores, kind="stable"):
        if not np.isfinite(scores[w]):
            continue
        tokens, i = [], w
        for t in range(T - 1, -1, -1):  # backtrack the emitted tokens
            if emits[t][i] >= 0:
                tokens.append(int(emits[t][i]))
            i = parents[t][i]
        hyps.append(Hypothesis(tokens[::-1], float(scores[w]), {"ctc": float(scores[w])}))
    return hyps


# ------------------------------------------------------------------------------------------- recognizer


class ExportedRecognizer:
    """An `asr export` folder loaded into onnxruntime; the interface of `recognizer.Recognizer` that
    `transcribe.transcribe` uses (`config`, `options`, `tokenizer`, `decode_waves`, `decode_waves_with_ctc`, `text`,
    `transcribe`, word timestamps included).

    Args:
        folder: the export. threads: CPU threads for onnxruntime (0: OMP_NUM_THREADS when set, else all cores).
        options: DecodeConfig fields that override the export's decoding defaults (mode: one of EXPORTED_MODES).
    """

    def __init__(self, folder: str | os.PathLike, threads: int = 0, **options):
        import onnxruntime as ort

        from asr_transformer.data.tokenizer import tokenizer_from_bytes

        self.path = Path(folder)
        meta = read_json(self.path / "export.json")
        if meta.get("format") != FORMAT or meta.get("version", 0) > VERSION or meta.get("runtime") != "onnx":
            raise ExportError(f"{self.path}: not an ONNX export this toolkit reads (`asr export --format onnx`)")
        self.config = from_dict(meta["config"], f"{self.path}/export.json")
        known = {f.name for f in fields(DecodeConfig)}
        if set(options) - known:
            raise ExportError(f"unknown decoding option(s) {', '.join(sorted(set(options) - known))}")
        if options.get("language") or options.get("initial_prompt"):
            raise ExportError("language and initial_prompt: an export reads the prompt it was exported with; use the "
                              "model package")
        if options.get("hotwords"):
            raise ExportError("hotwords: an export decodes without them (onnxruntime's search has no context graph); "
                              "use the model package")
        if options.get("temperature") or options.get("temperature_increment"):
            raise ExportError("temperature: an export does not sample; use the model package")
        # a package's hotwords and fallback: unused here
        self.options = replace(self.config.decode, **{**options, "hotwords": [], "temperature": 0.0,
                                                      "temperature_increment": 0.0})
        self.modes = EXPORTED_MODES if self.config.model.ctc else ("greedy",)  # no CTC head: the decoder alone
        self._check_mode(self.options.mode)
        try:
            check_vad(self.options)
        except ValueError as e:
            raise ExportError(str(e)) from None
        self.tokenizer = tokenizer_from_bytes((self.path / meta["tokenizer"]).read_bytes(), meta["tokenizer_meta"])
        so = ort.SessionOptions()
        self.threads = so.intra_op_num_threads = cpu_threads(threads)
        so.log_severity_level = 3
        self.encoder = ort.InferenceSession(str(self.path / meta["files"]["encoder"]), so,
                                            providers=["CPUExecutionProvider"])
        self.decoder_step, self.decoder = (
            ort.InferenceSession(str(self.path / meta["files"][name]), so, providers=["CPUExecutionProvider"])
            for name in ("decoder_step", "decoder"))
        self.layers = sum(o.name.startswith("cross_kv_") for o in self.encoder.get_outputs())
        self.device, self.precision, self.lms = "cpu", meta.get("precision", "fp32"), {}
        m = self.config.model
        self.prompt = list(m.decoder_prompt)  # ids read before BEGIN (Whisper's start sequence)
        self.max_tokens = max_output_tokens(m)  # as Decoder.max_tokens

    def _check_mode(self, mode: str) -> None:
        if mode not in self.modes:
            more = "" if self.config.model.ctc else " (this model has no CTC head)"
            raise ExportError(f"mode {mode}: this export decodes with {', '.join(self.modes)}{more}; joint beam "
                              "search and LMs need the PyTorch package")

    def features(self, wave: np.ndarray) -> np.ndarray:
        return fbank(wave, self.config.features)

    def encode(self, feats: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Utterances' features [(T, F)] → CTC log-probs (B, T', V), encoder lengths (B,), cross keys|values."""
        lens = np.array([f.shape[0] for f in feats], np.int64)
        frames = max(int(lens.max()), 16)  # at least one encoder frame in the batch (padding changes no output)
        padded = np.zeros((len(feats), frames, self.config.features.num_mel_bins), np.float32)
        for i, f in enumerate(feats):
            padded[i, :f.shape[0]] = f
        outputs = self.encoder.run(None, {"feats": padded, "feat_lens": lens})
        if not self.config.model.ctc:  # no ctc_log_probs output
            return None, outputs[0], outputs[1:]
        ctc, enc_lens, *cross = outputs
        return ctc, enc_lens, cross

    def _step(self, tokens: np.ndarray, offset: int, enc_mask: np.ndarray, self_kv: list, cross: list):
        feeds = {"tokens": tokens.reshape(-1, 1).astype(np.int64), "offset": np.array([offset], np.int64),
                 "enc_mask": enc_mask}
        feeds.update({f"self_kv_{i}": kv for i, kv in enumerate(self_kv)})
        feeds.update({f"cross_kv_{i}": kv for i, kv in enumerate(cross)})
        log_probs, *self_kv = self.decoder_step.run(None, feeds)
        return log_probs, self_kv

    def _empty_cache(self, rows: int, cross: list) -> list[np.ndarray]:
        return [np.zeros((rows, 0, cross[0].shape[-1]), np.float32) for _ in range(self.layers)]

    def attention_scores(self, cross: list, enc_lens: np.ndarray, utt: np.ndarray, seqs: list[list[int]]) -> np.ndarray:
        """log p_att(y <eos> | x) of token sequences `seqs`, sequence m of utterance utt[m] (the teacher-forced
        decoder graph, as `search.attention_scores`)."""
        M, L = len(seqs), max((len(s) for s in seqs), default=0) + 1
        ys_in = np.full((M, L), PAD, np.int64)
        target = np.full((M, L), IGNORE_ID, np.int64)
        ys_in[:, 0] = SOS
        for m, s in enumerate(seqs):
            ys_in[m, 1:len(s) + 1] = s
            target[m, :len(s)] = s
            target[m, len(s)] = EOS
        kv = [c[utt] for c in cross]
        enc_mask = np.arange(kv[0].shape[1])[None, :] < enc_lens[utt][:, None]
        feeds = {"tokens": ys_in, "token_lens": np.array([len(s) + 1 for s in seqs], np.int64), "enc_mask": enc_mask}
        feeds.update({f"cross_kv_{i}": c for i, c in enumerate(kv)})
        log_probs = self.decoder.run(None, feeds)[0]  # (M, L, V), every position in one call
        picked = np.take_along_axis(log_probs, np.maximum(target, 0)[..., None], -1)[..., 0]
        return (picked * (target >= 0)).sum(1)

    def greedy(self, cross: list, enc_lens: np.ndarray, max_len_ratio: float) -> list[Hypothesis]:
        """Autoregressive greedy attention decoding of a batch, up to max_len_ratio × encoder frames tokens."""
        B, P = len(enc_lens), len(self.prompt)
        limit = np.maximum((enc_lens.astype(np.float64) * max_len_ratio).astype(np.int64), 1)
        if self.max_tokens is not None:
            limit = np.minimum(limit, self.max_tokens)
        enc_mask = np.arange(cross[0].shape[1])[None, :] < enc_lens[:, None]
        tokens, scores, done = [[] for _ in range(B)], np.zeros(B), np.zeros(B, bool)
        self_kv = self._empty_cache(B, cross)
        for position, prompt_id in enumerate(self.prompt):  # the prompt fills the cache first
            _, self_kv = self._step(np.full(B, prompt_id, np.int64), position, enc_mask, self_kv, cross)
        last = np.full(B, SOS, np.int64)
        for step in range(int(limit.max())):
            log_probs, self_kv = self._step(last, P + step, enc_mask, self_kv, cross)
            log_probs[:, [BLANK, SOS, MASK]] = NEG_INF
            last = log_probs.argmax(-1)
            for b in np.flatnonzero(~done):
                scores[b] += log_probs[b, last[b]]
                if last[b] == EOS:
                    done[b] = True
                else:
                    tokens[b].append(int(last[b]))
                    done[b] = len(tokens[b]) >= limit[b]
            if done.all():
                break
        return [Hypothesis(t, float(s), {"att": float(s)}) for t, s in zip(tokens, scores)]

    def decode_waves(self, waves: list[np.ndarray], speaker=None) -> list[Hypothesis]:
        """Utterances of 16 kHz mono samples, decoded together → the best hypothesis of each."""
        return self.decode_features([self.features(w) for w in waves], self.options)

    def decode_waves_with_ctc(self, waves: list[np.ndarray],
                              speaker=None) -> tuple[list[Hypothesis], list[np.ndarray]]:
        """As `decode_waves`, and each utterance's CTC log-probs (T'_b, V), to align its hypothesis with
        (`decode.align`, word timestamps)."""
        if not self.config.model.ctc:
            raise ExportError(f"{self.path}: word timestamps align with the CTC head, which this model does not have")
        ctc, enc_lens, cross = self.encode([self.features(w) for w in waves])
        return self._search(ctc, enc_lens, cross, self.options), [lp[:n] for lp, n in zip(ctc, enc_lens.tolist())]

    def decode_features(self, feats: list[np.ndarray], opts: DecodeConfig) -> list[Hypothesis]:
        """Utterances' log-mel features [(T, F)] decoded together with `opts` → the best hypothesis of each."""
        return self._search(*self.encode(feats), opts)

    def _search(self, ctc: np.ndarray, enc_lens: np.ndarray, cross: list, opts: DecodeConfig) -> list[Hypothesis]:
        """A batch's encoder outputs (`encode`) → the best hypothesis of each utterance with `opts`."""
        B, mode = len(enc_lens), opts.mode
        if int(enc_lens.max()) == 0:  # every utterance too short to give one encoder frame (as search.recognize)
            return [Hypothesis([], 0.0) for _ in range(B)]
        if mode == "ctc":
            return [ctc_greedy(ctc[b], int(enc_lens[b])) for b in range(B)]
        if mode == "greedy":
            return self.greedy(cross, enc_lens, opts.max_len_ratio)
        nbest = [ctc_prefix_beam_search(ctc[b], int(enc_lens[b]), opts.beam) for b in range(B)]
        if mode == "ctc_beam":
            return [h[0] if h else Hypothesis([], NEG_INF) for h in nbest]
        flat = [(b, h) for b, hyps in enumerate(nbest) for h in hyps]
        if not flat:
            return [Hypothesis([], NEG_INF) for _ in range(B)]
        att = self.attention_scores(cross, enc_lens, np.array([b for b, _ in flat]), [h.tokens for _, h in flat])
        best: list[Hypothesis] = [Hypothesis([], NEG_INF) for _ in range(B)]
        for (b, h), a in zip(flat, att):
            s = opts.ctc_weight * h.score + (1 - opts.ctc_weight) * a + opts.length_penalty * (len(h.tokens) + 1)
            if s > best[b].score:
                best[b] = Hypothesis(h.tokens, float(s), {"ctc": h.score, "att": float(a)})
        return best

    def text(self, tokens: list[int], mode: str | None = None) -> str:
        """Tokens → text for people (a phone model's: words, the nearest for a non-word), numbers written as the
        options say."""
        text = getattr(self.tokenizer, "transcript", self.tokenizer.decode)(tokens)
        return spell_numbers(text, self.options.numbers)

    def decode_manifest(self, manifest: str | os.PathLike, out: str | os.PathLike, modes: list[str] | None = None,
                        score: bool = True, skip_bad: bool = False) -> dict:
        """Decode a manifest with each of `modes` (default: the options' mode) and write what
        `Recognizer.decode_manifest` writes (hyp.jsonl, text, rtf.json with "runtime": "onnxruntime", and with
        `score` the scoring reports), with its policy for bad utterances (`skip_bad`, `decode_inputs.DecodeInputs`).
        → {mode: {"dir", "rtf", "decode_seconds", "audio_seconds", ["wer", "cer"]}}."""
        import time

        from asr_transformer.inference.decode_inputs import DecodeInputs
        from asr_transformer.inference.writers import write_decoding

        modes = list(modes or [self.options.mode])
        for m in modes:
            self._check_mode(m)
        folders = [Path(out)] if len(modes) == 1 else [Path(out) / m for m in modes]
        inputs = DecodeInputs(manifest, folders, skip_bad)
        utts, rate, size = inputs.utts, self.config.features.sample_rate, self.options.batch_size
        results: dict[str, dict[int, Hypothesis]] = {m: {} for m in modes}
        decode_time, feature_time, audio_seconds = dict.fromkeys(modes, 0.0), 0.0, 0.0
        t0 = time.perf_counter()
        for batch, waves in inputs.batches(size, rate):
            audio_seconds += sum(len(w) for w in waves) / rate
            feats = [self.features(w) for w in waves]
            feature_time += time.perf_counter() - t0
            for m in modes:
                t0 = time.perf_counter()
                results[m].update(zip(batch, self.decode_features(feats, replace(self.options, mode=m))))
                decode_time[m] += time.perf_counter() - t0
            t0 = time.perf_counter()  # the next batch's reading counts as feature time
        kept = inputs.finish(out)
        summary = {}
        model_mb = round(sum(f.stat().st_size for f in self.path.iterdir() if f.is_file()) / 1e6, 2)
        for m, folder in zip(modes, folders):
            about = {"mode": m, "device": "cpu", "threads": self.threads, "batch_size": size,
                     "precision": self.precision, "runtime": "onnxruntime", "model": str(self.path),
                     "model_mb": model_mb, "lm": None, "lm_order": None, "word_lm": None, "word_lm_order": None,
                     "word_lm_weight": None, "options": vars(replace(self.options, mode=m))}
            summary[m] = write_decoding(folder, [utts[i] for i in kept], [[results[m][i]] for i in kept], self.text,
                                        {"audio": audio_seconds, "decode": decode_time[m], "features": feature_time},
                                        about, self.tokenizer.normalizer, score)
            print(f"{m}: RTF {summary[m]['rtf']:.4f} ({decode_time[m]:.2f} s decoding {audio_seconds:.1f} s of audio "
                  f"with onnxruntime, {self.threads} threads, {self.precision}; features {feature_time:.2f} s)")
        return summary

    def recognize_arrays(self, waves: list[np.ndarray]) -> list[str]:
        """Utterances of 16 kHz mono samples, each decoded whole, in batches → texts."""
        size = self.options.batch_size
        return [self.text(h.tokens) for i in range(0, len(waves), size) for h in self.decode_waves(waves[i:i + size])]

    def transcribe(self, audio, *, max_segment: float = 20.0, progress=None, speaker=None,
                   word_timestamps: bool = False) -> dict:
        """One audio file of any length → {"text", "segments", "duration"} (with `word_timestamps`, each segment's
        "words"), as `Recognizer.transcribe`."""
        from asr_transformer.inference.transcribe import transcribe

        return transcribe(self, audio, max_segment=max_segment, progress=progress, speaker=speaker,
                          word_timestamps=word_timestamps)
