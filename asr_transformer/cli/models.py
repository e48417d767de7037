"""Commands on model packages: decode, package, export, info and score."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from asr_transformer.cli.app import DEVICE, PRECISION, THREADS, app, fail
from asr_transformer.cli.options import LM, NO_LM, PANEL, UNSIGNED, WORD_LM, decoding_options, recognizer
from asr_transformer.config import VAD_OPTIONS


@app.command()
@decoding_options(several_modes=True, skip=VAD_OPTIONS)  # a manifest's utterances are read whole
def decode(
    model: Path = typer.Argument(..., help="Model package (from asr package), or an ONNX export (asr export)."),
    manifest: Path = typer.Argument(..., exists=True, dir_okay=False, help="Manifest to decode."),
    out: Path = typer.Option(..., "--out", "-o", help="Result folder; one sub-folder per mode when several."),
    lm: Optional[Path] = LM,
    word_lm: Optional[Path] = WORD_LM,
    no_lm: bool = NO_LM,
    device: str = DEVICE,
    threads: int = THREADS,
    precision: str = PRECISION,
    score: bool = typer.Option(True, help="Score against the manifest's texts afterwards."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Decode the good utterances when some cannot be "
                                  "decoded, and list the bad ones on stderr and in OUT/skipped.jsonl (default: "
                                  "list them and stop, writing nothing)."),
    **decoding,
):
    """Decode a manifest with the package's decoding setup (or the options given); writes hyp.jsonl and a Kaldi
    `text` file, reports RTF.

    Before decoding, --out is checked writable and every manifest line parsed and every audio header read. An
    utterance that cannot be decoded (a bad line, audio missing, unreadable or empty, or samples found NaN when
    read) stops the command: each is listed on stderr, the exit status is 1 and nothing is written. With
    --skip-bad the others are decoded and written, the bad ones listed in OUT/skipped.jsonl, exit status 0."""
    from asr_transformer.inference.writers import check_writable

    modes = decoding.pop("mode").split(",") if "mode" in decoding else []
    check_writable(out)  # before the model loads
    rec = recognizer(model, device, threads, precision, lm, word_lm, no_lm, **decoding,
                     **({"mode": modes[0]} if modes else {}))
    rec.decode_manifest(manifest, out, modes or None, score=score, skip_bad=skip_bad)


@app.command("package")
@decoding_options()
def package_(
    model: Path = typer.Argument(..., help="Model package (from asr average)."),
    out: Path = typer.Option(..., "--out", "-o", help="Package to write (may be MODEL itself)."),
    lm: Optional[Path] = typer.Option(None, "--lm", rich_help_panel=PANEL,
                                      help="ARPA n-gram LM over the model's tokens (`asr lm`) to store."),
    word_lm: Optional[Path] = typer.Option(None, rich_help_panel=PANEL,
                                           help="ARPA word n-gram LM (`asr lm --words`) to store."),
    no_lm: bool = typer.Option(False, "--no-lm", rich_help_panel=PANEL, help="Remove the LMs the package holds."),
    result: List[str] = typer.Option([], help="NAME=DIR: record the result of a decoding of this package (a folder "
                                     "with result.json and rtf.json, e.g. dev=exp/decode_dev); repeatable."),
    sign: bool = typer.Option(False, "--sign", help="Sign OUT with the key in ASR_PACKAGE_KEY, accepting MODEL "
                              "unsigned: for a package you trust (with the key set, only signed packages load)."),
    force: bool = typer.Option(False, "--force", help="Replace --out even when it is not a model package."),
    fp16_weights: bool = typer.Option(False, "--fp16-weights", help="Store the weights in float16: half the size "
                                      "(Whisper's own precision), loaded back as float32."),
    **decoding,
):
    """Make a model package a complete recognizer: its decoding defaults (chosen on dev; every decoding option
    can be stored), the LMs they use (stored inside, compressed), and the results it was validated with. `asr
    decode` and `asr transcribe` then need no decoding options; `asr info` shows what it holds."""
    from asr_transformer.checkpoint_io import CheckpointError, refuse_to_replace
    from asr_transformer.decode.search import DecodeError
    from asr_transformer.package import FORMAT, LM_KINDS, set_decoding

    refuse_to_replace(out, FORMAT, force, "a model package")
    if no_lm and (lm is not None or word_lm is not None):
        fail("--no-lm and --lm/--word-lm: choose one")
    lms = dict.fromkeys(LM_KINDS) if no_lm else {k: v for k, v in (("lm", lm), ("word_lm", word_lm)) if v is not None}
    results = {}
    for item in result:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            fail(f"--result {item}: expected NAME=DIR, e.g. test=exp/decode_test")
        results[name] = Path(folder)
    try:
        set_decoding(model, out, decoding, lms, results, sign=sign, fp16_weights=fp16_weights)
    except (DecodeError, CheckpointError, ValueError) as e:
        fail(str(e))
    except OSError as e:
        fail(f"{e.filename or model}: {e.strerror or e}")
    print_info(out)


@app.command("export")
def export_(
    model: Path = typer.Argument(..., help="Model package."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write the export into."),
    fmt: str = typer.Option("onnx", "--format", help="onnx (runs with onnxruntime) or pt2 (torch.export programs; "
                            "torchscript: pt2's deprecated name)."),
    int8: bool = typer.Option(False, "--int8", help="Quantize the ONNX graphs' weights to int8."),
    mode: Optional[str] = typer.Option(None, help="The export's default decoding mode: ctc, ctc_beam, rescore, "
                                       "greedy, beam, joint or maskctc (default: the package's)."),
    force: bool = typer.Option(False, "--force", help="Write into --out even when it holds files but no export."),
):
    """Export a model package for inference without this toolkit's PyTorch code: the encoder with its CTC head and
    the decoder step with its key/value cache (dynamic batch and time axes), the tokenizer, the package's LMs and
    decoding defaults beside them. `asr transcribe --model FOLDER` runs an ONNX export with onnxruntime, decoding as
    the package does."""
    from asr_transformer.checkpoint_io import CheckpointError
    from asr_transformer.inference.export import DEPRECATED_FORMATS, deprecated_format_notice, export_package
    from asr_transformer.inference.exported import EXPORTED_MODES

    if fmt in DEPRECATED_FORMATS:
        typer.echo(deprecated_format_notice(fmt), err=True)
        fmt = DEPRECATED_FORMATS[fmt]
    if mode is not None and mode not in EXPORTED_MODES:
        fail(f"--mode {mode}: an export decodes with {', '.join(EXPORTED_MODES)}")
    if not force and out.is_dir() and any(out.iterdir()) and not (out / "export.json").exists():
        fail(f"{out}: holds files but no export (export.json): give an empty or new folder, or --force")
    if out.exists() and not out.is_dir():
        fail(f"{out}: a file; an export is a folder")
    try:
        sizes = export_package(model, out, fmt, int8, mode)
    except (CheckpointError, ValueError) as e:
        fail(str(e))
    except OSError as e:
        fail(f"{e.filename or model}: {e.strerror or e}")
    for name, size in sizes.items():
        typer.echo(f"{out / name}: {size / 1e6:.1f} MB")


@app.command()
def info(model: Path = typer.Argument(..., help="Model package.")):
    """What a model package holds: model shape, units, training data, decoding defaults, LMs, validated results."""
    print_info(model)


def print_info(model: Path) -> None:
    from asr_transformer.checkpoint_io import is_signed
    from asr_transformer.info import describe
    from asr_transformer.package import KEY_VARIABLE, package_key

    typer.echo(describe(model))
    signed = is_signed(model)
    typer.echo("signature:  " + (UNSIGNED if not signed else f"valid for {KEY_VARIABLE}" if package_key()
                                 else f"present, not checked ({KEY_VARIABLE} is unset)"))


@app.command()
def score(
    decode_dir: Path = typer.Argument(..., metavar="DECODE_DIR|REF", help="A decode result folder (holding "
                                      "hyp.jsonl, or sub-folders that do), or REF: the references HYP is scored against."),
    hyp: Optional[Path] = typer.Argument(None, metavar="HYP", help="Hypotheses, as REF: Kaldi text (`<id> <words>`) "
                                         "or sclite trn (`<words> (<id>)`, or any file named *.trn)."),
    normalizer: str = typer.Option("toolkit", help="How texts are normalized: toolkit (lower case, punctuation "
                                   "removed; a folder also gets Whisper's reports), whisper (Whisper's English "
                                   "normalizer: also numbers, spellings, contractions; result_whisper.*) or none (as "
                                   "written; result_none.*)."),
):
    """WER/CER/SER with an sclite-style summary and per-utterance alignments (in the decode folder). Two files,
    REF and HYP, are scored as Kaldi's compute-wer and sclite score them, with the same normalization as a decode
    folder: an utterance of REF missing from HYP counts as deleted; a HYP id not in REF is an error."""
    from asr_transformer.scoring import score_decoding, score_dir, score_files, whisper_line
    from asr_transformer.text import NORMALIZERS, NormalizerConfig, text_normalizer

    if normalizer not in NORMALIZERS:
        fail(f"--normalizer {normalizer}: choose from {', '.join(NORMALIZERS)}")
    if hyp is not None:
        if decode_dir.is_dir():
            fail(f"{decode_dir}: a folder; with HYP, REF is a file of references (Kaldi text or trn)")
        report, missing = score_files(decode_dir, hyp, text_normalizer(normalizer))
        if missing:
            typer.echo(f"{len(missing)} utterance(s) of {decode_dir} are not in {hyp}: counted as deletions", err=True)
        typer.echo(report.summary_table(title=str(hyp)))
        return
    if decode_dir.is_file():
        fail(f"{decode_dir}: a file; give a decode folder, or REF and HYP files to score")
    dirs = [decode_dir] if (decode_dir / "hyp.jsonl").exists() else sorted(p.parent for p in decode_dir.glob("*/hyp.jsonl"))
    if not dirs:
        fail(f"{decode_dir}: no hyp.jsonl here or in its sub-folders")
    for d in dirs:
        typer.echo(f"== {d}")
        if normalizer == "toolkit":  # and Whisper's beside it, as a decoding scores
            report, whisper = score_decoding(d)
            typer.echo(report.summary_table() + whisper_line(whisper))
        else:
            typer.echo(score_dir(d, NormalizerConfig(), normalizer).summary_table())
