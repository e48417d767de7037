"""Live captions over a WebSocket (`/v1/stream`): audio in as it is recorded, partial and final transcripts out.

The protocol, as sherpa-onnx's and WeNet's servers speak it:

- The client connects to ``ws://HOST:PORT/v1/stream?model=NAME`` (the key, when the server has one, as an
  ``Authorization: Bearer`` header or ``api_key=`` in the query, since browsers cannot set headers).
- It sends binary messages of 16-bit little-endian mono PCM at 16 kHz, of any length, then the text message
  ``{"type": "end"}`` when the audio ends.
- The server sends text messages, JSON: ``{"type": "partial" | "final", "text", "start", "end"}`` (seconds from
  the start of the stream) as the speech goes, then ``{"type": "done"}``, and closes; a problem is
  ``{"type": "error", "message"}`` and a close.

A streaming package (`model.streaming`, or no look-ahead convolutions) streams: partials while someone speaks and
a final at each endpoint, exactly as `asr transcribe --stream` prints them. Any other package (an imported
Whisper, an export) gives finals only: the voice detector's segments, each decoded when it ends.
"""

from __future__ import annotations

import numpy as np

from asr_transformer.decode.search import DecodeError
from asr_transformer.inference.streaming import StreamingRecognizer
from asr_transformer.inference.segmenter import VadOptions


class LiveSession:
    """One stream's audio → its events (dicts as sent). `feed` and `finish` run on the model's thread."""

    def __init__(self, recognizer):
        self.recognizer, self.stream, self.segmenter = recognizer, None, None
        try:
            if hasattr(recognizer, "model"):  # a PyTorch package; an export cannot stream
                self.stream = StreamingRecognizer(recognizer)
        except DecodeError:
            pass
        if self.stream is None:
            self.segmenter = VadOptions.of(recognizer.options).segmenter()  # the package's detector

    @property
    def streaming(self) -> bool:
        return self.stream is not None

    def feed(self, pcm: bytes) -> list[dict]:
        """16-bit little-endian samples at 16 kHz → the events they complete."""
        samples = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2").astype(np.float32) / 32768.0
        if self.stream is not None:
            return [_event(e.kind, e.text, e.start, e.end) for e in self.stream.feed(samples) if e.text or
                    e.kind == "final"]
        return self._decode(self.segmenter.push(samples))

    def finish(self) -> list[dict]:
        """The end of the audio: the last events."""
        if self.stream is not None:
            return [_event(e.kind, e.text, e.start, e.end) for e in self.stream.finish()]
        return self._decode(self.segmenter.finish())

    def _decode(self, segments) -> list[dict]:
        if not segments:
            return []
        texts = self.recognizer.recognize_arrays([s.audio for s in segments])
        return [_event("final", text, s.start, s.end) for s, text in zip(segments, texts)]


def _event(kind: str, text: str, start: float, end: float) -> dict:
    return {"type": kind, "text": text, "start": round(float(start), 3), "end": round(float(end), 3)}
