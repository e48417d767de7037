"""`asr transcribe`: audio files of any length, or live streams, to text and subtitle files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from asr_transformer.cli.app import DEVICE, PRECISION, THREADS, app, fail
from asr_transformer.cli.options import LM, NO_LM, WORD_LM, decoding_options, recognizer
from asr_transformer.cli.output import StreamPrinter, TranscriptionProgress, output_names, write_transcript

@app.command()
@decoding_options(skip=("nbest",))  # a transcript is the best hypothesis of each segment
def transcribe(
    audio: List[str] = typer.Argument(..., help="Audio files (any format soundfile reads); - reads stdin."),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Model package, an ONNX export (asr export: "
                                         "onnxruntime, no PyTorch), or a name (whisper-tiny.en, whisper-base, …: "
                                         "fetched once into ~/.cache/asr-transformer). Default: whisper-tiny.en."),
    output_dir: Optional[Path] = typer.Option(None, "--out", "-o", "--output-dir",
                                              help="Write <basename>.<ext> into this folder (--output-dir: "
                                                   "whisper's name); inputs that share a basename keep their "
                                                   "extension in it (a.wav.json, a.flac.json)."),
    output_format: str = typer.Option("txt", "--output-format", "-f", help="txt, json, srt, vtt, tsv or all."),
    lm: Optional[Path] = LM,
    word_lm: Optional[Path] = WORD_LM,
    no_lm: bool = NO_LM,
    device: str = DEVICE,
    threads: int = THREADS,
    precision: str = PRECISION,
    max_segment: Optional[float] = typer.Option(None, help="Longest segment (s) decoded at once; longer audio is "
                                                "split (default: 20)."),
    same_speaker: bool = typer.Option(False, help="A model.speaker_cmn model: the files are one speaker's, so "
                                      "each is normalized by the mean of the speech so far in all of them "
                                      "(default: each file its own)."),
    word_timestamps: bool = typer.Option(False, "--word-timestamps", help="Time each word too (CTC forced "
                                         "alignment; without a CTC head, as Whisper: the decoder's cross-attention "
                                         "by dynamic time warping): json gets each segment's words, srt/vtt/tsv "
                                         "cues of a few words. A model without a CTC head times its words for "
                                         "srt/vtt/tsv anyway: its 30-s windows are too long for one cue."),
    max_line_width: int = typer.Option(42, help="srt/vtt/tsv with timed words: characters per subtitle line."),
    max_line_count: int = typer.Option(2, help="srt/vtt/tsv with timed words: lines per cue."),
    max_words_per_cue: Optional[int] = typer.Option(None, help="srt/vtt/tsv with timed words: words per cue (1: a "
                                                    "cue per word; default: as many as the lines hold)."),
    stream: bool = typer.Option(False, "--stream", help="Live: decode the audio as it arrives (a streaming model), "
                                "printing partial lines (rewritten in place on a terminal) and a final line per "
                                "utterance; e.g. `sox -d -t wav - | asr transcribe --stream - -m model.pt`. Finals: "
                                "the CTC n-best rescored by the decoder and LMs, or with --mode joint (or beam) that "
                                "search over each utterance, as offline (slower finals; a phone model's words)."),
    realtime: bool = typer.Option(False, "--realtime", help="--stream: feed a file no faster than it plays."),
    raw_rate: int = typer.Option(0, "--raw-rate", help="--stream: stdin is headerless 16-bit mono PCM at this "
                                 "sample rate (Hz) instead of WAV."),
    **decoding,
):
    """Transcribe audio files of any length with the package's decoding setup (or the options given); text to
    stdout, or files in several formats.

    Without --out, txt prints the text (one line per input; with several inputs `<input>\\t<text>`) and
    another format prints that format (one input only). Inputs that cannot be read are reported and skipped;
    the exit code is 1 if any failed. An input in which the energy detector finds no speech although it is not
    silent is decoded whole, in --max-segment pieces, with a warning; Silero's detector (--vad) is trusted there:
    nothing is decoded, and a warning says so."""
    from asr_transformer.inference.cues import needs_word_times
    from asr_transformer.inference.transcribe import MAX_SEGMENT
    from asr_transformer.inference.writers import SUBTITLES

    max_segment = MAX_SEGMENT if max_segment is None else max_segment
    _check_transcribe_options(audio, output_dir, output_format, max_segment)
    cue_options = _cue_options(max_line_width, max_line_count, max_words_per_cue)
    if model is None:  # as `whisper audio.wav` does: a default, said
        from asr_transformer.hub import DEFAULT

        typer.secho(f"note: no --model given: using {DEFAULT}", fg="yellow", err=True)
        model = Path(DEFAULT)
    chunk_ms = decoding.pop("chunk_ms", None) if stream else None  # --stream: the audio per encoder step
    rec = recognizer(model, device, threads, precision, lm, word_lm, no_lm, **decoding, nbest=1)
    if stream:
        _transcribe_streams(rec, audio, output_dir, output_format, chunk_ms, realtime, raw_rate,
                            decoding.get("mode", "rescore"), cue_options)
        return
    if output_format == "all" or output_format in SUBTITLES:  # a Whisper window is too long for one cue
        word_timestamps = word_timestamps or needs_word_times(rec)
    speaker = None  # one running mean for all the inputs (transcribe ignores it unless model.speaker_cmn)
    if same_speaker:
        from asr_transformer.data.features import CMVNAccumulator
        speaker = CMVNAccumulator(rec.config.features.num_mel_bins)
    failed = 0
    for item, basename in zip(audio, output_names(audio)):
        source, label = _transcribe_input(item)
        result = _transcribe_one(rec, source, label, max_segment, speaker, word_timestamps)
        if result is None or not write_transcript(result, label, basename, output_dir, output_format,
                                                  several=len(audio) > 1, cue_options=cue_options):
            failed += 1
    if failed:
        typer.secho(f"{failed} of {len(audio)} input(s) failed", fg="red", err=True)
        raise typer.Exit(code=1)


def _cue_options(max_line_width: int, max_line_count: int, max_words_per_cue: Optional[int]):
    from asr_transformer.inference.cues import CueOptions

    try:
        return CueOptions(max_line_width, max_line_count, max_words_per_cue)
    except ValueError as e:
        fail(f"--{str(e).replace('_', '-')}")


def _transcribe_streams(rec, audio: List[str], output_dir: Optional[Path], output_format: str,
                        chunk_ms: Optional[int], realtime: bool, raw_rate: int, final: str, cue_options) -> None:
    """`asr transcribe --stream`: each input through a StreamingRecognizer (finals in the mode `final`); lines as
    `StreamPrinter` shows them, and the usual files at the end with --out."""
    from asr_transformer.data.audio import AudioError
    from asr_transformer.decode.search import DecodeError
    from asr_transformer.inference.streaming import stream_file
    from asr_transformer.data.audio_stream import PipeSource

    if not hasattr(rec, "model"):
        fail("--stream needs a model package (an ONNX export cannot stream)")
    failed = 0
    for item, basename in zip(audio, output_names(audio)):
        source = PipeSource(getattr(sys.stdin, "buffer", sys.stdin), raw_rate) if item == "-" else item
        label = "stdin" if item == "-" else item
        printer, segments = StreamPrinter(label if len(audio) > 1 else None), []
        try:
            for event in stream_file(rec, source, chunk_ms, realtime=realtime, final=final):
                printer.show(event)
                if event.kind == "final" and event.text:
                    segments.append({"start": round(event.start, 3), "end": round(event.end, 3), "text": event.text,
                                     "score": event.score})
        except DecodeError as e:
            fail(str(e))
        except AudioError as e:
            printer.close()
            typer.secho(f"error: {e}", fg="red", err=True)
            failed += 1
            continue
        except KeyboardInterrupt:  # Ctrl-C ends a live stream: keep what was final
            printer.close()
        result = {"text": " ".join(s["text"] for s in segments), "segments": segments,
                  "duration": printer.end}
        if output_dir is not None and not write_transcript(result, label, basename, output_dir, output_format,
                                                            several=len(audio) > 1, cue_options=cue_options):
            failed += 1
    if failed:
        typer.secho(f"{failed} of {len(audio)} input(s) failed", fg="red", err=True)
        raise typer.Exit(code=1)


def _check_transcribe_options(audio: List[str], output_dir: Optional[Path], output_format: str,
                              max_segment: float) -> None:
    """The options of `asr transcribe` that go together, checked before the model loads."""
    from asr_transformer.inference.writers import FORMATS, check_writable

    if output_format != "all" and output_format not in FORMATS:
        fail(f"--output-format {output_format}: choose from {', '.join(FORMATS)} or all")
    if output_dir is None and output_format == "all":
        fail("--output-format all writes several files: give --out")
    if output_dir is None and output_format != "txt" and len(audio) > 1:
        fail(f"--output-format {output_format} for several inputs: give --out")
    if list(audio).count("-") > 1:
        fail("stdin (-) can be read only once")
    if not max_segment >= 0.5:
        fail(f"--max-segment {max_segment}: must be at least 0.5 seconds")
    if output_dir is not None:
        check_writable(output_dir)  # before any audio is decoded


def _transcribe_input(item: str) -> tuple:
    """An AUDIO argument → (what to transcribe: a path or stdin's bytes, its label in messages)."""
    if item == "-":
        stdin = getattr(sys.stdin, "buffer", sys.stdin)
        return stdin.read(), "stdin"
    return item, item


def _transcribe_one(rec, source, label: str, max_segment: float, speaker, word_timestamps: bool) -> Optional[dict]:
    """Transcribe one input with a progress bar (long files); its warnings as one line naming it. → the result,
    or None after an `error: <label>: …` line when its audio cannot be read."""
    import warnings

    from asr_transformer.data.audio import AudioError
    from asr_transformer.inference.transcribe import EmptySegmentWarning, NoSpeechWarning

    bar = TranscriptionProgress(label)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NoSpeechWarning)
            warnings.simplefilter("always", EmptySegmentWarning)
            result = rec.transcribe(source, max_segment=max_segment, progress=bar, speaker=speaker,
                                    word_timestamps=word_timestamps)
        for w in caught:  # ours as one line naming the input; any other as Python shows it
            if isinstance(w.message, (NoSpeechWarning, EmptySegmentWarning)):
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
