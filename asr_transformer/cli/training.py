"""Training commands: tokenizer, lm, cmvn, no-speech, train, average, plot, and `asr import whisper`."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from asr_transformer.cli.app import DEVICE, THREADS, app, fail, import_app

@app.command()
def tokenizer(
    manifest: Path = typer.Argument(..., help="Training manifest whose texts train the tokenizer."),
    out: Path = typer.Option(..., "--out", "-o", help="Tokenizer directory to write."),
    vocab_size: int = typer.Option(300, help="Vocabulary size (ignored for char)."),
    model_type: str = typer.Option("unigram", help="unigram, bpe, char, or phone (needs --lexicon)."),
    lexicon: Optional[Path] = typer.Option(None, help="phone: a pronunciation lexicon in CMUdict's format."),
    lowercase: bool = typer.Option(True, help="Lower-case text."),
    remove_punctuation: bool = typer.Option(True, help="Drop punctuation (apostrophes inside words stay)."),
):
    """Train a sentencepiece tokenizer, or write a phone one from a lexicon (fixed ids: 0 blank, 1 unk, 2 sos,
    3 eos, 4 mask)."""
    from asr_transformer.data.lexicon import LexiconError
    from asr_transformer.data.manifest import read_manifest
    from asr_transformer.data.phones import train_phone_tokenizer
    from asr_transformer.data.tokenizer import train_tokenizer
    from asr_transformer.text import NormalizerConfig

    if (model_type == "phone") != (lexicon is not None):
        fail("--lexicon goes with --model-type phone, and a phone tokenizer needs one")
    utts = read_manifest(manifest)
    normalizer = NormalizerConfig(lowercase=lowercase, remove_punctuation=remove_punctuation)
    if model_type == "phone":
        try:
            tok, unknown = train_phone_tokenizer([u.text for u in utts], out, lexicon, normalizer)
        except (LexiconError, OSError, UnicodeDecodeError, ValueError) as e:
            fail(f"--lexicon: {e}" if isinstance(e, OSError) else str(e))
        if unknown:
            listed = ", ".join(w for w, _ in unknown.most_common(10))
            typer.echo(f"{len(unknown)} words of the transcripts ({sum(unknown.values())} in all) have no "
                       f"pronunciation in {lexicon}: {listed}{', ...' if len(unknown) > 10 else ''}; "
                       "training leaves their utterances out")
    else:
        tok = train_tokenizer([u.text for u in utts], out, vocab_size=vocab_size, model_type=model_type,
                              normalizer=normalizer)
    typer.echo(f"{out}: {tok.model_type} tokenizer, {tok.vocab_size} tokens from {len(utts)} transcripts")


@app.command("lm")
def lm_(
    texts: List[Path] = typer.Argument(..., help="Manifests (.jsonl, or NeMo .json: their texts) or text files (one sentence a line)."),
    tokenizer_dir: Path = typer.Option(..., "--tokenizer", help="The recogniser's tokenizer directory."),
    out: Path = typer.Option(..., "--out", "-o", help="ARPA file to write."),
    order: int = typer.Option(4, help="n of the n-gram LM."),
    words: bool = typer.Option(False, "--words", help="A word LM (for --word-lm) instead of one over the "
                               "tokenizer's pieces; the tokenizer's normalizer still defines the words."),
):
    """Train an n-gram LM (interpolated Kneser-Ney) for shallow fusion in decoding (--lm, or --word-lm with --words)."""
    from asr_transformer.lm_build import build_lm

    if order < 1:
        fail(f"--order {order}: must be at least 1")
    typer.echo(build_lm(texts, tokenizer_dir, out, order, words).describe())


@app.command()
def cmvn(
    manifest: Path = typer.Argument(..., help="Training manifest."),
    out: Path = typer.Option(..., "--out", "-o", help="CMVN statistics file (JSON) to write."),
):
    """Global mean/variance statistics of the features over a manifest (one streaming pass)."""
    from asr_transformer.train.setup import compute_cmvn

    frames = compute_cmvn(manifest, out)
    typer.echo(f"{out}: statistics over {frames} frames")


@app.command("no-speech")
def no_speech(
    model: Path = typer.Argument(..., help="Model package."),
    speech: Path = typer.Option(..., "--speech", help="A manifest of speech (the one the model trained on)."),
    sounds: Path = typer.Option(..., "--sounds", help="A folder of recordings without speech (bells, music, noise; "
                                "any format soundfile reads)."),
    out: Path = typer.Option(..., "--out", "-o", help="Package to write (may be MODEL)."),
    windows: int = typer.Option(2000, min=10, help="Windows of speech, and as many without, to learn from."),
    seed: int = typer.Option(0, help="Seed of the windows drawn and the share held out."),
    threads: int = THREADS,
):
    """Train a no-speech head on a package, the rest of the model frozen: the windows it takes for non-speech (a
    bell the voice detector let through) give no text, by Whisper's rule (--no-speech-threshold with
    --logprob-threshold; `asr package` sets them)."""
    from asr_transformer.train.no_speech import NoSpeechOptions, save_with_head, train_no_speech

    head = train_no_speech(model, speech, sounds, NoSpeechOptions(windows=windows, seed=seed), threads,
                           log=typer.echo)
    save_with_head(model, out, head)
    held = head["report"]["held_out"]
    typer.echo(f"{out}: no-speech head; held out, at probability 0.5: {100 * held['speech_kept_0.5']:.1f} % of "
               f"speech windows kept, {100 * held['sound_silenced_0.5']:.1f} % of windows without speech silenced")


@app.command()
def train(
    data: Path = typer.Option(..., exists=True, file_okay=False, help="Folder with train.jsonl and dev.jsonl."),
    exp: Path = typer.Option(..., help="Experiment folder (checkpoints, logs); re-running resumes."),
    config: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help="YAML config (defaults when absent)."),
    tokenizer_dir: Optional[Path] = typer.Option(None, "--tokenizer", help="Tokenizer dir (default: DATA/tokenizer)."),
    set_: List[str] = typer.Option([], "--set", help="Override a config key: section.key=value (repeatable)."),
    device: str = DEVICE,
    threads: int = THREADS,
    seed: Optional[int] = typer.Option(None, help="Random seed (overrides train.seed)."),
    train_manifest: str = typer.Option("train.jsonl", help="Training manifest inside DATA (or an absolute path), or "
                                       "a shard list of `asr shard` (e.g. shards/shards.jsonl): streamed from tar "
                                       "shards, each process and loader worker reading its own."),
    dev_manifest: str = typer.Option("dev.jsonl", help="Validation manifest name inside DATA."),
    force: bool = typer.Option(False, "--force", help="Start over in EXP when it holds another run (another config, "
                               "manifests or tokenizer): that run is moved into EXP/replaced-N, not deleted."),
):
    """Train (or resume) a model; runs under torchrun for several processes.

    Re-running into the same EXP resumes the run there, when the config and the data are the same (max_epochs,
    max_minutes and how often it saves and logs may change); one training runs in a folder at a time."""
    from asr_transformer.config import load_config
    from asr_transformer.train.trainer import train as run_train

    cfg = load_config(config, set_)
    if seed is not None:
        cfg.train.seed = seed
    run_train(cfg, data / train_manifest, data / dev_manifest, tokenizer_dir or data / "tokenizer", exp,
              device=device, threads=threads, force=force)


@app.command()
def average(
    exp: Path = typer.Argument(..., exists=True, file_okay=False, help="Experiment folder (of `asr train`)."),
    out: Path = typer.Option(..., "--out", "-o", help="Model package to write."),
    best: int = typer.Option(5, help="Average the N best checkpoints by --by."),
    by: str = typer.Option("valid_loss", help="valid_loss, valid_cer, valid_wer or valid_acc (as logged)."),
    last: int = typer.Option(0, help="Average the N last epochs instead (0: use --best)."),
    force: bool = typer.Option(False, "--force", help="Replace --out even when it is not a model package."),
):
    """Average checkpoints into one model package (config, tokenizer, CMVN, weights). --out may replace a model
    package, never another file (a training checkpoint, say) without --force."""
    from asr_transformer.checkpoint_io import refuse_to_replace
    from asr_transformer.config import BEST_METRICS
    from asr_transformer.package import FORMAT, average_checkpoints

    if by not in BEST_METRICS:
        fail(f"--by {by}: choose {', '.join(BEST_METRICS)}")
    refuse_to_replace(out, FORMAT, force, "a model package")
    used = average_checkpoints(exp, out, best=best, by=by, last=last)
    typer.echo(f"{out}: averaged {len(used)} checkpoints: {', '.join(p.name for p in used)}")


@app.command()
def plot(
    exp: Path = typer.Argument(..., help="Experiment folder (reads train_log.jsonl)."),
    out: Path = typer.Option(..., "--out", "-o", help="PNG file for the training curves."),
    attention: Optional[Path] = typer.Option(None, help="Also plot cross-attention of this audio file."),
    model: Optional[Path] = typer.Option(None, help="Model package for --attention."),
):
    """Training curves (loss, accuracy, CER per epoch) and a cross-attention alignment plot."""
    from asr_transformer.plots import plot_attention, plot_training

    if attention is not None and model is None:
        fail("--attention needs --model")
    plot_training(exp, out)
    typer.echo(f"wrote {out}")
    if attention is not None:
        target = out.with_name(out.stem + "_attention.png")
        plot_attention(model, attention, target)
        typer.echo(f"wrote {target}")


@import_app.command("whisper")
def import_whisper_cmd(
    source: Path = typer.Argument(..., help="OpenAI .pt file, Hugging Face folder (config.json + *.safetensors) "
                                            "or CTranslate2 folder (model.bin), e.g. faster-whisper's."),
    out: Path = typer.Option(..., "--out", "-o", help="The model package to write."),
    tokenizer_json: Optional[Path] = typer.Option(None, "--tokenizer",
                                                  help="Whisper's tokenizer.json (for OpenAI .pt files, which "
                                                       "carry none)."),
    tokenizer_dir: Optional[Path] = typer.Option(None, "--tokenizer-dir",
                                                 help="Also write the tokenizer as a directory, for "
                                                      "`asr train --tokenizer DIR` (fine-tuning)."),
    language: str = typer.Option("en", help="Language of the transcripts (multilingual models)."),
    pad_to_seconds: float = typer.Option(30.0, help="Pad features to Whisper's 30-s window (0: as long as the "
                                                    "audio; faster, but Whisper was trained on 30 s)."),
    ctc: bool = typer.Option(False, "--ctc", help="Add a CTC head (random; fine-tune it for joint decoding)."),
):
    """Import an OpenAI Whisper model (needs the whisper extra: pip install 'asr-transformer\\[whisper]')."""
    from asr_transformer.whisper import import_whisper

    summary = import_whisper(source, out, tokenizer_json, language, pad_to_seconds, ctc, tokenizer_dir)
    d = summary["dims"]
    typer.echo(f"{out}: Whisper ({'multilingual' if summary['multilingual'] else 'English-only'}), "
               f"{summary['parameters'] / 1e6:.1f} M parameters, {d.n_audio_layer}+{d.n_text_layer} layers of "
               f"{d.n_audio_state}" + (f"; tokenizer → {tokenizer_dir}" if tokenizer_dir else ""))
