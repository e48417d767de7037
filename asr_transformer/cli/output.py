"""What the commands show: the prepared-corpus table, transcripts on stdout or in files, live captions, and a
transcription's progress."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Optional

import typer


def echo_summary(summary: dict) -> None:
    """`asr prepare`'s table of the splits written (utterances, hours, speakers), and what was skipped."""
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


class StreamPrinter:
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




def output_names(audio: list[str]) -> list[str]:
    """The basename of each input's output files: its stem (speech.wav → speech), stdin's "stdin"; inputs that
    share a stem keep their extension (speech.wav, speech.flac), and a counter follows where even that is
    shared (a/speech.wav, b/speech.wav → speech.wav, speech.wav-2): no output is written over another."""
    stems = ["stdin" if item == "-" else Path(item).stem or Path(item).name for item in audio]
    names, taken = [], {}
    for item, stem in zip(audio, stems):
        name = stem if stems.count(stem) == 1 else Path(item).name
        taken[name] = taken.get(name, 0) + 1
        names.append(name if taken[name] == 1 else f"{name}-{taken[name]}")
    return names


def write_transcript(result: dict, label: str, basename: str, output_dir: Optional[Path], output_format: str,
                     several: bool, cue_options=None) -> bool:
    """A result to stdout (no --out: txt as text, `<label>\t<text>` with several inputs; another format whole), or
    to files `basename`.<ext> in `output_dir`; subtitles cut by `cue_options` (a `CueOptions`; None: defaults).
    → False after an `error:` line when they cannot be written."""
    from asr_transformer.inference.cues import CueOptions
    from asr_transformer.inference.writers import format_result, write_result

    cue_options = cue_options or CueOptions()
    if output_dir is None:
        if output_format == "txt":
            typer.echo(f"{label}\t{result['text']}" if several else result["text"])
        else:
            typer.echo(format_result(result, output_format, cue_options), nl=False)
        return True
    try:
        paths = write_result(result, output_dir, basename, output_format, cue_options)
    except OSError as e:
        typer.secho(f"error: {label}: cannot write output to {output_dir} ({e})", fg="red", err=True)
        return False
    typer.echo(f"{label} → {', '.join(str(p) for p in paths)}", err=True)
    return True


class TranscriptionProgress:
    """A progress bar on stderr for `transcribe`'s progress callback (seconds of audio and segments done), shown
    only for files of at least MIN_SECONDS."""

    MIN_SECONDS = 60.0

    def __init__(self, label: str):
        self.label, self.bar, self.task = label, None, None

    def __call__(self, done: float, total: Optional[float], segments: int) -> None:
        if self.bar is None:
            if total is None or total < self.MIN_SECONDS:
                return
            from asr_transformer.progress import SECONDS, progress_bar

            self.bar = progress_bar(SECONDS, "{task.fields[segments]} segments")
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total, segments=0)
        self.bar.update(self.task, completed=min(done, self.bar.tasks[0].total), segments=segments)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
