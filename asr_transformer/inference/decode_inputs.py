"""The utterances of a manifest to decode, checked before any decoding, and the policy for bad ones.

`asr decode` (both recognizers) checks its output folders and every manifest line and audio header before the model
decodes anything. By default a bad utterance stops the decoding before anything is written, every one listed on
stderr; with `--skip-bad` the others are decoded and the bad ones listed on stderr and in `<out>/skipped.jsonl`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from asr_transformer.fileio import atomic_open
from asr_transformer.inference.writers import check_writable

MAX_LISTED = 20  # bad utterances listed on stderr before "… and N more"
SKIPPED = "skipped.jsonl"  # the utterances a decoding with skip_bad left out, in its output folder


class DecodeInputs:
    """The utterances of a manifest to decode, checked before any decoding, and what happens to bad ones.

    On creation the output folders are checked writable and every line of the manifest is parsed and every audio
    header read (`manifest.check_manifest`); audio found unreadable only when its samples are read (`load`: NaN
    samples, ...) is a bad utterance too. By default a bad utterance stops the decoding before anything is
    written: every one is listed on stderr (MAX_LISTED, then a count) and ManifestError raised. With `skip_bad`
    the others are decoded, and the bad ones listed on stderr and in `<out>/skipped.jsonl` (`finish`).
    """

    def __init__(self, manifest: str | os.PathLike, folders: list, skip_bad: bool = False):
        from asr_transformer.data.manifest import ManifestError, check_manifest

        for folder in folders:
            check_writable(folder)
        self.manifest, self.skip_bad = manifest, skip_bad
        self.utts, self.bad = check_manifest(manifest)
        self.total = len(self.utts) + len(self.bad)
        self.failed: set[int] = set()  # indices into `utts` whose samples could not be read
        self._reported = 0
        self._settle()
        if not self.utts:
            raise ManifestError(f"{manifest}: no utterances to decode")

    def load(self, i: int, sample_rate: int):
        """Utterance i's samples (`audio.load_utterance`), or None when they cannot be read (recorded as bad)."""
        from asr_transformer.data.audio import AudioError, load_utterance

        if i in self.failed:
            return None
        try:
            return load_utterance(self.utts[i], sample_rate)
        except AudioError as e:
            u = self.utts[i]
            self.failed.add(i)
            self.bad.append({"id": u.id, "audio": u.audio, "error": f"{self.manifest}: utterance '{u.id}': {e}"})
            return None

    @property
    def stopped(self) -> bool:
        """Whether decoding is pointless: an utterance failed and bad ones are not skipped (the rest is only read,
        to list every bad one)."""
        return bool(self.failed) and not self.skip_bad

    def batches(self, size: int, sample_rate: int, advance=lambda n: None):
        """The utterances longest first, `size` at a time → (indices, samples) of those whose samples could be read.
        Once one could not and bad ones are not skipped, nothing more is yielded: the rest is only read, to list
        every bad one. `advance(n)` is told how many utterances each batch read."""
        order = sorted(range(len(self.utts)), key=lambda i: -self.utts[i].duration)
        for start in range(0, len(order), size):
            batch = order[start:start + size]
            waves = {i: w for i in batch if (w := self.load(i, sample_rate)) is not None}
            advance(len(batch))
            if waves and not self.stopped:
                yield list(waves), list(waves.values())

    def finish(self, out: str | os.PathLike) -> list[int]:
        """After decoding, before writing: apply the policy to the utterances that failed on reading, write
        `<out>/skipped.jsonl` (or remove an old one when none was skipped); → the indices of the utterances
        decoded."""
        from asr_transformer.data.manifest import ManifestError

        self._settle()
        if len(self.failed) == len(self.utts):
            raise ManifestError(f"{self.manifest}: none of its utterances could be decoded (listed above)")
        path = Path(out) / SKIPPED
        if self.bad:
            with atomic_open(path) as f:
                for record in self.bad:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
            print(f"skipped {len(self.bad)} of {self.total} utterances (listed in {path}); the results cover the "
                  f"other {self.total - len(self.bad)}", file=sys.stderr)
        else:
            path.unlink(missing_ok=True)
        return [i for i in range(len(self.utts)) if i not in self.failed]

    def _settle(self) -> None:
        """List the bad utterances not listed yet: as skipped, or as the reason to refuse (then raise)."""
        from asr_transformer.data.manifest import ManifestError

        new = self.bad[self._reported:]
        if not new:
            return
        _list_bad(new, "skipped" if self.skip_bad else "bad")
        self._reported = len(self.bad)
        if not self.skip_bad:
            raise ManifestError(f"{self.manifest}: {len(self.bad)} of {self.total} utterances cannot be decoded "
                                f"(listed above); fix or remove them, or decode the others with --skip-bad")


def _list_bad(records: list[dict], label: str) -> None:
    """One line per bad utterance on stderr, `<label>: <error>`, MAX_LISTED of them, then how many more."""
    for record in records[:MAX_LISTED]:
        print(f"{label}: {record['error']}", file=sys.stderr)
    if len(records) > MAX_LISTED:
        print(f"… and {len(records) - MAX_LISTED} more", file=sys.stderr)
