"""Silero's neural voice detector: each 32-ms frame of a stream called speech or not by a small recurrent network.

Silero VAD (MIT licence) is what faster-whisper, WhisperX and sherpa-onnx put in front of their recognizers: it
tells speech from noise, music and tones, which an energy threshold cannot. Its PyPI wheel, `silero-vad` (the
`vad` extra), ships the network as ONNX; it is run here with onnxruntime and numpy alone (the wheel's own code,
which imports PyTorch, is never run). The "sequence" graph takes a block of frames at once: each row is a frame of
512 samples at 16 kHz after the last 64 samples of the frame before it, and the LSTM's state (h, c) carries over
from block to block, so a stream's probabilities are those of the whole file read at once.

A frame starts speech when its probability reaches `threshold` and speech goes on while it stays above
`threshold − 0.15` (faster-whisper's rule; the hysteresis keeps a word's quiet middle). `segmenter.Segmenter`
turns the frames into segments, as it does the energy detector's.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np

from asr_transformer.errors import UserError
from asr_transformer.inference.energy_vad import frame_db

GRAPH = "silero_vad_16k_sequence.onnx"  # in the wheel's silero_vad/data
CONTEXT = 64  # samples of the frame before, read with each frame
HYSTERESIS = 0.15
BLOCK = 512  # frames per onnxruntime call at most (16 s)
NOT_INSTALLED = ("the Silero voice detector is not installed: pip install 'asr-transformer[vad]' (the silero-vad "
                 "wheel and onnxruntime), or choose vad energy")


class VadUnavailable(UserError):
    """The Silero detector was asked for where its wheel or onnxruntime is not installed."""


def model_path() -> Path | None:
    """The Silero graph of the installed `silero-vad` wheel (found without importing it), or None."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / GRAPH
    return path if path.is_file() else None


def available() -> bool:
    """Whether `SileroDetector` can run here: the wheel's graph and onnxruntime are installed."""
    return model_path() is not None and importlib.util.find_spec("onnxruntime") is not None


@functools.lru_cache(maxsize=None)
def _session(path: str):
    """One onnxruntime session per graph and process (its state lives in the inputs, so streams share it)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1  # a tiny network: a thread is plenty
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


class SileroDetector:
    """Frames of 32 ms classified by Silero VAD, with the state of one stream (module docstring).

    threshold: speech probability at which speech starts, in (0, 1)."""

    frame = 512  # samples

    def __init__(self, threshold: float = 0.5):
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"the Silero threshold is a probability in (0, 1), got {threshold}")
        path = model_path()
        if path is None or not available():
            raise VadUnavailable(NOT_INSTALLED)
        self.session = _session(str(path))
        self.threshold, self.release = threshold, max(threshold - HYSTERESIS, 0.01)
        self.h = np.zeros((1, 1, 128), np.float32)
        self.c = np.zeros((1, 1, 128), np.float32)
        self.context = np.zeros(CONTEXT, np.float32)
        self.speaking = False

    def probabilities(self, frames: np.ndarray) -> np.ndarray:
        """The next (n, 512) samples of the stream → (n,) speech probabilities."""
        frames = np.ascontiguousarray(frames, dtype=np.float32)
        out = []
        for lo in range(0, len(frames), BLOCK):
            block = frames[lo:lo + BLOCK]
            before = np.concatenate([self.context[None], block[:-1, -CONTEXT:]])  # each frame's context
            probs, self.h, self.c = self.session.run(
                None, {"input": np.concatenate([before, block], axis=1), "h": self.h, "c": self.c})
            self.context = block[-1, -CONTEXT:].copy()
            out.append(np.asarray(probs, np.float32).reshape(-1))
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    def classify(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The next (n, 512) samples → ((n,) energy dB, (n,) speech flags by the hysteresis rule)."""
        speech = np.zeros(len(frames), bool)
        for i, p in enumerate(self.probabilities(frames)):
            self.speaking = p >= (self.release if self.speaking else self.threshold)
            speech[i] = self.speaking
        return frame_db(frames), speech

