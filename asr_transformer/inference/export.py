"""Export a model package for inference outside this toolkit's PyTorch code: ONNX (onnxruntime) or
`torch.export` programs (.pt2).

`asr export model.pt --out DIR` writes a folder:

    encoder.onnx       feats (B, T, F) float32 raw log-mel, feat_lens (B,) int64
                       → ctc_log_probs (B, T', V), enc_lens (B,), cross_kv_i (B, T', 2D) for each decoder layer i
                         (the encoder with its CMVN and CTC head; the decoder's cross-attention keys|values,
                         projected once per utterance); a model without a CTC head (an imported Whisper) has no
                         ctc_log_probs, and its export decodes with the attention decoder alone (greedy, beam); a
                         model with a no-speech head (`asr no-speech`) ends with no_speech_prob (B,)
    decoder_step.onnx  tokens (N, 1) int64, offset (1,) int64 (the position of `tokens`), enc_mask (N, T') bool,
                       self_kv_i (N, L, 2D) (L = offset; empty on the first step), cross_kv_i (N, T', 2D)
                       → log_probs (N, V) of the next token, self_kv_out_i (N, L + 1, 2D)
    decoder.onnx       tokens (N, L) int64 (<sos> first), token_lens (N,), enc_mask (N, T'), cross_kv_i
                       → log_probs (N, L, V): every position at once, for attention rescoring
    nat_decoder.onnx   a model trained for Mask-CTC (model.nat_weight > 0): decoder.onnx's inputs (<mask> where a
                       token is to be filled) and output, without the causal mask: every position sees every other
    weights.bin        the graphs' weights, each stored once (`onnx_weights.py`: the decoder graphs share theirs)
    tokenizer.bin      the tokenizer (a sentencepiece model, or a phone tokenizer's lexicon)
    lm.ngram, word_lm.ngram   the package's LMs, where it stores them (`decode/ngram_binary.py`'s memory-mapped
                       format), fused as the package fuses them
    export.json        format and version, the config (features, model shape, decoding defaults), the
                       tokenizer's metadata, the files and their precision, the LMs

Batch, time and cache axes are dynamic (decoder positions up to MAX_POSITIONS). The graphs are traced by
`torch.export` and converted by PyTorch's ONNX exporter (`torch.onnx.export(dynamo=True)`). `--format pt2` writes the
`torch.export` programs themselves instead (encoder.pt2, decoder_step.pt2, decoder.pt2 and nat_decoder.pt2:
`torch.export.load(path).module()`), with the same inputs and outputs; `--format torchscript` is its deprecated name
(TorchScript is deprecated in PyTorch). `--int8` quantizes the ONNX graphs' matrix products to int8 (onnxruntime's
dynamic quantization, a scale per output column). `exported.ExportedRecognizer` runs an ONNX folder with onnxruntime
and numpy alone.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

from asr_transformer.config import to_dict
from asr_transformer.fileio import atomic_open, write_json
from asr_transformer.model.positional import PositionalEncoding, TablePositions

FORMAT = "asr-export"
VERSION = 1
FORMATS = ("onnx", "pt2")
DEPRECATED_FORMATS = {"torchscript": "pt2"}
OPSET = 18
PER_CHANNEL = True  # int8 ONNX: a scale per output column of each matrix (docs/experiments/kathleen.md)
MAX_POSITIONS = 2048  # decoder positions the export keeps (its sine table is a constant of the graph)


class EncoderExport(nn.Module):
    """The encoder, CTC head and the decoder's cross-attention projections, as one graph (see the module
    docstring for inputs and outputs). It holds those and no more of the decoder, so that a `torch.export` program
    of it (which keeps every weight of its module) does not carry the decoder's."""

    def __init__(self, model):
        super().__init__()
        self.model = copy.copy(model)  # shares every module but the decoder, which it leaves out
        self.model._modules = {name: m for name, m in model._modules.items() if name != "decoder"}
        self.cross = nn.ModuleList(layer.src_attn for layer in model.decoder.layers)

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor):
        enc, enc_lens = self.model.encode(feats, feat_lens)
        cross = [attn.project_kv(enc, enc) for attn in self.cross]  # Decoder.cross_kv
        out = (enc_lens, *cross)
        if self.model.ctc is not None:  # a model without a CTC head (an imported Whisper): no ctc_log_probs output
            out = (self.model.ctc_log_probs(enc), *out)
        if self.model.no_speech is not None:  # model.no_speech_head: each utterance's no-speech probability, last
            out = (*out, self.model.no_speech_prob(enc, enc_lens))
        return out


class DecoderStepExport(nn.Module):
    """One autoregressive decoder step with its key/value caches (see the module docstring). Equals
    `Decoder.step` for one new position; the position comes in as a tensor so that the graph keeps it."""

    def __init__(self, model):
        super().__init__()
        self.decoder = model.decoder

    def forward(self, tokens: torch.Tensor, offset: torch.Tensor, enc_mask: torch.Tensor, *caches: torch.Tensor):
        dec, M = self.decoder, len(self.decoder.layers)
        if isinstance(dec.pos, TablePositions):  # Whisper's learned positions, added unscaled
            x = dec.embed(tokens) + dec.pos.table.index_select(0, offset).unsqueeze(0)  # (N, 1, D)
        else:
            x = dec.embed(tokens) * dec.pos.xscale + dec.pos.pe.index_select(0, offset).unsqueeze(0)
        memory_mask = enc_mask.unsqueeze(1)  # (N, 1, T')
        new_self = []
        for layer, self_kv, cross_kv in zip(dec.layers, caches[:M], caches[M:]):
            x, (self_kv, _) = layer(x, None, None, memory_mask, (self_kv, cross_kv))
            new_self.append(self_kv)
        logits = dec.output(dec.norm(x[:, -1]))
        if dec.suppressed is not None:  # the ids this decoder never emits (Decoder.step)
            logits = logits.masked_fill(dec.suppressed, float("-inf"))
        return (F.log_softmax(logits.float(), dim=-1), *new_self)


class DecoderExport(nn.Module):
    """The decoder over given token sequences, every position at once: causal (teacher forcing), for attention
    rescoring, one call instead of a step per token; or not (`causal=False`), for Mask-CTC's fills. Equals
    `Decoder.forward_kv` followed by log_softmax."""

    def __init__(self, decoder, causal: bool = True):
        super().__init__()
        self.decoder, self.causal = decoder, causal

    def forward(self, tokens: torch.Tensor, token_lens: torch.Tensor, enc_mask: torch.Tensor, *cross: torch.Tensor):
        logits = self.decoder.forward_kv(list(cross), enc_mask, tokens, token_lens, causal=self.causal)
        return F.log_softmax(logits.float(), dim=-1)


def example_inputs(model, batch: int = 2, frames: int = 160, prefix: int = 3):
    """Inputs to trace the graphs with (encoder, decoder_step, decoder[, nat_decoder]): a padded batch (so the graphs
    keep their masks)."""
    d, layers = model.cfg.d_model, len(model.decoder.layers)
    if model.cfg.positions == "whisper":  # within the encoder's position table
        frames = min(frames, model.cfg.subsampling * model.cfg.max_source_positions)
    feats = torch.randn(batch, frames, model.cfg.input_dim)
    feat_lens = torch.tensor([frames] + [frames - 17 * (i + 1) for i in range(batch - 1)])
    with torch.no_grad():
        outputs = EncoderExport(model).eval()(feats, feat_lens)
    enc_lens, *cross = outputs[:len(outputs) - (model.no_speech is not None)][-1 - layers:]
    enc_mask = torch.arange(cross[0].size(1)) < enc_lens.unsqueeze(1)
    self_kv = [torch.randn(batch, prefix, 2 * d) for _ in range(layers)]
    step = (torch.full((batch, 1), 5, dtype=torch.long), torch.tensor([prefix]), enc_mask, *self_kv, *cross)
    tokens = torch.full((batch, prefix + 2), 5, dtype=torch.long)
    token_lens = torch.tensor([prefix + 2] + [prefix] * (batch - 1))
    whole = (tokens, token_lens, enc_mask, *cross)
    return [(feats, feat_lens), step, whole, whole]


def _names(layers: int, ctc: bool = True, no_speech: bool = False):
    """The graphs' input and output names and dynamic axes (encoder, decoder_step, decoder, nat_decoder)."""
    cross = [f"cross_kv_{i}" for i in range(layers)]
    self_in = [f"self_kv_{i}" for i in range(layers)]
    self_out = [f"self_kv_out_{i}" for i in range(layers)]
    encoder = dict(input_names=["feats", "feat_lens"],
                   output_names=["ctc_log_probs", "enc_lens", *cross][1 - ctc:] + ["no_speech_prob"][:no_speech],
                   dynamic_axes={"feats": {0: "batch", 1: "frames"}, "feat_lens": {0: "batch"},
                                 **({"ctc_log_probs": {0: "batch", 1: "enc_frames"}} if ctc else {}),
                                 "enc_lens": {0: "batch"},
                                 **{n: {0: "batch", 1: "enc_frames"} for n in cross},
                                 **({"no_speech_prob": {0: "batch"}} if no_speech else {})})
    step = dict(input_names=["tokens", "offset", "enc_mask", *self_in, *cross], output_names=["log_probs", *self_out],
                dynamic_axes={"tokens": {0: "hyps"}, "enc_mask": {0: "hyps", 1: "enc_frames"},
                              "log_probs": {0: "hyps"}, **{n: {0: "hyps", 1: "prefix"} for n in self_in},
                              **{n: {0: "hyps", 1: "prefix_out"} for n in self_out},
                              **{n: {0: "hyps", 1: "enc_frames"} for n in cross}})
    whole = dict(input_names=["tokens", "token_lens", "enc_mask", *cross], output_names=["log_probs"],
                 dynamic_axes={"tokens": {0: "hyps", 1: "length"}, "token_lens": {0: "hyps"},
                               "enc_mask": {0: "hyps", 1: "enc_frames"}, "log_probs": {0: "hyps", 1: "length"},
                               **{n: {0: "hyps", 1: "enc_frames"} for n in cross}})
    return [encoder, step, whole, whole]


def _dynamic_shapes(names: dict, positional: int):
    """torch.export's dynamic_shapes for a graph from its ONNX names (`_names`): each named axis of an input
    dynamic; the inputs after the first `positional` are the forward's *caches (one tuple)."""
    specs = [{axis: Dim.DYNAMIC for axis in names["dynamic_axes"].get(name, {})} or None
             for name in names["input_names"]]
    return tuple(specs) if len(specs) == positional else (*specs[:positional], tuple(specs[positional:]))


def deprecated_format_notice(fmt: str) -> str:
    """What a user is told who asks for a deprecated `--format` (a key of DEPRECATED_FORMATS)."""
    return (f"--format {fmt} is deprecated (PyTorch deprecates TorchScript): writing {DEPRECATED_FORMATS[fmt]}, "
            "torch.export programs, instead")


def export_package(package: str | os.PathLike, out: str | os.PathLike, fmt: str = "onnx", int8: bool = False,
                   mode: str | None = None) -> dict:
    """Export `package` into the folder `out`; → {file name: size in bytes}. The export decodes with `mode` by
    default (else the package's mode where an export can run it, else joint, or beam without a CTC head). Raises ValueError for what
    cannot be exported (a model.speaker_cmn model: its speaker means are computed outside the graph)."""
    from asr_transformer.inference.exported import export_modes
    from asr_transformer.decode.fusion import read_lm
    from asr_transformer.package import load_package, read_package

    if fmt in DEPRECATED_FORMATS:
        warnings.warn(deprecated_format_notice(fmt), FutureWarning, stacklevel=2)
        fmt = DEPRECATED_FORMATS[fmt]
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt}: choose from {', '.join(FORMATS)}")
    if int8 and fmt != "onnx":
        raise ValueError("--int8 quantizes ONNX graphs (for a .pt2 program on a CPU, load the package with --precision "
                         "int8)")
    state = read_package(package)
    model, tokenizer, cfg = load_package(package, "cpu", "fp32", state)
    if cfg.model.speaker_cmn:
        raise ValueError(f"{package}: a model.speaker_cmn model normalizes by speaker means computed outside the "
                         "model; export supports global and per-utterance CMVN")
    usable = export_modes(cfg.model)
    if mode is not None and mode not in usable:
        raise ValueError(f"--mode {mode}: this export decodes with {', '.join(usable)}")
    fallback = "joint" if cfg.model.ctc else "beam"
    cfg.decode.mode = mode or (cfg.decode.mode if cfg.decode.mode in usable else fallback)
    if isinstance(model.decoder.pos, PositionalEncoding):
        model.decoder.pos.pe = model.decoder.pos.pe[:MAX_POSITIONS].clone()  # a constant of the decoder graphs
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    graphs = {"encoder": EncoderExport(model).eval(), "decoder_step": DecoderStepExport(model).eval(),
              "decoder": DecoderExport(model.decoder).eval()}
    if cfg.model.nat_weight > 0:  # the same decoder without the causal mask, for Mask-CTC
        graphs["nat_decoder"] = DecoderExport(model.decoder, causal=False).eval()
    files = {name: f"{name}.{fmt}" for name in graphs}
    with _quiet_exporter():
        for (name, module), inputs, names, positional in zip(graphs.items(), example_inputs(model),
                                                             _names(len(model.decoder.layers), model.ctc is not None,
                                                                    model.no_speech is not None),
                                                             (2, 3, 3, 3)):
            target = out / files[name]
            tmp = target.with_name(f".{target.name}.tmp")
            with torch.no_grad():
                program = torch.export.export(module, inputs, dynamic_shapes=_dynamic_shapes(names, positional))
            if fmt == "onnx":
                torch.onnx.export(program, (), str(tmp), input_names=names["input_names"],
                                  output_names=names["output_names"], opset_version=OPSET, external_data=False,
                                  verbose=False)
                if int8:
                    _quantize_onnx(tmp)
            else:
                torch.export.save(program, str(tmp))
            os.replace(tmp, target)
    if fmt == "onnx":  # the decoder graphs' weights (a tied embedding above all) stored once, beside them
        from asr_transformer.inference.onnx_weights import WEIGHTS, share_weights

        share_weights(out, list(files.values()))
        files["weights"] = WEIGHTS
    with atomic_open(out / "tokenizer.bin", "wb") as f:
        f.write(tokenizer.model_bytes)
    lms = {}
    for kind, stored in sorted((state.get("lms") or {}).items()):  # binary LMs: no conversion when loaded
        read_lm(stored["arpa_gz"].numpy().tobytes(), tokenizer, kind == "word_lm",
                f"{package}:{stored['name']}").save(out / f"{kind}.ngram")
        lms[kind] = {"file": f"{kind}.ngram", "name": stored["name"]}
    write_json(out / "export.json", {
        "format": FORMAT, "version": VERSION, "runtime": fmt, "precision": "int8" if int8 else "fp32",
        "files": files, "tokenizer": "tokenizer.bin", "tokenizer_meta": tokenizer.meta(), "config": to_dict(cfg),
        "lms": lms, "package": str(package), "info": state.get("info") or {}})
    return {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}


@contextmanager
def _quiet_exporter():
    """The exporters' chatter (progress lines, optional operator libraries they skip, PyTorch's warnings about its
    own internals) kept off a user's terminal."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export", "onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"(torch|onnxscript|copyreg)(\.|$)")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _quantize_onnx(path: Path) -> None:
    """Dynamic int8 quantization of an ONNX graph's weights (MatMul/Gemm), in place."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = path.with_name(path.name + ".fp32")
    os.replace(path, fp32)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to pre-process the graph, and the non-float tensors it skips
    try:
        quantize_dynamic(str(fp32), str(path), weight_type=QuantType.QInt8, per_channel=PER_CHANNEL)
    finally:
        root.setLevel(level)
        fp32.unlink()
