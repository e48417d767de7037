"""One entry point for every decoding mode (`recognize`), and decoding a whole manifest (`decode_manifest`).

Modes and what a hypothesis' score is:
    greedy    autoregressive greedy attention decoding          Σ log p_att (with <eos>)
    beam      attention beam search                              Σ log p_att + length_penalty·(tokens + 1)
    joint     beam search with CTC prefix scores                 λ·log P_ctc + (1−λ)·Σ log p_att + length bonus
    ctc       greedy CTC (best path)                             log P(best path)
    ctc_beam  CTC prefix beam search                             log P_ctc(y) summed over alignments
    maskctc   Mask-CTC, non-autoregressive                       Σ log(confidence of each token)
    rescore   ctc_beam's n-best rescored by the attention        λ·log P_ctc + (1−λ)·log p_att(y <eos>) + length bonus
              decoder (teacher-forced)
λ = ctc_weight. With an n-gram LM (decode/ngram.py), beam, joint and rescore add β·log p_lm(y <eos>)
(shallow fusion, β = lm_weight), and with a word LM (decode/word_lm.py) also γ·log p_word of each word.
Every mode decodes a whole batch of utterances at once.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import torch

from asr_transformer.config import DecodeConfig
from asr_transformer.decode import Hypothesis
from asr_transformer.decode.beam import beam_search
from asr_transformer.decode.cross import cross_kv, decoder_logits
from asr_transformer.decode.ctc_prefix import ctc_greedy, ctc_prefix_beam_search
from asr_transformer.decode.greedy import greedy_search
from asr_transformer.decode.maskctc import maskctc_search
from asr_transformer.model.mask import lengths_to_mask
from asr_transformer.model.tokens import EOS, IGNORE_ID, PAD, SOS

__all__ = ["MODES", "Hypothesis", "recognize", "decode_manifest", "attention_scores", "check_modes", "load_fusion_lm",
           "transcriber"]

MODES = ("greedy", "beam", "joint", "ctc", "ctc_beam", "maskctc", "rescore")
LM_MODES = ("beam", "joint", "rescore")  # the modes an n-gram LM takes part in


class DecodeError(ValueError):
    """A decoding request that cannot run; the message says what to change."""


def check_modes(modes) -> list[str]:
    modes = [modes] if isinstance(modes, str) else list(modes)
    if not modes:
        raise DecodeError(f"no decoding mode given; choose from: {', '.join(MODES)}")
    for m in modes:
        if m not in MODES:
            raise DecodeError(f"unknown decoding mode '{m}'; choose from: {', '.join(MODES)}")
    if len(set(modes)) != len(modes):
        raise DecodeError(f"decoding mode listed twice in {', '.join(modes)}")
    return modes


# ------------------------------------------------------------------------------------------ recognize


def attention_scores(model, enc: torch.Tensor, enc_lens: torch.Tensor, utt: torch.Tensor,
                     seqs: list[list[int]]) -> torch.Tensor:
    """Teacher-forced log p_att(y <eos> | x) of token sequences `seqs` (M of them), sequence m belonging
    to utterance utt[m] of enc (B, T', D). → (M,) float32, in one decoder pass (the encoder keys/values are
    projected once per utterance and shared by its sequences)."""
    dev = enc.device
    M = len(seqs)
    L = max((len(s) for s in seqs), default=0) + 1
    lens = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    ys_in = torch.full((M, L), PAD, dtype=torch.long)
    target = torch.full((M, L), IGNORE_ID, dtype=torch.long)
    ys_in[:, 0] = SOS
    for m, s in enumerate(seqs):
        ys_in[m, 1:len(s) + 1] = torch.tensor(s, dtype=torch.long)
        target[m, :len(s)] = torch.tensor(s, dtype=torch.long)
        target[m, len(s)] = EOS
    ys_in, target, lens, utt = ys_in.to(dev), target.to(dev), lens.to(dev), utt.to(dev)
    enc_mask = lengths_to_mask(enc_lens.to(dev), enc.size(1))
    kv = [c[utt] for c in cross_kv(model, enc)]
    logits = decoder_logits(model, kv, enc_mask[utt], ys_in, lens + 1)
    log_probs = torch.log_softmax(logits.float(), -1)
    lp = log_probs.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (lp * (target != IGNORE_ID)).sum(1)


def _rescore(model, enc, enc_lens, nbest_lists: list[list[Hypothesis]], ctc_weight: float,
             length_penalty: float, lm=None, lm_weight: float = 0.0) -> list[list[Hypothesis]]:
    """Rescore CTC n-best lists with the attention decoder (and an LM):
    λ·ctc + (1−λ)·att [+ β·lm] + length_penalty·(tokens + 1)."""
    flat = [(b, h) for b, hyps in enumerate(nbest_lists) for h in hyps]
    if not flat:
        return [[Hypothesis([], float("-inf"))] for _ in nbest_lists]
    att = attention_scores(model, enc, enc_lens, torch.tensor([b for b, _ in flat]), [h.tokens for _, h in flat]).tolist()
    out: list[list[Hypothesis]] = [[] for _ in nbest_lists]
    for (b, h), a in zip(flat, att):
        s = ctc_weight * h.score + (1.0 - ctc_weight) * a + length_penalty * (len(h.tokens) + 1)
        parts = {"ctc": h.score, "att": a}
        if lm is not None:
            parts["lm"] = lm.sentence_log_prob(h.tokens)
            s += lm_weight * parts["lm"]
        out[b].append(Hypothesis(h.tokens, s, parts))
    return [sorted(hyps, key=lambda h: h.score, reverse=True) or [Hypothesis([], float("-inf"))] for hyps in out]


def recognize(model, feats: torch.Tensor, feat_lens: torch.Tensor, opts: DecodeConfig = DecodeConfig(), *,
              pre_beam: int | None = None, lm=None, speaker_mean: torch.Tensor | None = None) -> list[list[Hypothesis]]:
    """Decode a batch of utterances with `opts.mode`.

    Args:
        model: ASRModel (any device; switched to eval mode for the call).
        feats: (B, T, F) raw log-mel features (the model applies its CMVN); feat_lens (B,).
        opts: DecodeConfig (mode, beam, ctc_weight, length_penalty, max_len_ratio, maskctc_*, nbest).
        pre_beam: joint mode: candidates per hypothesis scored by CTC (default 1.5·beam; 0 = whole vocabulary).
        lm: an NgramLM over the model's tokens (or a WordBoundaryLM: `load_fusion_lm`), fused with weight
            opts.lm_weight in beam, joint and rescore.
        speaker_mean: (B, F), each utterance's speaker's mean log-mel, for a model.speaker_cmn model
            (`data.features.speaker_means`); without it such a model subtracts each utterance's own mean.
    Returns:
        per utterance up to `opts.nbest` hypotheses, best first (one for greedy, ctc and maskctc).
    """
    mode = check_modes(opts.mode)[0]
    dev = next(model.parameters()).device
    nbest = max(1, min(opts.nbest, opts.beam))
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            enc, enc_lens = model.encode(feats.to(dev), feat_lens.to(dev),
                                         None if speaker_mean is None else speaker_mean.to(dev))
            if enc.size(1) == 0:  # every utterance too short to give one encoder frame
                return [[Hypothesis([], 0.0)] for _ in range(enc.size(0))]
            if mode == "greedy":
                return greedy_search(model, enc, enc_lens, opts.max_len_ratio)
            if mode in ("beam", "joint"):
                ctc = model.ctc_log_probs(enc) if mode == "joint" else None
                return beam_search(model, enc, enc_lens, opts.beam, ctc_log_probs=ctc, ctc_weight=opts.ctc_weight,
                                   length_penalty=opts.length_penalty, max_len_ratio=opts.max_len_ratio,
                                   nbest=nbest, pre_beam=pre_beam, lm=lm, lm_weight=opts.lm_weight)
            ctc = model.ctc_log_probs(enc)
            if mode == "ctc":
                return ctc_greedy(ctc, enc_lens).hypotheses()
            if mode == "maskctc":
                return maskctc_search(model, enc, enc_lens, ctc, opts.maskctc_iterations, opts.maskctc_threshold)
            hyps = ctc_prefix_beam_search(ctc, enc_lens, opts.beam)
            if mode == "ctc_beam":
                return [h[:nbest] or [Hypothesis([], float("-inf"))] for h in hyps]
            return [h[:nbest] for h in _rescore(model, enc, enc_lens, hyps, opts.ctc_weight, opts.length_penalty,
                                                lm, opts.lm_weight)]
    finally:
        model.train(was_training)


# ------------------------------------------------------------------------------------------ manifests


def load_lm(path: str | os.PathLike, tokenizer):
    """Read an ARPA LM whose words are `tokenizer`'s pieces → NgramLM; a clear DecodeError otherwise."""
    from asr_transformer.decode.ngram import NgramError, NgramLM

    try:
        return NgramLM.read_arpa(path, tokenizer.pieces(range(tokenizer.vocab_size)))
    except (NgramError, OSError, UnicodeDecodeError) as e:
        raise DecodeError(f"--lm: {e}") from None


def load_fusion_lm(tokenizer, lm: str | os.PathLike | None, lm_weight: float,
                   word_lm: str | os.PathLike | None = None, word_lm_weight: float = 0.0):
    """The LM to fuse and the weight to fuse it with: (None, β) without any; (NgramLM, β) with `lm` alone; with
    `word_lm` (an `asr lm --words` ARPA) a WordBoundaryLM that applies both weights itself, with weight 1 — for a
    phone model a LexiconLM, which also keeps the search to the words of the word LM."""
    from asr_transformer.decode.ngram import NgramError, NgramLM
    from asr_transformer.decode.word_lm import WORD_START, WordBoundaryLM

    token_lm = load_lm(lm, tokenizer) if lm is not None else None
    if word_lm is None:
        return token_lm, lm_weight
    try:
        words = NgramLM.read_arpa(word_lm, None)
    except (NgramError, OSError, UnicodeDecodeError) as e:
        raise DecodeError(f"--word-lm: {e}") from None
    if any(w.startswith(WORD_START) for w in words.words):
        raise DecodeError(f"--word-lm {word_lm}: its words are a tokenizer's pieces; train a word LM with "
                          "`asr lm --words` (or pass this one as --lm)")
    if tokenizer.model_type == "phone":
        from asr_transformer.decode.lexicon_lm import LexiconLM

        return LexiconLM(tokenizer, words, word_lm_weight, token_lm, lm_weight), 1.0
    return WordBoundaryLM(tokenizer.pieces(range(tokenizer.vocab_size)), words, word_lm_weight, token_lm,
                          lm_weight), 1.0


def transcriber(tokenizer, lm=None):
    """tokens → text: the tokenizer's decoding, or a LexiconLM's words (the homophones it chose) when it took part."""
    return getattr(lm, "transcript", None) or tokenizer.decode


def _pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DecodeError(f"--device {device}: CUDA is not available here; use --device cpu")
    return dev


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("eta"), TimeRemainingColumn())


def decode_manifest(model_path, manifest, out, modes: list[str], beam: int = 10, ctc_weight: float = 0.3,
                    length_penalty: float = 0.0, maskctc_iterations: int = 10, maskctc_threshold: float = 0.99,
                    batch_size: int = 16, device: str = "auto", threads: int = 0, score: bool = True,
                    nbest: int = 1, max_len_ratio: float | None = None, pre_beam: int | None = None,
                    precision: str = "fp32", lm: str | os.PathLike | None = None, lm_weight: float = 0.5,
                    word_lm: str | os.PathLike | None = None, word_lm_weight: float = 0.3) -> dict:
    """Decode every utterance of `manifest` with each mode in `modes`.

    Writes, into `out` (one mode) or `out/<mode>/` (several): `hyp.jsonl` ({"id", "text", "ref", "tokens",
    "score"}, and "nbest" when nbest > 1), a Kaldi-style `text` file (`<id> <hyp>`, sorted by id), `rtf.json`
    (decode wall time of the batches — encoder and search, features excluded — audio seconds, RTF; feature
    time reported apart; the encoder's `precision`), and with `score`, `result.txt`/`alignments.txt`/`result.json`
    (asr_transformer.scoring). `lm`: an ARPA n-gram LM over the model's tokens (`asr lm`), fused with weight
    `lm_weight` in the beam, joint and rescore modes; `word_lm` (`asr lm --words`) adds a word LM at word
    boundaries with weight `word_lm_weight` (decode/word_lm.py).

    Returns {mode: {"dir", "rtf", "decode_seconds", "audio_seconds", ["wer", "cer"]}}.
    """
    from asr_transformer.data.audio import AudioError, load_utterance
    from asr_transformer.data.features import fbank, speaker_means
    from asr_transformer.data.manifest import read_manifest
    from asr_transformer.fileio import atomic_open, write_json
    from asr_transformer.package import check_precision, load_package
    from asr_transformer.scoring import score_dir

    modes = check_modes(modes)
    if batch_size < 1 or beam < 1:
        raise DecodeError(f"batch_size and beam must be ≥ 1 (got {batch_size}, {beam})")
    torch.set_num_threads(threads if threads > 0 else (os.cpu_count() or 1))
    dev = _pick_device(device)
    try:
        precision = check_precision(precision, dev)
    except ValueError as e:
        raise DecodeError(f"--precision {precision}: {e}") from None
    model, tokenizer, cfg = load_package(model_path, dev, precision)
    ngram, fusion_weight = load_fusion_lm(tokenizer, lm, lm_weight, word_lm, word_lm_weight)
    base = replace(cfg.decode, beam=beam, ctc_weight=ctc_weight, length_penalty=length_penalty,
                   maskctc_iterations=maskctc_iterations, maskctc_threshold=maskctc_threshold,
                   nbest=max(1, min(nbest, beam)), batch_size=batch_size, lm_weight=lm_weight)
    if max_len_ratio is not None:
        base.max_len_ratio = max_len_ratio
    utts = read_manifest(manifest)
    if not utts:
        raise DecodeError(f"{manifest}: no utterances to decode")
    order = sorted(range(len(utts)), key=lambda i: -utts[i].duration)
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]

    def features(i: int) -> tuple[torch.Tensor, float]:
        """Utterance i's log-mel (T, F) and its audio seconds."""
        u = utts[i]
        try:
            wave = load_utterance(u, cfg.features.sample_rate)
        except AudioError as e:
            raise DecodeError(f"{manifest}: utterance '{u.id}': {e}") from None
        return fbank(torch.from_numpy(wave), cfg.features), len(wave) / cfg.features.sample_rate

    t0 = time.perf_counter()
    means = None  # model.speaker_cmn: a first pass over the audio for each speaker's mean (no transcripts used)
    if cfg.model.speaker_cmn:
        means = speaker_means([u.speaker for u in utts], lambda i: features(i)[0])
    results: dict[str, dict[int, list[Hypothesis]]] = {m: {} for m in modes}
    decode_time = dict.fromkeys(modes, 0.0)
    feature_time, audio_seconds = time.perf_counter() - t0, 0.0
    with _progress() as bar:
        task = bar.add_task(f"decode {','.join(modes)}", total=len(utts))
        for batch in batches:
            t0 = time.perf_counter()
            feats, seconds = zip(*(features(i) for i in batch))
            audio_seconds += sum(seconds)
            lens = torch.tensor([f.size(0) for f in feats])
            padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True).to(dev)
            speaker_mean = None if means is None else torch.stack([means[i] for i in batch]).to(dev)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            feature_time += time.perf_counter() - t0
            for m in modes:
                t0 = time.perf_counter()
                hyps = recognize(model, padded, lens, replace(base, mode=m, lm_weight=fusion_weight), pre_beam=pre_beam,
                                 lm=ngram, speaker_mean=speaker_mean)
                decode_time[m] += time.perf_counter() - t0
                for i, h in zip(batch, hyps):
                    results[m][i] = h
            bar.advance(task, len(batch))

    summary = {}
    for m in modes:
        d = Path(out) if len(modes) == 1 else Path(out) / m
        d.mkdir(parents=True, exist_ok=True)
        records = []
        text_of = transcriber(tokenizer, ngram if m in LM_MODES else None)
        for i, u in enumerate(utts):
            hyps = results[m][i]
            rec = {"id": u.id, "text": text_of(hyps[0].tokens), "ref": u.text, "tokens": hyps[0].tokens,
                   "score": hyps[0].score}
            if base.nbest > 1:
                rec["nbest"] = [{"text": text_of(h.tokens), "tokens": h.tokens, "score": h.score} for h in hyps]
            records.append(rec)
        with atomic_open(d / "hyp.jsonl") as f:
            for rec in records:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        with atomic_open(d / "text") as f:
            for rec in sorted(records, key=lambda r: r["id"]):
                f.write(f"{rec['id']} {rec['text']}".rstrip() + "\n")
        rtf = decode_time[m] / max(audio_seconds, 1e-9)
        info = {"mode": m, "utterances": len(utts), "audio_seconds": round(audio_seconds, 3),
                "decode_seconds": round(decode_time[m], 4), "rtf": rtf,
                "feature_seconds": round(feature_time, 4), "feature_rtf": feature_time / max(audio_seconds, 1e-9),
                "device": str(dev), "threads": torch.get_num_threads(), "batch_size": batch_size,
                "precision": precision, "lm": str(lm) if lm is not None and m in LM_MODES else None,
                "lm_order": (ngram.token_lm if word_lm is not None else ngram).order if lm is not None and m in LM_MODES
                else None,
                "word_lm": str(word_lm) if word_lm is not None and m in LM_MODES else None,
                "word_lm_order": ngram.word_lm.order if word_lm is not None and m in LM_MODES else None,
                "word_lm_weight": word_lm_weight if word_lm is not None and m in LM_MODES else None,
                "options": {k: v for k, v in vars(replace(base, mode=m)).items()}}
        write_json(d / "rtf.json", info)
        summary[m] = {"dir": str(d), "rtf": rtf, "decode_seconds": decode_time[m], "audio_seconds": audio_seconds}
        if score:
            report = score_dir(d, normalizer=tokenizer.normalizer)
            summary[m].update(wer=report.wer, cer=report.cer)
            print(report.summary_table(title=f"{m}  {d}"))
        print(f"{m}: RTF {rtf:.4f} ({decode_time[m]:.2f} s decoding {audio_seconds:.1f} s of audio on {dev}, "
              f"{torch.get_num_threads()} threads, {precision} encoder; features {feature_time:.2f} s, "
              f"RTF {info['feature_rtf']:.4f})")
    return summary
