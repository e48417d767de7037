"""`asr info`: what a model package holds, in a few lines a user can read."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from asr_transformer.config import from_dict
from asr_transformer.package import read_package


def describe(path: str | os.PathLike) -> str:
    """The package's model shape, units, training data, decoding defaults, LMs and validated results."""
    from asr_transformer.model.asr import ASRModel

    path = Path(path)
    state = read_package(path)
    cfg = from_dict(state["config"], f"{path}:config")
    meta, info, lms = state["tokenizer_meta"], state.get("info") or {}, state.get("lms") or {}
    m, f, d = cfg.model, cfg.features, cfg.decode
    block = (f"Conformer (conv kernel {m.conv_kernel})" if m.block == "conformer"
             else f"Transformer ({'pre' if m.pre_norm else 'post'}-LN)")
    parameters = ASRModel(m).count_parameters() / 1e6
    if m.frontend == "whisper":
        block, head = "Whisper", "no CTC head" if not m.ctc else f"CTC weight {m.ctc_weight:g}"
    else:
        head = f"CTC weight {m.ctc_weight:g}{f', InterCTC {m.interctc_weight:g}' if m.interctc_weight else ''}"
    lines = [f"{path}: {path.stat().st_size / 1e6:.1f} MB",
             f"model:      {m.encoder_layers} {block} encoder blocks and {m.decoder_layers} decoder blocks of "
             f"d_model {m.d_model}, {m.heads} heads, FFN {m.ffn_dim}{' (GELU)' if m.activation == 'gelu' else ''}; "
             f"conv front-end ×{m.subsampling}; {head}; {parameters:.2f} M parameters"
             + (f"; the decoder also non-autoregressive (NAT weight {m.nat_weight:g}: `--mode maskctc`)"
                if m.nat_weight > 0 else "")
             + (f"; streaming (trained on chunks of {m.subsampling * f.frame_shift_ms:g}–"
                f"{m.streaming_max_chunk * m.subsampling * f.frame_shift_ms:g} ms and full context: "
                "`asr transcribe --stream`)" if m.streaming else ""),
             f"units:      {meta['model_type']}, vocabulary {m.vocab_size}"
             + (f" (a lexicon of {_lexicon_words(state):,} words)" if meta["model_type"] == "phone" else ""),
             _features(cfg)]
    if info.get("imported"):
        lines.append(f"imported:   {info['imported']} from {info.get('source')} (`asr import {info['imported']}`)")
    for split, data in (info.get("trained_on") or {}).items():
        lines.append(f"{'trained on' if split == 'train' else split + ' set':<11} {data['manifest']}: "
                     f"{data['utterances']} utterances, {data['hours']:g} h, {data['speakers']} speaker(s)")
    if "averaged" in info:
        by = "the last epochs" if info.get("by") == "last" else f"best {info.get('by')}"
        lines.append(f"weights:    the average of {len(info['averaged'])} checkpoints ({by})")
    if m.no_speech_head and "no_speech" in info:
        report = info["no_speech"]
        held = report["held_out"]
        lines.append(f"no-speech:  a head learned from {report['speech_windows']} windows of speech and "
                     f"{report['sound_windows']} without ({report['sound_files']} sound files; `asr no-speech`); "
                     f"held out, at 0.5: {100 * held['speech_kept_0.5']:.1f} % of speech kept, "
                     f"{100 * held['sound_silenced_0.5']:.1f} % of non-speech silenced; in decoding above "
                     f"{d.no_speech_threshold:g} with log-probability below {d.logprob_threshold:g}")
    options = [f"mode {d.mode}", f"beam {d.beam}", f"CTC weight {d.ctc_weight:g}", f"length bonus {d.length_penalty:g}"]
    if "lm" in lms:
        options.append(f"LM weight {d.lm_weight:g}")
    if "word_lm" in lms:
        options.append(f"word LM weight {d.word_lm_weight:g}")
    lines.append("decoding:   " + ", ".join(options) + f", batch {d.batch_size}")
    for kind, lm in lms.items():
        counts = " + ".join(f"{n:,}" for n in lm["ngrams"])
        lines.append(f"{'word LM' if kind == 'word_lm' else 'token LM':<11} {lm['name']}: {lm['order']}-gram, "
                     f"{counts} n-grams, {lm['arpa_gz'].numel() / 1e6:.1f} MB compressed")
    if not lms:
        lines.append("LMs:        none")
    for name, r in (info.get("results") or {}).items():
        lines.append(f"{name + ':':<11} WER {100 * r['wer']:.2f} %, CER {100 * r['cer']:.2f} % on {r['utterances']} "
                     f"utterances ({_setting(r, asdict(d))})")
    return "\n".join(lines)


def _features(cfg) -> str:
    f, m = cfg.features, cfg.model
    if f.kind == "whisper":
        window = f"padded to {f.pad_to_seconds:g}-s windows" if f.pad_to_seconds else "as long as the audio"
        return f"features:   Whisper's {f.num_mel_bins}-d log-mel spectrogram, {f.sample_rate} Hz, {window}; no CMVN"
    return (f"features:   {f.num_mel_bins}-d log-mel, {f.sample_rate} Hz, {f.frame_length_ms:g} ms windows every "
            f"{f.frame_shift_ms:g} ms; "
            + ("per-speaker mean" if m.speaker_cmn else "per-utterance mean" if m.utterance_cmn else "global CMVN"))


def _lexicon_words(state: dict) -> int:
    text = state["tokenizer_model"].numpy().tobytes().decode("utf-8")
    return len({line.split()[0].split("(")[0] for line in text.splitlines() if line.strip()})


def _setting(result: dict, defaults: dict) -> str:
    """How a validated result was decoded: "these defaults", or the options that differed."""
    options = result.get("options") or {}
    differ = [f"{k} {v}" for k, v in options.items() if k not in ("nbest", "batch_size") and defaults.get(k) != v]
    return "decoded with these defaults" if not differ else "decoded with " + ", ".join(differ)
