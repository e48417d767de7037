"""Decoding options, declared once. Every field of `config.DecodeConfig` is an option of `asr decode`, `asr
transcribe` and `asr package`, named after the field (`ctc_window` → `--ctc-window`) and explained by HELP below;
a value given is checked against config's ranges before the model loads, with the same message in every command.
Options left out keep the package's value (`asr info` shows them; the toolkit's defaults are DecodeConfig's).

Adding a decoding option: a DecodeConfig field, its range in config.RANGES, and its line in HELP."""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import fields
from pathlib import Path
from typing import List, Optional

import typer

from asr_transformer.cli.app import fail
from asr_transformer.config import DecodeConfig, check_modes, range_error
from asr_transformer.errors import DecodeError

PANEL = "Decoding (default: the package's)"

HELP = {
    "mode": "greedy, beam, joint, ctc, ctc_beam, maskctc or rescore (asr decode: a comma list decodes with each).",
    "beam": "Beam size.",
    "ctc_weight": "Weight λ of the CTC scores in joint and rescore.",
    "length_penalty": "Score bonus per output token in beam, joint and rescore.",
    "max_len_ratio": "Longest output, in tokens per encoder frame.",
    "maskctc_iterations": "Mask-CTC refinement iterations.",
    "maskctc_threshold": "Mask-CTC: tokens below this probability are masked.",
    "lm_weight": "Weight β of the token LM's scores.",
    "word_lm_weight": "Weight γ of the word LM's scores.",
    "nbest": "Hypotheses kept per utterance (in asr decode's hyp.jsonl).",
    "batch_size": "Utterances (segments) decoded together.",
    "ctc_window": "joint: CTC prefix scores sum only the frames within this (log) of a prefix's best (0: all).",
    "beam_threshold": "beam, joint: drop hypotheses this far (log) below the best (0: none).",
    "end_detect": "beam, joint: stop when for 3 steps every ending scores this far (log) below the best (0: off).",
    "split_seconds": "joint: search longer utterances in pieces cut at CTC pauses (0: whole).",
    "chunk_ms": "The encoder attends in chunks of this many ms, as streaming does (a model trained with "
                "model.streaming; 0: full context). With transcribe --stream: the audio per encoder step (640).",
    "left_chunks": "With --chunk-ms: the chunks before each that it attends to (-1: all).",
    "hotwords": "A file of phrases to favour (names, terms), one a line, optionally followed by a tab and a bonus "
                "per token: phrase<TAB>score; an empty file clears the package's list. beam, joint, ctc_beam and "
                "rescore take them.",
    "hotword_score": "Bonus per token of a listed phrase whose line gives none (log-probability).",
    "numbers": "How the text writes numbers: digits (15), words (fifteen) or '' (as the model wrote them).",
    "language": "Whisper packages: the language spoken, e.g. de ('' the package's; English-only models take en).",
    "initial_prompt": "Whisper packages: text the decoder reads as what came before (names, spellings, style).",
    "temperature": "Sample the attention decoder at this temperature, keeping the best of --beam samples (0: the "
                   "mode's search).",
    "temperature_increment": "Decode a window again, sampling this much hotter (up to 1), while its text repeats "
                             "itself or its log-probability is low: whisper's fallback (0: off).",
    "logprob_threshold": "Fallback when a window's tokens average a log-probability below this.",
    "compression_ratio_threshold": "Fallback when a window's text compresses (gzip) by more than this: a loop.",
    "no_speech_threshold": "Whisper packages and packages with a no-speech head (`asr no-speech`): a window whose "
                           "no-speech probability is above this and whose tokens average a log-probability below "
                           "--logprob-threshold gives no text (1: off).",
    "ctc_confidence_threshold": "Packages with a CTC head: a window whose CTC tokens average a posterior below "
                                "this and whose tokens average a log-probability below --logprob-threshold gives "
                                "no text (0: off).",
    "vad": "Voice detector that cuts the audio into segments: silero (neural: tells speech from noise and music; "
           "pip install 'asr-transformer[vad]'), energy (levels), none (all the audio, in pieces), auto (silero "
           "where installed, else energy).",
    "vad_threshold": "--vad silero: the speech probability that starts speech (it goes on above this less 0.15).",
    "min_speech": "Seconds: less speech than this is no segment (a click).",
    "min_silence": "Seconds: a pause this long ends a segment.",
    "speech_pad": "Seconds of context kept on each side of a segment's speech.",
    "condition_on_previous_text": "Whisper packages: each window reads the text before it as its prompt, as "
                                  "whisper does (windows then decode one at a time; off: each alone, in batches).",
    "max_window": "A model without a CTC head (Whisper): seconds of consecutive segments merged into one window "
                  "(0: its whole window, 30 s; longer windows lost sentences on long recordings).",
}
HOTWORD = typer.Option([], "--hotword", metavar="<str>", rich_help_panel=PANEL,
                       help="A phrase to favour, PHRASE or PHRASE:SCORE; repeatable, added to --hotwords' list.")

# the LMs a decoding fuses: files, so not DecodeConfig fields (their weights are)
LM = typer.Option(None, "--lm", rich_help_panel=PANEL, help="ARPA n-gram LM over the model's tokens (from `asr "
                  "lm`), fused in the beam, joint and rescore modes, instead of the package's own.")
WORD_LM = typer.Option(None, rich_help_panel=PANEL, help="ARPA word n-gram LM (from `asr lm --words`), added where "
                       "a word ends in the beam, joint and rescore modes, instead of the package's own. A phone model "
                       "then spells only the LM's words that its lexicon has.")
NO_LM = typer.Option(False, "--no-lm", rich_help_panel=PANEL, help="Decode without the LMs the package holds.")

UNSIGNED = ("none: whoever edits this file can recompute its checksum, so it loads; to load only packages you trust, "
            "sign them (asr package --sign) and set ASR_PACKAGE_KEY")


def flag(name: str) -> str:
    """A DecodeConfig field's option: ctc_window → --ctc-window."""
    return "--" + name.replace("_", "-")


def _parameters(skip: tuple) -> list[inspect.Parameter]:
    """The typer parameters of the DecodeConfig fields (each defaulting to None: the package's value)."""
    hints = typing.get_type_hints(DecodeConfig)
    params = []
    for f in fields(DecodeConfig):
        if f.name in skip:
            continue
        names = flag(f.name)
        if hints[f.name] is bool:  # a switch both ways, so that a package's default can be turned off
            names += "/--no-" + flag(f.name)[2:]
        option = typer.Option(None, names, rich_help_panel=PANEL, help=HELP[f.name])
        kind = Optional[Path] if f.name == "hotwords" else Optional[hints[f.name]]  # hotwords: a file of them
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind))
        if f.name == "hotwords":  # and phrases one by one
            params.append(inspect.Parameter("hotword", inspect.Parameter.KEYWORD_ONLY, default=HOTWORD,
                                            annotation=List[str]))
    return params


def decoding_options(*, skip: tuple = (), several_modes: bool = False):
    """Give a command every DecodeConfig field as an option (but those in `skip`). The command takes them as
    `**decoding`: the options given, checked, hotwords read into their list; `mode` stays a string (a comma list
    where `several_modes`)."""
    def wrap(command):
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
        added = _parameters(skip)
        names = {p.name for p in added}

        @functools.wraps(command)
        def run(**values):
            given = {name: values.pop(name) for name in names}
            return command(**values, **checked(given, several_modes))

        run.__signature__ = signature.replace(parameters=own + added)
        run.__annotations__ = {p.name: p.annotation for p in own + added}
        return run
    return wrap


def checked(given: dict, several_modes: bool = False) -> dict:
    """The decoding options given (not None), each checked: `--name value: must be …` on one line otherwise."""
    hotwords = read_hotwords(given.pop("hotwords", None), given.pop("hotword", []))
    options = {k: v for k, v in given.items() if v is not None}
    if hotwords is not None:
        options["hotwords"] = hotwords
    if "mode" in options:
        try:
            modes = check_modes([m.strip() for m in options["mode"].split(",") if m.strip()])
        except DecodeError as e:
            fail(f"--mode {options['mode']}: {e}")
        if len(modes) > 1 and not several_modes:
            fail(f"--mode {options['mode']}: give one mode")
        options["mode"] = ",".join(modes)
    for name, value in options.items():
        if (allowed := range_error(f"decode.{name}", value)) is not None:
            fail(f"{flag(name)} {value}: must be {allowed}")
    return options


def read_hotwords(path: Optional[Path], phrases: List[str]) -> Optional[list]:
    """--hotwords FILE and --hotword PHRASE[:SCORE] → the list of entries, or None when neither is given (the
    package's list stays); errors are one line naming the file and line or the option."""
    from asr_transformer.decode.hotwords import HotwordError, parse_option, read_hotwords as read_file

    if path is None and not phrases:
        return None
    try:
        return (read_file(path) if path is not None else []) + [parse_option(p) for p in phrases]
    except HotwordError as e:
        fail(str(e))


def recognizer(model: Path, device: str, threads: int, precision: str, lm: Optional[Path],
               word_lm: Optional[Path], no_lm: bool, **decoding):
    """A Recognizer for the command line, with the `decoding` options over the package's; errors are one line.
    An `asr export` folder gives an ExportedRecognizer (onnxruntime, no PyTorch); a name (hub.py) its package,
    fetched the first time."""
    from asr_transformer.inference.exported import ExportError, ExportedRecognizer, is_exported

    model = resolved(model)
    if no_lm and (lm is not None or word_lm is not None):
        fail("--no-lm and --lm/--word-lm: choose one")
    if is_exported(model):
        if precision != "fp32" or device not in ("auto", "cpu"):
            fail(f"{model} is an export (onnxruntime on the CPU): it takes no --precision or --device "
                 "(export with --int8 for int8)")
        try:
            return ExportedRecognizer(model, threads, lm=False if no_lm else lm, word_lm=False if no_lm else word_lm,
                                      **decoding)
        except (ExportError, OSError, KeyError) as e:
            fail(str(e))
    from asr_transformer.checkpoint_io import CheckpointError
    from asr_transformer.config import ConfigError
    from asr_transformer.decode.search import DecodeError
    from asr_transformer.inference.recognizer import Recognizer

    check_device(device, precision)
    try:
        loaded = Recognizer(model, device=device, precision=precision, threads=threads,
                            lm=False if no_lm else lm, word_lm=False if no_lm else word_lm, **decoding)
        _notice_unsigned(model)
        return loaded
    except (DecodeError, CheckpointError, ConfigError) as e:
        fail(str(e))
    except OSError as e:
        fail(f"{model}: {e.strerror or e}")
    except (RuntimeError, ValueError, KeyError) as e:  # a package this toolkit cannot run: say so, no traceback
        fail(f"{model}: cannot load the model package ({e})")


def resolved(model: Path) -> Path:
    """A model's path, or a name's package (hub.py: from the cache, a bundling package or a download, saying what it
    does on stderr); one error line when a name cannot be resolved."""
    from asr_transformer.hub import ModelNameError, is_name, resolve

    if not is_name(model):
        return model
    try:
        return resolve(model, say=lambda line: typer.echo(line, err=True))
    except (ModelNameError, OSError) as e:
        fail(str(e))


def _notice_unsigned(model: Path) -> None:
    """The first time a terminal user loads an unsigned package (without ASR_PACKAGE_KEY), one line says what that
    means; a marker named by its checksum under ~/.cache/asr-transformer keeps it from saying it again."""
    import os
    import sys

    from asr_transformer.checkpoint_io import footer_digest, is_signed
    from asr_transformer.package import package_key

    if package_key() is not None or not sys.stderr.isatty() or is_signed(model):
        return
    digest = footer_digest(model)
    seen = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "asr-transformer" / "unsigned-seen"
    if digest is None or (seen / digest).exists():
        return
    typer.secho(f"note: {model}: signature {UNSIGNED}", fg="yellow", err=True)
    try:
        seen.mkdir(parents=True, exist_ok=True)
        (seen / digest).touch()
    except OSError:
        pass


def check_device(device: str, precision: str) -> None:
    """--device names a device here, and --precision runs on it; else a one-line error naming the option."""
    from asr_transformer.device import DeviceError, pick_device
    from asr_transformer.package import check_precision

    try:
        dev = pick_device(device)
    except DeviceError as e:
        fail(f"--device {device}: {e.reason}")
    try:
        check_precision(precision, dev)
    except ValueError as e:
        fail(f"--precision {precision}: {e}")
