"""Frame-count arithmetic of the convolutional front-ends, shared by the data loader and the model.

`data/loader.py` needs it to drop utterances too short for CTC, `model/subsampling.py: Conv2dSubsampling`
to mask its output; it sits here, below both in the import order (tests/test_imports.py), and imports
nothing (not torch either).
"""

# (kernel, stride) of each conv2d layer, as WeNet's Conv2dSubsampling4/6/8
SUBSAMPLING_LAYERS = {4: ((3, 2), (3, 2)), 6: ((3, 2), (5, 3)), 8: ((3, 2), (3, 2), (3, 2))}


def subsampled_length(frames, factor: int = 4):
    """Encoder frames for `frames` input frames (an int or an int tensor), exactly as Conv2dSubsampling:
    factor 4: ((T-1)//2 - 1)//2; 6: ((T-1)//2 - 2)//3; 8: (((T-1)//2 - 1)//2 - 1)//2; never below 0.
    Factor 2 is Whisper's padded Conv1d front-end (Conv1dSubsampling): ⌈T/2⌉."""
    if factor == 2:
        return (frames + 1) // 2
    for kernel, stride in SUBSAMPLING_LAYERS[factor]:
        frames = (frames - kernel) // stride + 1
        frames = frames.clamp(min=0) if hasattr(frames, "clamp") else max(frames, 0)  # a torch tensor, or a number
    return frames


def chunk_frames(chunk_ms: float, factor: int, frame_shift_ms: float = 10.0) -> int:
    """Encoder frames in a streaming chunk of `chunk_ms` milliseconds (0: full context, 0 frames); a chunk is at
    least one encoder frame (factor · frame_shift_ms: 40 ms at ×4) and a whole number of them, rounded down."""
    if chunk_ms <= 0:
        return 0
    return max(1, int(chunk_ms // (factor * frame_shift_ms)))
