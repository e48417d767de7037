"""One copy of each weight in an ONNX export: the graphs' tensors moved into a shared file, each stored once.

The export's decoder graphs (a step with caches, and every position at once) hold the same weights; an imported
Whisper's tied 51,864 × 384 embedding alone is 80 MB, and each graph used to carry its own. `share_weights`
moves every tensor of at least `MIN_BYTES` out of the graphs into `weights.bin` (ONNX's external data: a
file name, an offset and a length, read by onnxruntime from beside the graph), writing tensors with the same
bytes once; a matrix stored transposed elsewhere (the exporter folds a tied embedding into the output projection
as its transpose) is read through a Transpose node. Offsets are aligned to pages, so onnxruntime can map them.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

MIN_BYTES = 1024  # smaller tensors (shapes, scales, biases of small layers) stay inside their graph
ALIGN = 4096
WEIGHTS = "weights.bin"


def share_weights(folder: str | os.PathLike, graphs: list[str], weights: str = WEIGHTS) -> int:
    """Move the large tensors of the ONNX files `graphs` (names in `folder`) into `folder`/`weights`, each
    distinct tensor once; rewrite the graphs to point there. → the bytes written to `weights`.

    A matrix that is another one transposed (a tied embedding folded into an output projection) is read as that
    one through a Transpose node. The weights file is written first and each graph replaced atomically, after it."""
    import onnx

    from asr_transformer.fileio import atomic_open

    folder = Path(folder)
    models = {name: onnx.load(str(folder / name)) for name in graphs}
    placed: dict[bytes, tuple[int, int]] = {}  # sha-256 of the bytes → (offset, length) in the weights file
    with atomic_open(folder / weights, "wb") as out:
        end = 0
        for model in models.values():
            for tensor in list(model.graph.initializer):
                data = _bytes(tensor)
                if len(data) < MIN_BYTES:
                    continue
                key = hashlib.sha256(data).digest()
                if key not in placed and _read_transposed(model, tensor, placed, weights):
                    continue
                if key not in placed:
                    start = -(-end // ALIGN) * ALIGN
                    out.write(b"\0" * (start - end) + data)
                    placed[key], end = (start, len(data)), start + len(data)
                _point(tensor, weights, *placed[key])
    for name, model in models.items():
        with atomic_open(folder / name, "wb") as f:
            f.write(model.SerializeToString())
    return end


def _bytes(tensor) -> bytes:
    from onnx import numpy_helper

    return tensor.raw_data or numpy_helper.to_array(tensor).tobytes()


def _read_transposed(model, tensor, placed: dict, weights: str) -> bool:
    """Where the matrix `tensor` is a placed one transposed: read it as Transpose(that one) → True."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    if len(tensor.dims) != 2:
        return False
    flipped = np.ascontiguousarray(numpy_helper.to_array(tensor).T).tobytes()
    span = placed.get(hashlib.sha256(flipped).digest())
    if span is None:
        return False
    source = onnx.TensorProto(name=f"{tensor.name}/transposed", data_type=tensor.data_type,
                              dims=[tensor.dims[1], tensor.dims[0]])
    _point(source, weights, *span)
    model.graph.initializer.remove(tensor)
    model.graph.initializer.append(source)
    model.graph.node.insert(0, helper.make_node("Transpose", [source.name], [tensor.name]))
    return True


def _point(tensor, location: str, offset: int, length: int) -> None:
    """Make `tensor` read its data from `location` at `offset` (ONNX external data)."""
    import onnx

    for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        tensor.ClearField(field)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
