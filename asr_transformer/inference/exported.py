"""Run an exported model (`asr export`) with onnxruntime and numpy alone: PyTorch is never imported.

    from asr_transformer.inference.exported import ExportedRecognizer
    asr = ExportedRecognizer("exp/phone/onnx")
    print(asr.transcribe("audio.wav")["text"])

`asr transcribe --model DIR` takes this path when DIR is an export. It decodes as the package does, with the
package's searches written in numpy (`exported_search.py`) and its LMs and hotwords (numpy objects of `decode/`):
the modes of `EXPORTED_MODES` (ctc, ctc_beam, rescore, greedy, beam, joint, and maskctc where the model's decoder
learned it; a model without a CTC head: greedy and beam), the token and word LMs (and a phone model's lexicon) that
the export stores, in beam, joint and rescore, and hotwords in beam, joint, ctc_beam and rescore. Not here:
sampling (temperature), and a Whisper model's prompt options and silence check. Audio at other rates than 16 kHz
is resampled with torchaudio, so 16 kHz input keeps PyTorch out entirely.
"""

from __future__ import annotations

import os
from dataclasses import fields, replace
from pathlib import Path

import numpy as np

from asr_transformer.config import DecodeConfig, from_dict, max_output_tokens
from asr_transformer.decode import Hypothesis
from asr_transformer.decode.fallback import ctc_silence, no_speech_silence
from asr_transformer.decode.fusion import BIASED_MODES, LM_MODES, fused_lms, fusion_lm, read_lm, transcriber
from asr_transformer.decode.maskctc import fill_masks, greedy_with_confidence, with_sos
from asr_transformer.errors import DecodeError, UserError
from asr_transformer.fileio import read_json
from asr_transformer.frames import chunk_frames
from asr_transformer.inference.exported_features import fbank
from asr_transformer.inference.exported_search import beam_search, ctc_prefix_beam_search, split_at_pauses
from asr_transformer.numerals import spell_numbers
from asr_transformer.inference.segmenter import check_vad
from asr_transformer.threads import cpu_threads
from asr_transformer.tokens import BLANK, EOS, IGNORE_ID, MASK, PAD, SOS

FORMAT, VERSION = "asr-export", 1  # as export.py writes them (that module imports torch)
EXPORTED_MODES = ("ctc", "ctc_beam", "rescore", "greedy", "beam", "joint", "maskctc")
ATTENTION_MODES = ("greedy", "beam")  # what a model without a CTC head decodes with
NEG_INF = -np.inf


def export_modes(model) -> tuple[str, ...]:
    """The modes an export of a model of ModelConfig `model` decodes with: maskctc where its decoder learned to fill
    masked tokens (model.nat_weight), the attention decoder's alone without a CTC head."""
    if not model.ctc:
        return ATTENTION_MODES
    return EXPORTED_MODES if model.nat_weight > 0 else tuple(m for m in EXPORTED_MODES if m != "maskctc")


class ExportError(UserError, ValueError):
    """An export folder that cannot be run as asked; the message says what to change."""


def is_exported(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder written by `asr export`."""
    return Path(path).is_dir() and (Path(path) / "export.json").is_file()


# ------------------------------------------------------------------------------------------- recognizer


class ExportedRecognizer:
    """An `asr export` folder loaded into onnxruntime; the interface of `recognizer.Recognizer` that
    `transcribe.transcribe` uses (`config`, `options`, `tokenizer`, `decode_waves`, `decode_waves_with_ctc`, `text`,
    `transcribe`, word timestamps included).

    Args:
        folder: the export. threads: CPU threads for onnxruntime (0: OMP_NUM_THREADS when set, else all cores).
        lm, word_lm: an ARPA or binary LM file instead of the one the export stores; False: none (None: the
            export's, if any).
        options: DecodeConfig fields that override the export's decoding defaults (mode: one of EXPORTED_MODES).
    """

    def __init__(self, folder: str | os.PathLike, threads: int = 0, lm=None, word_lm=None, **options):
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
        if options.get("temperature") or options.get("temperature_increment"):
            raise ExportError("temperature: an export does not sample; use the model package")
        self.options = replace(self.config.decode, **{**options, "temperature": 0.0, "temperature_increment": 0.0})
        self.modes = export_modes(self.config.model)
        self._check_mode(self.options.mode)
        try:
            check_vad(self.options)
        except ValueError as e:
            raise ExportError(str(e)) from None
        self.tokenizer = tokenizer_from_bytes((self.path / meta["tokenizer"]).read_bytes(), meta["tokenizer_meta"])
        self.context = self._context()
        self.lms: dict[str, str] = {}
        try:
            loaded = {kind: self._read_lm(kind, source, meta.get("lms") or {})
                      for kind, source in (("lm", lm), ("word_lm", word_lm))}
        except DecodeError as e:
            raise ExportError(str(e)) from None
        self.fusion, self.lm_weight = fusion_lm(self.tokenizer, loaded["lm"], self.options.lm_weight, loaded["word_lm"],
                                                self.options.word_lm_weight)
        so = ort.SessionOptions()
        self.threads = so.intra_op_num_threads = cpu_threads(threads)
        so.log_severity_level = 3
        self.encoder = ort.InferenceSession(str(self.path / meta["files"]["encoder"]), so,
                                            providers=["CPUExecutionProvider"])
        self.decoder_step, self.decoder = (
            ort.InferenceSession(str(self.path / meta["files"][name]), so, providers=["CPUExecutionProvider"])
            for name in ("decoder_step", "decoder"))
        self.nat_decoder = (ort.InferenceSession(str(self.path / meta["files"]["nat_decoder"]), so,
                                                 providers=["CPUExecutionProvider"])
                            if "nat_decoder" in meta["files"] else None)
        self.layers = sum(o.name.startswith("cross_kv_") for o in self.encoder.get_outputs())
        self.device, self.precision = "cpu", meta.get("precision", "fp32")
        m = self.config.model
        self.prompt = list(m.decoder_prompt)  # ids read before BEGIN (Whisper's start sequence)
        self.max_tokens = max_output_tokens(m)  # as Decoder.max_tokens

    def _check_mode(self, mode: str) -> None:
        if mode not in self.modes:
            more = " (this model has no CTC head)" if not self.config.model.ctc else ""
            raise ExportError(f"mode {mode}: this export decodes with {', '.join(self.modes)}{more}; other modes "
                              "need the PyTorch package")

    def _context(self):
        """The hotwords' context graph (`decode/hotwords.py`), or None."""
        from asr_transformer.decode.hotwords import HotwordError, context_graph

        if not self.options.hotwords:
            return None
        try:
            return context_graph(self.tokenizer, self.options.hotwords, self.options.hotword_score)
        except HotwordError as e:
            raise ExportError(str(e)) from None

    def _read_lm(self, kind: str, source, stored: dict):
        """The LM of `kind`: `source` (a file), or with None the one the export stores (export.json's "lms"); None
        for False or nothing stored."""
        if source is False:
            return None
        if source is None:
            if kind not in stored:
                return None
            self.lms[kind] = stored[kind]["name"]
            return read_lm(str(self.path / stored[kind]["file"]), self.tokenizer, kind == "word_lm")
        self.lms[kind] = str(source)
        return read_lm(source, self.tokenizer, kind == "word_lm")

    def features(self, wave: np.ndarray) -> np.ndarray:
        return fbank(wave, self.config.features)

    def encode(self, feats: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray | None]:
        """Utterances' features [(T, F)] → CTC log-probs (B, T', V), encoder lengths (B,), cross keys|values, and
        with a no-speech head each utterance's no-speech probability (B,) (else None)."""
        lens = np.array([f.shape[0] for f in feats], np.int64)
        frames = max(int(lens.max()), 16)  # at least one encoder frame in the batch (padding changes no output)
        padded = np.zeros((len(feats), frames, self.config.features.num_mel_bins), np.float32)
        for i, f in enumerate(feats):
            padded[i, :f.shape[0]] = f
        outputs = self.encoder.run(None, {"feats": padded, "feat_lens": lens})
        no_speech = outputs.pop() if self.config.model.no_speech_head else None
        if not self.config.model.ctc:  # no ctc_log_probs output
            return None, outputs[0], outputs[1:], no_speech
        ctc, enc_lens, *cross = outputs
        return ctc, enc_lens, cross, no_speech

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

    def maskctc(self, ctc: np.ndarray, enc_lens: np.ndarray, cross: list, opts: DecodeConfig) -> list[Hypothesis]:
        """Mask-CTC (`decode/maskctc.py`'s search, as the package runs it) with the decoder graph without the causal
        mask."""
        tokens, lengths, confidence, ctc_scores = greedy_with_confidence(ctc, enc_lens)
        enc_mask = np.arange(cross[0].shape[1])[None, :] < enc_lens[:, None]

        def predict(rows: np.ndarray, y: np.ndarray, lens: np.ndarray, masked: np.ndarray) -> np.ndarray:
            y_in, lens_in, select = with_sos(y, lens, masked)
            feeds = {"tokens": y_in, "token_lens": lens_in.astype(np.int64), "enc_mask": enc_mask[rows]}
            feeds.update({f"cross_kv_{i}": c[rows] for i, c in enumerate(cross)})
            return self.nat_decoder.run(None, feeds)[0][select]  # (masked positions, V)

        hyps = fill_masks(tokens, lengths, confidence, ctc_scores, opts.maskctc_iterations, opts.maskctc_threshold,
                          predict)
        return [h[0] for h in hyps]

    def decode_waves(self, waves: list[np.ndarray], speaker=None) -> list[Hypothesis]:
        """Utterances of 16 kHz mono samples, decoded together → the best hypothesis of each."""
        return self.decode_features([self.features(w) for w in waves], self.options)

    def decode_waves_with_ctc(self, waves: list[np.ndarray],
                              speaker=None) -> tuple[list[Hypothesis], list[np.ndarray]]:
        """As `decode_waves`, and each utterance's CTC log-probs (T'_b, V), to align its hypothesis with
        (`decode.align`, word timestamps)."""
        if not self.config.model.ctc:
            raise ExportError(f"{self.path}: word timestamps align with the CTC head, which this model does not have")
        ctc, enc_lens, cross, no_speech = self.encode([self.features(w) for w in waves])
        return (self._search(ctc, enc_lens, cross, no_speech, self.options),
                [lp[:n] for lp, n in zip(ctc, enc_lens.tolist())])

    def decode_features(self, feats: list[np.ndarray], opts: DecodeConfig) -> list[Hypothesis]:
        """Utterances' log-mel features [(T, F)] decoded together with `opts` → the best hypothesis of each."""
        return self._search(*self.encode(feats), opts)

    def _search(self, ctc: np.ndarray, enc_lens: np.ndarray, cross: list, no_speech: np.ndarray | None,
                opts: DecodeConfig) -> list[Hypothesis]:
        """A batch's encoder outputs (`encode`) → the best hypothesis of each utterance with `opts`, as
        `search.recognize` finds it (the windows its no-speech head takes for silence, and those its CTC head is
        unsure of, silent, as there)."""
        best = self._search_mode(ctc, enc_lens, cross, opts)
        if no_speech is not None and opts.no_speech_threshold < 1:
            best = [hyps[0] for hyps in no_speech_silence([[h] for h in best], no_speech, opts)]
        if opts.ctc_confidence_threshold <= 0 or ctc is None or int(enc_lens.max()) == 0:
            return best
        _, lengths, confidence, _ = greedy_with_confidence(ctc, enc_lens)
        return [hyps[0] for hyps in ctc_silence([[h] for h in best], confidence, lengths, opts)]

    def _search_mode(self, ctc: np.ndarray, enc_lens: np.ndarray, cross: list,
                     opts: DecodeConfig) -> list[Hypothesis]:
        """`_search` before the silence check."""
        B, mode = len(enc_lens), opts.mode
        lm = self.fusion if mode in LM_MODES else None
        context = self.context if mode in BIASED_MODES else None
        if int(enc_lens.max()) == 0:  # every utterance too short to give one encoder frame (as search.recognize)
            return [Hypothesis([], 0.0) for _ in range(B)]
        if mode == "ctc":
            tokens, lengths, _, scores = greedy_with_confidence(ctc, enc_lens)
            return [Hypothesis(tokens[b, :n].tolist(), float(scores[b]), {"ctc": float(scores[b])})
                    for b, n in enumerate(lengths.tolist())]
        if mode == "greedy":
            return self.greedy(cross, enc_lens, opts.max_len_ratio)
        if mode == "maskctc":
            return self.maskctc(ctc, enc_lens, cross, opts)
        if mode in ("beam", "joint"):
            return self._beams(ctc if mode == "joint" else None, enc_lens, cross, opts, lm, context)
        nbest = [ctc_prefix_beam_search(ctc[b], int(enc_lens[b]), opts.beam, context) for b in range(B)]
        if mode == "ctc_beam":
            return [h[0] if h else Hypothesis([], NEG_INF) for h in nbest]
        flat = [(b, h) for b, hyps in enumerate(nbest) for h in hyps]
        if not flat:
            return [Hypothesis([], NEG_INF) for _ in range(B)]
        att = self.attention_scores(cross, enc_lens, np.array([b for b, _ in flat]), [h.tokens for _, h in flat])
        best: list[Hypothesis] = [Hypothesis([], NEG_INF) for _ in range(B)]
        for (b, h), a in zip(flat, att.tolist()):  # as search.rescore
            ctc_part = h.parts.get("ctc", h.score)
            s = opts.ctc_weight * ctc_part + (1 - opts.ctc_weight) * a + opts.length_penalty * (len(h.tokens) + 1)
            parts = {"ctc": ctc_part, "att": a}
            if lm is not None:
                parts["lm"] = lm.sentence_log_prob(h.tokens)
                s += self.lm_weight * parts["lm"]
            if context is not None:
                parts["context"] = context.score(h.tokens)
                s += parts["context"]
            if s > best[b].score:
                best[b] = Hypothesis(h.tokens, float(s), parts)
        return best

    def _beams(self, ctc: np.ndarray | None, enc_lens: np.ndarray, cross: list, opts: DecodeConfig, lm,
               context) -> list[Hypothesis]:
        """A batch's beam (ctc None) or joint searches (`exported_search.beam_search`), run in step with one decoder
        call for all of them; in joint mode an utterance longer than opts.split_seconds is searched in pieces cut at
        pauses and their best hypotheses joined (as `search._beam`). → the best hypothesis of each utterance."""
        jobs = []  # (utterance, first frame, end frame)
        for b, length in enumerate(enc_lens.tolist()):
            pieces = [(0, length)]
            if ctc is not None and opts.split_seconds > 0:
                frames = chunk_frames(1000 * opts.split_seconds, self.config.model.subsampling)
                pieces = split_at_pauses(ctc[b], length, frames)
            jobs += [(b, start, end) for start, end in pieces if end > start]
        found = self._run_searches(jobs, cross, opts, lambda b, start, end, first, limit: beam_search(
            first, limit, replace(opts, lm_weight=self.lm_weight), nbest=max(1, min(opts.nbest, opts.beam)),
            ctc_log_probs=None if ctc is None else ctc[b, start:end], lm=lm, context=context))
        best = []
        for b in range(len(enc_lens)):
            hyps = [found[j][0] for j, job in enumerate(jobs) if job[0] == b]
            if len(hyps) <= 1:
                best.append(hyps[0] if hyps else Hypothesis([], 0.0))
                continue
            parts = {k: sum(h.parts.get(k, 0.0) for h in hyps) for k in hyps[0].parts}  # as beam.join_pieces
            best.append(Hypothesis([t for h in hyps for t in h.tokens], sum(h.score for h in hyps), parts))
        return best

    def _run_searches(self, jobs: list[tuple[int, int, int]], cross: list, opts: DecodeConfig, start_search) -> list:
        """Run a `exported_search.Search` per job (utterance b, its frames start:end), all in step: each decoder call
        extends every running search's `beam` rows. start_search(b, start, end, first (V,), limit) → the Search.
        → each job's result."""
        W, P = opts.beam, len(self.prompt)
        T = max(end - start for _, start, end in jobs)
        kv = [np.zeros((len(jobs), T, c.shape[-1]), c.dtype) for c in cross]
        mask = np.zeros((len(jobs), T), bool)
        for j, (b, start, end) in enumerate(jobs):
            for k, c in zip(kv, cross):
                k[j, :end - start] = c[b, start:end]
            mask[j, :end - start] = True
        cache = self._empty_cache(len(jobs), kv)
        for position, prompt_id in enumerate(self.prompt):  # the prompt fills the cache first
            _, cache = self._step(np.full(len(jobs), prompt_id), position, mask, cache, kv)
        first, cache = self._step(np.full(len(jobs), SOS), P, mask, cache, kv)
        cache = [np.repeat(c, W, 0) for c in cache]  # W rows per job, in the order of `running`
        results, searches, pending = [None] * len(jobs), {}, {}

        def advance(j: int, log_probs: np.ndarray | None) -> None:
            try:
                pending[j] = searches[j].send(log_probs)  # (rows, tokens) of its next step
            except StopIteration as done:
                results[j] = done.value
                del pending[j]

        for j, (b, start, end) in enumerate(jobs):
            limit = max(1, int((end - start) * opts.max_len_ratio))  # as greedy.max_lengths
            searches[j] = start_search(b, start, end, first[j],
                                       limit if self.max_tokens is None else min(limit, self.max_tokens))
            pending[j] = None
            advance(j, None)
        offset, running, rows_of = P + 1, list(range(len(jobs))), None
        while pending:
            alive = [j for j in running if j in pending]
            if alive != rows_of:  # the keys|values and masks of the running jobs' rows
                index = np.repeat(alive, W)
                wide_kv, wide_mask, rows_of = [k[index] for k in kv], mask[index], alive
            slot = {j: i for i, j in enumerate(running)}  # where each job's rows are in the cache
            rows = np.concatenate([slot[j] * W + pending[j][0] for j in alive])
            tokens = np.concatenate([pending[j][1] for j in alive])
            log_probs, cache = self._step(tokens, offset, wide_mask, [c[rows] for c in cache], wide_kv)
            offset, running = offset + 1, alive
            for i, j in enumerate(alive):
                advance(j, log_probs[i * W:(i + 1) * W])
        return results

    def text(self, tokens: list[int], mode: str | None = None) -> str:
        """Tokens → text for people (a phone model's: words, through the lexicon LM where it took part, else the
        nearest for a non-word), numbers written as the options say."""
        lm = self.fusion if (mode or self.options.mode) in LM_MODES else None
        return spell_numbers(transcriber(self.tokenizer, lm)(tokens), self.options.numbers)

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
                     "model_mb": model_mb, **fused_lms(self.fusion if m in LM_MODES else None, self.lms,
                                                       self.options.word_lm_weight),
                     "options": vars(replace(self.options, mode=m))}
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
