"""Progress bars on stderr, one look for every long job: training, decoding, transcription, corpus
preparation, downloads. Shown only where stderr is a terminal (logs get their own lines)."""

from __future__ import annotations

from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")

COUNT = "{task.completed}/{task.total}"  # what a bar counts: items by default
SECONDS = "{task.completed:.0f}/{task.total:.0f} s audio"
BYTES = "bytes"  # a download: its size and speed


def progress_bar(count: str = COUNT, extra: str = "", *, transient: bool = False, disable: bool | None = None):
    """A rich `Progress` on stderr: description, bar, `count` (a format of the task, or BYTES), time elapsed and
    left, and `extra` (a format over the task's fields, e.g. "{task.fields[info]}"). `disable`: default hidden
    unless stderr is a terminal."""
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn, TransferSpeedColumn)

    console = Console(stderr=True)
    counted = (DownloadColumn(), TransferSpeedColumn()) if count == BYTES else (TextColumn(count),)
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), *counted, TimeElapsedColumn(), TextColumn("eta"),
               TimeRemainingColumn()] + ([TextColumn(extra)] if extra else [])
    return Progress(*columns, console=console, transient=transient,
                    disable=not console.is_terminal if disable is None else disable)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate over `items` with a bar (`total`: their number, when `items` has no len)."""
    total = total if total is not None else len(items) if hasattr(items, "__len__") else None
    with progress_bar(transient=True) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)
