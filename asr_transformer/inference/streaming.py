"""Live recognition: audio fed as it arrives, partial transcripts while someone speaks, a final one per utterance.

Read top to bottom (WeNet's U2 design, on this toolkit's model):

1. Features: 16 kHz samples → log-mel frames as soon as a 25 ms window is complete (the same frames `fbank` gives
   the whole recording).
2. Encoder: every `chunk` encoder frames (`decode.chunk_ms`, e.g. 640 ms) the streaming encoder
   (`Encoder.forward_chunk`) turns the input frames they need into encoder frames, attending to the chunk itself
   and the cached chunks before it: the same output as the whole utterance under `chunk_mask`.
3. Search: CTC prefix beam search (`CTCPrefixBeams`) carries its beams from chunk to chunk; after each chunk its
   best prefix is the partial transcript.
4. Endpoint: after `endpoint_silence` seconds in which CTC's best label is blank (following speech), after
   `max_silence` seconds without any speech, after `max_segment` seconds, or at the end of the input, the n-best
   of the utterance is rescored by the attention decoder over the utterance's encoder frames (and the word LM,
   as the `rescore` mode does) and given out as final, with its start and end times. The encoder and search then
   start afresh for the next utterance. `final="joint"` (or another mode) instead runs that mode's whole search
   over the utterance's encoder frames at the endpoint: slower finals, the words of offline decoding (a phone
   model spells words through its lexicon and word LM only in the beam and joint searches).
5. Voice gate: where the package's voice detector is Silero's (`decode.vad`: auto with the vad extra, or
   silero), it hears the same samples (`voice_gate.VoiceGate`). Until it hears speech, each chunk starts the
   utterance afresh (no partial, nothing written on noise kept); an utterance gives a final only where both CTC
   and the detector found speech (none for noise, music, a tone); and the detector's silence ends an utterance as
   CTC's blanks do (whichever is longer counts).

Without endpoints inside, the partials are exactly the offline `ctc_beam` decoding and the final exactly the
offline decoding in the `final` mode with the same `chunk_ms` (tests/test_streaming.py).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from asr_transformer.data.audio import checked_samples
from asr_transformer.data.features import fbank, num_frames
from asr_transformer.decode import Hypothesis
from asr_transformer.decode.ctc_prefix import CTCPrefixBeams
from asr_transformer.decode.search import MODES, DecodeError
from asr_transformer.frames import chunk_frames
from asr_transformer.inference.segmenter import VadOptions
from asr_transformer.inference.voice_gate import VoiceGate
from asr_transformer.tokens import BLANK

DEFAULT_CHUNK_MS = 640


class StreamingWarning(UserWarning):
    """A model streamed that was not trained for it."""


@dataclass
class StreamEvent:
    """A partial (may still change) or final (will not) transcript of the current utterance; times in seconds
    from the start of the stream; `latency`: seconds from the arrival of the audio that completed it to the event
    (compute time)."""

    kind: str  # "partial" | "final"
    text: str
    start: float
    end: float
    tokens: list[int] = field(default_factory=list)
    score: float | None = None
    latency: float = 0.0


@dataclass
class Endpointing:
    """When an utterance ends (WeNet's rules): CTC's best label blank for `endpoint_silence` s after speech, or for
    `max_silence` s without speech (dropped), or `max_segment` s of audio in the utterance. 0 turns a rule off."""

    endpoint_silence: float = 0.8
    max_silence: float = 5.0
    max_segment: float = 20.0


class StreamingRecognizer:
    """Feed 16 kHz samples as they come (`feed`), then `finish`; each returns the new `StreamEvent`s.

        stream = StreamingRecognizer(Recognizer("model.pt"), chunk_ms=640)
        for block in microphone_blocks():
            for event in stream.feed(block):
                print(event.kind, event.text)
        events = stream.finish()

    recognizer: a `Recognizer` of a streaming-trained model (`model.streaming: true`) or of one without Conformer
    convolutions; its options give the beam, CTC weight, length bonus and LMs of the finals.
    final: the decoding mode of each utterance's final: `rescore` (WeNet's second pass: the stream's CTC n-best
    rescored by the attention decoder and the LMs), `ctc_beam` (the stream's best CTC prefix, no decoder pass),
    or a search run over the utterance's encoder frames at its endpoint (`joint`, `beam`: with the LMs).
    """

    def __init__(self, recognizer, chunk_ms: float | None = None, left_chunks: int | None = None,
                 endpointing: Endpointing = Endpointing(), final: str = "rescore"):
        model, cfg = recognizer.model, recognizer.config
        if model.ctc is None:
            raise DecodeError("streaming needs a CTC head, which this model does not have")
        if model.encoder.look_ahead > 0:
            raise DecodeError("this model's encoder blocks look ahead (Conformer convolutions that are not causal), so "
                              "it cannot stream; train a streaming model (model.streaming: true)")
        if cfg.model.utterance_cmn or cfg.model.speaker_cmn or cfg.features.kind != "fbank":
            raise DecodeError("this model normalizes by each utterance's mean (or uses Whisper's features), so it "
                              "cannot stream")
        if not cfg.model.streaming:
            warnings.warn(StreamingWarning("this model was trained on whole utterances (model.streaming: false): in "
                                           "chunks it hears less context than it learned with, so it is less accurate "
                                           "than offline decoding"), stacklevel=2)
        opts = recognizer.options
        chunk_ms = chunk_ms if chunk_ms is not None else (opts.chunk_ms or DEFAULT_CHUNK_MS)
        self.recognizer, self.model, self.features = recognizer, model, cfg.features
        self.chunk = chunk_frames(chunk_ms, cfg.model.subsampling, cfg.features.frame_shift_ms)
        self.left_chunks = opts.left_chunks if left_chunks is None else left_chunks
        if final not in MODES:
            raise DecodeError(f"final: {final!r} is not a decoding mode ({', '.join(MODES)})")
        if cfg.model.decoder_layers == 0 and final == "rescore":
            final = "ctc_beam"  # a CTC-only model: the stream's own best prefix
        elif cfg.model.decoder_layers == 0 and final not in ("ctc", "ctc_beam"):
            raise DecodeError(f"final: {final} needs an attention decoder, which this model does not have")
        self.endpointing, self.final = endpointing, final
        vad = VadOptions.of(opts)
        self.gate = VoiceGate(vad.new_detector()) if vad.kind == "silero" else None  # one per stream
        self.hop = int(cfg.features.sample_rate * cfg.features.frame_shift_ms / 1000)
        self.win = int(cfg.features.sample_rate * cfg.features.frame_length_ms / 1000)
        self.frame_seconds = cfg.features.frame_shift_ms / 1000 * cfg.model.subsampling  # one encoder frame
        self.need = model.encoder.chunk_input_frames(self.chunk)
        self.step = self.chunk * cfg.model.subsampling
        self._samples = np.zeros(0, np.float32)  # samples from the first frame not yet computed on
        self._feats = torch.zeros(0, cfg.features.num_mel_bins)  # input frames from the utterance's next chunk on
        self._frames_done = 0  # input frames of the stream before `_feats`
        self._last_partial = None
        self._start_utterance()

    def _start_utterance(self) -> None:
        self._state = self.model.encoder.start_stream(self.chunk, self.left_chunks)
        opts = self.recognizer.options
        self._search = CTCPrefixBeams(1, opts.beam, self.model.cfg.vocab_size, self.recognizer.device,
                                      context=self.recognizer.context)
        self._enc: list[torch.Tensor] = []  # the utterance's encoder chunks (1, c, D)
        self._start_frame = self._frames_done  # input frame the utterance starts at
        if self.gate is not None:
            self.gate.forget(self._start_frame * self.hop)  # only this utterance's speech flags are asked about
        self._blank_run, self._spoke = 0, False  # trailing encoder frames whose best label is blank; any speech yet

    # ----------------------------------------------------------------------------------------- input

    def feed(self, samples: np.ndarray) -> list[StreamEvent]:
        """The next 16 kHz float samples (any number; (n,) or (n, channels), checked as a file's are:
        `checked_samples`) → the events they complete (partials, finals)."""
        arrived = time.perf_counter()
        if not (isinstance(samples, np.ndarray) and samples.size == 0):  # an empty block: nothing arrived yet
            samples = checked_samples(samples, "stream")
            self._samples = np.concatenate([self._samples, samples])
            if self.gate is not None:
                self.gate.push(samples)
        n = num_frames(len(self._samples), self.features)
        if n:
            wave = torch.from_numpy(self._samples[:(n - 1) * self.hop + self.win])
            self._feats = torch.cat([self._feats, fbank(wave, self.features)])
            self._samples = self._samples[n * self.hop:]
        events = []
        while self._feats.size(0) >= self.need:
            events += self._chunk(self._feats[:self.need], arrived)
        return events

    def finish(self) -> list[StreamEvent]:
        """The end of the input: the frames left (a last, shorter chunk) and the last utterance's final."""
        arrived = time.perf_counter()
        if self.gate is not None:
            self.gate.finish()
        events = []
        while self._feats.size(0) >= self.need:
            events += self._chunk(self._feats[:self.need], arrived)
        if self._feats.size(0):
            events += self._chunk(self._feats, arrived, last=True)
        if self._enc and self._speech(to_end=True):  # an utterance of silence only gives no final
            events.append(self._final(arrived))
        self._feats = self._feats[:0]
        return events

    # ----------------------------------------------------------------------------------------- chunks

    def _chunk(self, feats: torch.Tensor, arrived: float, last: bool = False) -> list[StreamEvent]:
        """Encode and search one chunk of input frames (T, F); → a partial if the best prefix changed, and a
        final if an endpoint follows."""
        with torch.inference_mode():
            enc = self.model.encode_chunk(feats.unsqueeze(0).to(self.recognizer.device), self._state)
            drop = feats.size(0) if last else self.step
            self._feats, self._frames_done = self._feats[drop:], self._frames_done + drop
            if enc.size(1) == 0:
                return []
            if self.gate is not None and not self.gate.heard(*self._span()):  # no speech yet: the utterance
                self._start_utterance()  # starts afresh after this chunk (nothing it wrote on noise is kept)
                return []
            log_probs = self.model.ctc_log_probs(enc)
        self._enc.append(enc)
        self._search.advance(log_probs)
        self._count_silence(log_probs[0].argmax(-1))
        events = []
        tokens, frames = self._path(self._search.paths()[1])
        if tokens != self._last_partial:
            self._last_partial = tokens
            start, end = self._times(frames)
            events.append(StreamEvent("partial", self._text(tokens, "ctc_beam"), start, end, tokens,
                                      latency=time.perf_counter() - arrived))
        if not last and self._endpoint():
            if self._speech():
                events.append(self._final(arrived))
            self._start_utterance()
        return events

    def _count_silence(self, best: torch.Tensor) -> None:
        """best (c,): CTC's best label per new encoder frame; updates the trailing-blank run and `_spoke`."""
        speech = (best != BLANK).nonzero()
        if speech.numel():
            self._spoke = True
            self._blank_run = best.numel() - 1 - int(speech[-1])
        else:
            self._blank_run += best.numel()

    def _span(self, to_end: bool = False) -> tuple[int, int]:
        """The current utterance's samples in the stream, [start, end): up to the input frames consumed so far, or
        with `to_end` all that arrived (the stream has finished)."""
        return self._start_frame * self.hop, (1 << 62) if to_end else self._frames_done * self.hop

    def _speech(self, to_end: bool = False) -> bool:
        """Whether the current utterance holds speech: CTC wrote something, and the voice gate (if any) heard it."""
        return self._spoke and (self.gate is None or self.gate.heard(*self._span(to_end)))

    def _endpoint(self) -> bool:
        e, silence = self.endpointing, self._blank_run * self.frame_seconds
        if self.gate is not None:
            silence = max(silence, self.gate.quiet(*self._span()))
        length = self._search.frames * self.frame_seconds
        speech = self._speech()
        if speech and e.endpoint_silence > 0 and silence >= e.endpoint_silence:
            return True
        if not speech and e.max_silence > 0 and silence >= e.max_silence:
            return True
        return e.max_segment > 0 and length >= e.max_segment

    # ----------------------------------------------------------------------------------------- results

    @staticmethod
    def _path(seq: torch.Tensor, rank: int = 0) -> tuple[list[int], list[int]]:
        """seq: `CTCPrefixBeams.paths()`'s (1, W, T) → the tokens of the `rank`-th prefix and the encoder frame (in
        the utterance) each was emitted at."""
        row = seq[0, rank]
        frames = (row >= 0).nonzero().flatten().tolist()
        return [int(row[t]) for t in frames], frames

    def _times(self, frames: list[int]) -> tuple[float, float]:
        """Encoder frames of the utterance → (start, end) seconds in the stream; the utterance's extent if none."""
        origin = self._start_frame * self.features.frame_shift_ms / 1000
        if not frames:
            return origin, origin + self._search.frames * self.frame_seconds
        return origin + frames[0] * self.frame_seconds, origin + (frames[-1] + 1) * self.frame_seconds

    def _text(self, tokens: list[int], mode: str) -> str:
        return " ".join(self.recognizer.text(tokens, mode).split())

    def _final(self, arrived: float) -> StreamEvent:
        """The utterance's final in the `final` mode, then a fresh utterance. Its times are those of the CTC prefix
        with its tokens, or of CTC's best prefix where the search found others."""
        paths = self._search.paths()
        nbest = self._search.nbest(paths)[0]
        mode = self.final if nbest else "ctc_beam"
        if mode == "rescore":
            best = self.recognizer.rescore(torch.cat(self._enc, 1), nbest)
        elif mode == "ctc_beam":
            best = nbest[0] if nbest else Hypothesis([], float("-inf"))
        else:
            best = self.recognizer.search(torch.cat(self._enc, 1), mode)
        rank = next((i for i, h in enumerate(nbest) if h.tokens == best.tokens), 0)
        _, frames = self._path(paths[1], rank) if nbest else ([], [])
        start, end = self._times(frames)
        event = StreamEvent("final", self._text(best.tokens, mode), start, end, best.tokens, float(best.score),
                            latency=time.perf_counter() - arrived)
        self._last_partial = None
        self._start_utterance()
        return event


def stream_file(recognizer, source, chunk_ms: float | None = None, realtime: bool = False,
                block_seconds: float = 0.1, **options):
    """Stream an audio source (a path, bytes, an array or a `data.audio_stream.PipeSource`) through a
    `StreamingRecognizer` in blocks of `block_seconds` → yields its events. `realtime`: feed no faster than the
    audio plays (a file as a microphone would give it). options: `StreamingRecognizer`'s."""
    from asr_transformer.data.audio import AudioError
    from asr_transformer.data.audio_stream import stream_audio

    stream = StreamingRecognizer(recognizer, chunk_ms, **options)
    t0, fed = time.perf_counter(), 0
    try:
        for block in stream_audio(source, block_seconds):
            if realtime:
                time.sleep(max(0.0, t0 + (fed + len(block)) / 16000 - time.perf_counter()))
            fed += len(block)
            yield from stream.feed(block)
    except AudioError as e:
        if e.kind == "truncated":  # what was heard is final, then the stream is refused
            yield from stream.finish()
        raise
    yield from stream.finish()
