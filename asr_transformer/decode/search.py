"""One entry point for every decoding mode (`recognize`), and the LMs it fuses (`read_lm`, `fusion_lm`).

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
With hotwords (a context graph, decode/context.py), beam, joint, ctc_beam and rescore add the bonus of the listed
phrases y contains, and favour them while the search runs; greedy, ctc and maskctc cannot be biased.
With a temperature above 0 the attention decoder is sampled instead (the best of `beam` draws, no LM, no hotwords),
and with a temperature increment a window that fails whisper's checks is sampled again, hotter (decode/fallback.py).
Every mode decodes a whole batch of utterances at once.
"""

from __future__ import annotations

import torch

from asr_transformer.config import MODES, DecodeConfig, check_modes
from asr_transformer.decode import Hypothesis
from asr_transformer.decode.beam import beam_search, join_pieces, split_at_pauses
from asr_transformer.decode.ctc_prefix import ctc_greedy, ctc_prefix_beam_search
from asr_transformer.decode.fallback import ctc_silence, fall_back, no_speech_silence
from asr_transformer.decode.fallback import no_speech as check_no_speech
from asr_transformer.decode.fusion import BIASED_MODES, LM_MODES, fusion_lm, read_lm, transcriber  # noqa: F401
from asr_transformer.decode.greedy import greedy_search, sample_search
from asr_transformer.decode.maskctc import maskctc_search
from asr_transformer.errors import DecodeError
from asr_transformer.frames import chunk_frames
from asr_transformer.model.mask import lengths_to_mask
from asr_transformer.tokens import EOS, IGNORE_ID, PAD, SOS

__all__ = ["MODES", "DecodeError", "Hypothesis", "recognize", "rescore", "attention_scores", "check_modes", "read_lm", "fusion_lm",
           "transcriber"]



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
    kv = [c[utt] for c in model.decoder.cross_kv(enc)]
    logits = model.decoder.forward_kv(kv, enc_mask[utt], ys_in, lens + 1)
    log_probs = torch.log_softmax(logits.float(), -1)
    lp = log_probs.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (lp * (target != IGNORE_ID)).sum(1)


def rescore(model, enc, enc_lens, nbest_lists: list[list[Hypothesis]], ctc_weight: float,
             length_penalty: float, lm=None, lm_weight: float = 0.0, context=None) -> list[list[Hypothesis]]:
    """Rescore CTC n-best lists with the attention decoder (and an LM, and hotwords):
    λ·ctc + (1−λ)·att [+ β·lm] [+ the hotword bonus] + length_penalty·(tokens + 1)."""
    flat = [(b, h) for b, hyps in enumerate(nbest_lists) for h in hyps]
    if not flat:
        return [[Hypothesis([], float("-inf"))] for _ in nbest_lists]
    att = attention_scores(model, enc, enc_lens, torch.tensor([b for b, _ in flat]), [h.tokens for _, h in flat]).tolist()
    out: list[list[Hypothesis]] = [[] for _ in nbest_lists]
    for (b, h), a in zip(flat, att):
        ctc = h.parts.get("ctc", h.score)
        s = ctc_weight * ctc + (1.0 - ctc_weight) * a + length_penalty * (len(h.tokens) + 1)
        parts = {"ctc": ctc, "att": a}
        if lm is not None:
            parts["lm"] = lm.sentence_log_prob(h.tokens)
            s += lm_weight * parts["lm"]
        if context is not None:
            parts["context"] = context.score(h.tokens)
            s += parts["context"]
        out[b].append(Hypothesis(h.tokens, s, parts))
    return [sorted(hyps, key=lambda h: h.score, reverse=True) or [Hypothesis([], float("-inf"))] for hyps in out]


def _beam(model, enc: torch.Tensor, enc_lens: torch.Tensor, mode: str, opts: DecodeConfig, nbest: int,
          pre_beam: int | None, lm, stats: dict | None, context) -> list[list[Hypothesis]]:
    """beam and joint: `beam_search`. In joint mode, utterances longer than opts.split_seconds are searched in pieces
    cut at pauses (`split_at_pauses`), B pieces at a time (B: the batch's utterances), so that neither the decoder's
    context nor the rows of a step grow with the audio's length."""
    ctc = model.ctc_log_probs(enc) if mode == "joint" else None
    pieces = None
    if ctc is not None and opts.split_seconds > 0:
        pieces = split_at_pauses(enc, enc_lens, ctc, chunk_frames(1000 * opts.split_seconds, model.cfg.subsampling))

    def search(enc, enc_lens, ctc):
        return beam_search(model, enc, enc_lens, opts.beam, ctc_log_probs=ctc, ctc_weight=opts.ctc_weight,
                           length_penalty=opts.length_penalty, max_len_ratio=opts.max_len_ratio, nbest=nbest,
                           pre_beam=pre_beam, lm=lm, lm_weight=opts.lm_weight, ctc_window=opts.ctc_window,
                           beam_threshold=opts.beam_threshold, end_detect=opts.end_detect, stats=stats,
                           context=context)

    if pieces is None:
        return search(enc, enc_lens, ctc)
    B, hyps = enc.size(0), []
    for i in range(0, len(pieces.owner), B):
        lens = pieces.lengths[i:i + B]
        T = int(lens.max())
        hyps += search(pieces.enc[i:i + B, :T], lens, pieces.ctc_log_probs[i:i + B, :T])
    return join_pieces(hyps, pieces.owner, B)


def recognize(model, feats: torch.Tensor, feat_lens: torch.Tensor, opts: DecodeConfig = DecodeConfig(), *,
              pre_beam: int | None = None, lm=None, speaker_mean: torch.Tensor | None = None,
              stats: dict | None = None, context=None, text_of=None,
              no_speech: tuple[int, int] | None = None) -> list[list[Hypothesis]]:
    """Decode a batch of utterances with `opts.mode`.

    Args:
        model: ASRModel (any device; switched to eval mode for the call).
        feats: (B, T, F) raw log-mel features (the model applies its CMVN); feat_lens (B,).
        opts: DecodeConfig (mode, beam, ctc_weight, length_penalty, max_len_ratio, maskctc_*, nbest, and the bounds
            on the work of beam and joint: ctc_window, beam_threshold, end_detect, split_seconds).
        pre_beam: joint mode: candidates per hypothesis scored by CTC (default 1.5·beam; 0 = whole vocabulary).
        lm: an NgramLM over the model's tokens (or a WordBoundaryLM: `fusion_lm`), fused with weight
            opts.lm_weight in beam, joint and rescore.
        speaker_mean: (B, F), each utterance's speaker's mean log-mel, for a model.speaker_cmn model
            (`data.features.speaker_means`); without it such a model subtracts each utterance's own mean.
        stats: beam and joint: a dict that the search's work is added to (`beam.beam_search`).
        context: hotwords, a ContextGraph (decode/hotwords.py `context_graph`), in the BIASED_MODES.
        text_of: tokens → text, for the temperature fallback (`search_encoded`).
        no_speech: a Whisper tokenizer's (<|startoftranscript|>, no-speech token) ids, for its silence check.
    Returns:
        per utterance up to `opts.nbest` hypotheses, best first (one for greedy, ctc and maskctc).
    """
    check_modes(opts.mode)  # before any work
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            enc, enc_lens = model.encode(feats.to(dev), feat_lens.to(dev),
                                         None if speaker_mean is None else speaker_mean.to(dev),
                                         chunk_frames(opts.chunk_ms, model.cfg.subsampling), opts.left_chunks)
            return search_encoded(model, enc, enc_lens, opts, pre_beam=pre_beam, lm=lm, stats=stats,
                                  context=context, text_of=text_of, no_speech=no_speech)
    finally:
        model.train(was_training)


def search_encoded(model, enc: torch.Tensor, enc_lens: torch.Tensor, opts: DecodeConfig = DecodeConfig(), *,
                   pre_beam: int | None = None, lm=None, stats: dict | None = None,
                   context=None, text_of=None, no_speech: tuple[int, int] | None = None) -> list[list[Hypothesis]]:
    """`recognize` after the encoder: enc (B, T', D) and enc_lens (B,) (e.g. a stream's chunks, `encode_chunk`)
    → per utterance its n-best, as `recognize` (the model in eval mode, under inference_mode). With
    opts.temperature_increment and `text_of` (tokens → text), the windows that fail are decoded again, hotter;
    with `no_speech` (a Whisper tokenizer's ids: `WhisperTokenizer.no_speech`), windows Whisper takes for silence
    give no text, as do those a no-speech head takes for silence (model.no_speech_head), and with
    opts.ctc_confidence_threshold those a CTC head is unsure of (decode/fallback.py)."""
    mode = check_modes(opts.mode, model.cfg)[0]
    if (opts.temperature > 0 or opts.temperature_increment > 0) and model.cfg.decoder_layers == 0:
        raise DecodeError("temperature: sampling draws from the attention decoder, which this model does not have")
    if enc.size(1) == 0:  # every utterance too short to give one encoder frame
        return [[Hypothesis([], 0.0)] for _ in range(enc.size(0))]
    results = _search(model, enc, enc_lens, mode, opts, pre_beam, lm, stats, context)
    if text_of is not None and opts.temperature_increment > 0:
        def decode_at(rows: list[int], temperature: float) -> list[list[Hypothesis]]:
            index = torch.tensor(rows, device=enc.device)
            return sample_search(model, enc[index], enc_lens[index.to(enc_lens.device)], temperature, opts.beam,
                                 opts.max_len_ratio)

        results = fall_back(results, decode_at, text_of, opts)
    if no_speech is not None and opts.no_speech_threshold < 1:
        results = check_no_speech(model, enc, enc_lens, results, no_speech, opts)
    elif model.no_speech is not None and opts.no_speech_threshold < 1:
        results = no_speech_silence(results, model.no_speech_prob(enc, enc_lens).cpu(), opts)
    if opts.ctc_confidence_threshold > 0 and model.ctc is not None:
        path = ctc_greedy(model.ctc_log_probs(enc), enc_lens)
        results = ctc_silence(results, path.confidence.cpu(), path.lengths.cpu(), opts)
    return results


def _search(model, enc: torch.Tensor, enc_lens: torch.Tensor, mode: str, opts: DecodeConfig, pre_beam, lm, stats,
            context) -> list[list[Hypothesis]]:
    """One search of `mode` (or sampling, at opts.temperature above 0) over a batch's encoder output."""
    nbest = max(1, min(opts.nbest, opts.beam))
    if opts.temperature > 0:
        return [h[:nbest] for h in sample_search(model, enc, enc_lens, opts.temperature, opts.beam,
                                                 opts.max_len_ratio)]
    if mode == "greedy":
        return greedy_search(model, enc, enc_lens, opts.max_len_ratio)
    if mode in ("beam", "joint"):
        return _beam(model, enc, enc_lens, mode, opts, nbest, pre_beam, lm, stats, context)
    ctc = model.ctc_log_probs(enc)
    if mode == "ctc":
        return ctc_greedy(ctc, enc_lens).hypotheses()
    if mode == "maskctc":
        return maskctc_search(model, enc, enc_lens, ctc, opts.maskctc_iterations, opts.maskctc_threshold)
    hyps = ctc_prefix_beam_search(ctc, enc_lens, opts.beam, context=context)
    if mode == "ctc_beam":
        return [h[:nbest] or [Hypothesis([], float("-inf"))] for h in hyps]
    return [h[:nbest] for h in rescore(model, enc, enc_lens, hyps, opts.ctc_weight, opts.length_penalty,
                                        lm, opts.lm_weight, context)]
