"""Streaming: the chunked encoder fed chunk by chunk equals the whole utterance under the same chunk mask; dynamic
chunk training; streaming CTC search equals the offline search; `asr transcribe --stream`."""

import dataclasses

import pytest
import torch

from asr_transformer.config import PRESETS, ModelConfig
from asr_transformer.model.asr import ASRModel
from asr_transformer.model.mask import chunk_mask

torch.set_num_threads(1)
VOCAB, FEAT = 16, 20


def streaming_model(seed=0, **changes) -> ASRModel:
    cfg = ModelConfig(input_dim=FEAT, vocab_size=VOCAB, **PRESETS["tiny"])
    cfg = dataclasses.replace(cfg, streaming=True, **changes)
    torch.manual_seed(seed)
    m = ASRModel(cfg).eval()
    m.set_cmvn(torch.randn(FEAT) * 0.1, torch.rand(FEAT) + 0.5)
    return m


def incremental(m: ASRModel, feats: torch.Tensor, chunk: int, left_chunks: int) -> torch.Tensor:
    """feats (1, T, F) fed `chunk` encoder frames at a time, as a stream is → (1, T', D)."""
    state = m.encoder.start_stream(chunk, left_chunks)
    need, step = m.encoder.chunk_input_frames(chunk), chunk * m.encoder.subsampling.factor
    outs, start = [], 0
    while start < feats.size(1):
        outs.append(m.encode_chunk(feats[:, start:start + need], state))
        start += step
    return torch.cat(outs, 1)


def test_chunk_mask():
    assert chunk_mask(5, 2).int().tolist() == [
        [1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert chunk_mask(6, 2, left_chunks=1).int().tolist()[4] == [0, 0, 1, 1, 1, 1]
    assert chunk_mask(4, 1, left_chunks=0).int().tolist() == torch.eye(4, dtype=torch.int).tolist()


@pytest.mark.parametrize("conformer", [False, True])
@pytest.mark.parametrize("chunk,left_chunks", [(1, -1), (3, -1), (4, 2), (5, 0), (16, 1)])
def test_incremental_encoder_equals_chunk_masked(conformer, chunk, left_chunks):
    m = streaming_model(block="conformer" if conformer else "transformer", conv_kernel=5, subsampling=4)
    feats = torch.randn(1, 97, FEAT, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full, lens = m.encode(feats, torch.tensor([97]), chunk=chunk, left_chunks=left_chunks)
        inc = incremental(m, feats, chunk, left_chunks)
    assert inc.shape == full.shape and int(lens) == full.size(1)
    torch.testing.assert_close(inc, full, atol=1e-5, rtol=1e-5)
    if chunk < full.size(1):  # the chunk mask matters: full context differs
        whole, _ = m.encode(feats, torch.tensor([97]))
        assert not torch.allclose(whole, full, atol=1e-4)


def test_chunked_encoder_is_padding_invariant_and_causal():
    m = streaming_model(block="conformer", conv_kernel=5, subsampling=8)
    g = torch.Generator().manual_seed(4)
    feats = torch.randn(2, 120, FEAT, generator=g)
    lens = torch.tensor([120, 83])
    with torch.no_grad():
        both, enc_lens = m.encode(feats, lens, chunk=2)
        alone, _ = m.encode(feats[1:, :83], lens[1:], chunk=2)
        torch.testing.assert_close(both[1:, :int(enc_lens[1])], alone, atol=1e-5, rtol=1e-5)
        # changing input frames from 64 on leaves every encoder frame of the chunks before untouched
        later = feats.clone()
        later[:, 64:] = torch.randn(2, 56, FEAT, generator=g)
        changed, _ = m.encode(later, lens, chunk=2)
    # frame j sees input < 8·j + 15; the chunk of frames 4–5 sees input < 8·5 + 15 = 55 ≤ 64
    torch.testing.assert_close(changed[:, :6], both[:, :6])
    assert not torch.allclose(changed[0, 6:8], both[0, 6:8])


def test_dynamic_chunk_training_draws_chunks():
    m = streaming_model()
    torch.manual_seed(0)
    draws = [m.encoder.draw_chunk() for _ in range(400)]
    full = sum(d == 0 for d in draws)
    assert 150 < full < 250 and set(draws) - {0} <= set(range(1, 26)) and len(set(draws)) > 20


# ------------------------------------------------------------------------------------- streaming decoding

def offline(rec, audio, mode):
    """The best hypothesis of decoding `audio` whole with the recognizer's options (its chunk_ms)."""
    feats = rec.features(audio).unsqueeze(0)
    return rec.recognize(feats, torch.tensor([feats.size(1)]), mode)[0][0]


NO_ENDPOINTS = dict(endpoint_silence=0, max_silence=0, max_segment=0)


@pytest.mark.parametrize("chunk_ms,hotwords", [(160, []), (320, []), (640, []), (320, ["one two\t4", "five", "x"])])
def test_streaming_equals_offline_decoding_under_the_same_chunks(streaming_package, chunk_ms, hotwords):
    """Without endpoints inside: the last partial is offline ctc_beam's best, the final offline rescore's best,
    both computed on the whole audio with the same chunk mask (and the same hotwords); fed in odd blocks or at once
    makes no difference."""
    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.inference.streaming import Endpointing, StreamingRecognizer

    root, audio = streaming_package
    rec = Recognizer(root / "model.pt", device="cpu", threads=1, mode="rescore", beam=5, chunk_ms=chunk_ms,
                     hotwords=hotwords)
    events = []
    stream = StreamingRecognizer(rec, endpointing=Endpointing(**NO_ENDPOINTS))
    rng = torch.Generator().manual_seed(1)
    pos = 0
    while pos < audio.size:
        n = int(torch.randint(1, 3000, (), generator=rng))
        events += stream.feed(audio[pos:pos + n])
        pos += n
    events += stream.finish()
    partials, finals = [e for e in events if e.kind == "partial"], [e for e in events if e.kind == "final"]
    assert len(finals) == 1 and partials
    assert partials[-1].tokens == offline(rec, audio, "ctc_beam").tokens
    best = offline(rec, audio, "rescore")
    assert finals[0].tokens == best.tokens and finals[0].score == pytest.approx(best.score, abs=1e-3)
    assert finals[0].text == rec.text(best.tokens, "rescore")
    assert 0 <= finals[0].start < finals[0].end <= audio.size / 16000 + 0.04
    once = StreamingRecognizer(rec, endpointing=Endpointing(**NO_ENDPOINTS))
    again = once.feed(audio) + once.finish()
    assert [(e.kind, e.tokens) for e in again][-1] == ("final", finals[0].tokens)


@pytest.mark.parametrize("final", ["joint", "beam", "ctc_beam", "greedy"])
def test_finals_in_another_mode_are_that_mode_offline_under_the_same_chunks(streaming_package, final):
    """final="joint" (…): each final is what offline decoding in that mode gives on the whole audio with the same
    chunk mask; partials stay CTC's; a mode a stream cannot end with is refused."""
    from asr_transformer.decode.search import DecodeError
    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.inference.streaming import Endpointing, StreamingRecognizer

    root, audio = streaming_package
    rec = Recognizer(root / "model.pt", device="cpu", threads=1, mode=final, beam=5, chunk_ms=320)
    stream = StreamingRecognizer(rec, endpointing=Endpointing(**NO_ENDPOINTS), final=final)
    events = []
    for pos in range(0, audio.size, 1234):
        events += stream.feed(audio[pos:pos + 1234])
    events += stream.finish()
    finals = [e for e in events if e.kind == "final"]
    best = offline(rec, audio, final)
    assert len(finals) == 1 and finals[0].tokens == best.tokens
    assert finals[0].text == " ".join(rec.text(best.tokens, final).split())
    assert [e for e in events if e.kind == "partial"][-1].tokens == offline(rec, audio, "ctc_beam").tokens
    with pytest.raises(DecodeError, match="'best' is not a decoding mode"):
        StreamingRecognizer(rec, final="best")


def test_endpoints_split_the_stream(streaming_package):
    """max_segment cuts a stream into consecutive utterances; a stream whose CTC says only blank gives no final."""
    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.inference.streaming import Endpointing, StreamingRecognizer

    root, audio = streaming_package
    rec = Recognizer(root / "model.pt", device="cpu", threads=1, mode="rescore", beam=3)
    stream = StreamingRecognizer(rec, chunk_ms=320, endpointing=Endpointing(0, 0, max_segment=1.0))
    finals = [e for e in stream.feed(audio) + stream.finish() if e.kind == "final"]
    assert len(finals) >= 3
    assert all(a.end <= b.start + 1e-6 for a, b in zip(finals, finals[1:]))
    with torch.no_grad():
        rec.model.ctc.proj.bias[0] += 100.0  # blank everywhere: silence only
    try:
        stream = StreamingRecognizer(rec, chunk_ms=320, endpointing=Endpointing(max_silence=1.0))
        events = stream.feed(audio) + stream.finish()
        assert [e for e in events if e.kind == "final"] == [] and all(e.text == "" for e in events)
    finally:
        with torch.no_grad():
            rec.model.ctc.proj.bias[0] -= 100.0


def test_a_model_that_looks_ahead_cannot_stream(tiny_package):
    from asr_transformer.decode.search import DecodeError
    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.inference.streaming import StreamingRecognizer

    import dataclasses as dc

    from asr_transformer.model.asr import ASRModel
    rec = Recognizer(tiny_package / "model.pt", device="cpu", threads=1)
    StreamingRecognizer(rec)  # Transformer blocks: no look-ahead
    rec.model = ASRModel(dc.replace(rec.config.model, block="conformer", conv_kernel=5)).eval()
    assert rec.model.encoder.look_ahead == 2 * rec.config.model.encoder_layers
    with pytest.raises(DecodeError, match="cannot stream"):
        StreamingRecognizer(rec)


@pytest.mark.parametrize("mode", ["rescore", "joint"])
def test_cli_streams_a_wav_from_stdin(streaming_package, tmp_path, mode):
    """`asr transcribe --stream -` with a WAV on stdin: tab-separated partial lines, then a final line equal to the
    offline decoding in --mode (rescore: the CTC n-best rescored; joint: the joint search), and the usual files with
    --out."""
    import json
    import subprocess
    import sys

    from asr_transformer.inference.recognizer import Recognizer

    root, audio = streaming_package
    cmd = [sys.executable, "-m", "asr_transformer", "transcribe", "--stream", "-", "-m", str(root / "model.pt"),
           "--mode", mode, "--beam", "5", "--chunk-ms", "320", "--device", "cpu", "--threads", "1",
           "-o", str(tmp_path), "-f", "json"]
    out = subprocess.run(cmd, input=(root / "a.wav").read_bytes(), capture_output=True, check=True).stdout.decode()
    lines = [line.split("\t") for line in out.splitlines()]
    assert {line[0] for line in lines} == {"partial", "final"} and lines[0][0] == "partial"
    finals = [line for line in lines if line[0] == "final"]
    rec = Recognizer(root / "model.pt", device="cpu", threads=1, mode=mode, beam=5, chunk_ms=320)
    whole = rec.text(offline(rec, audio, mode).tokens, mode)
    if len(finals) == 1:  # no endpoint inside: exactly the offline decoding
        assert finals[0][3] == whole
    for line in finals:
        assert 0 <= float(line[1]) < float(line[2]) <= 3.3
    written = json.loads((tmp_path / "stdin.json").read_text())
    assert [s["text"] for s in written["segments"]] == [line[3] for line in finals if line[3]]


def test_readme_streaming_lines(streaming_package):
    """The Python lines README.md shows for streaming, run as written (the package path and samples supplied)."""
    import re
    from pathlib import Path

    root, audio = streaming_package
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"```python\n(from asr_transformer import Recognizer\nfrom asr_transformer.inference.streaming .*?)```",
                      text, re.S).group(1)
    code = block.replace('"exp/phone_streaming/model.pt"', repr(str(root / "model.pt")))
    printed = []
    exec(compile(code, "README.md", "exec"), {"print": lambda *a: printed.append(a), "samples": audio})
    assert printed and printed[-1][0] == "final" and all(isinstance(a[3], str) for a in printed)


def test_a_stream_checks_its_samples_as_a_file_is_checked(streaming_package):
    import numpy as np

    from asr_transformer.data.audio import AudioError
    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.inference.streaming import StreamingRecognizer

    root, audio = streaming_package
    stream = StreamingRecognizer(Recognizer(root / "model.pt", device="cpu", threads=1))
    with pytest.raises(AudioError, match="stream: audio contains NaN"):
        stream.feed(np.full(1600, np.nan, np.float32))
    stereo = np.stack([audio, audio], axis=1)  # averaged, as a stereo file is
    mono = StreamingRecognizer(Recognizer(root / "model.pt", device="cpu", threads=1))
    assert [e.tokens for e in stream.feed(stereo) + stream.finish()] == [e.tokens for e in mono.feed(audio) + mono.finish()]


def test_a_truncated_wav_stream_is_refused_as_a_truncated_file_is(streaming_package):
    """`--stream -` with a WAV cut in half on stdin: the finals heard so far are printed, then one error line, and
    the exit status is 1 (the whole file given as a path is refused too)."""
    import subprocess
    import sys

    root, _ = streaming_package
    data = (root / "a.wav").read_bytes()
    cmd = [sys.executable, "-m", "asr_transformer", "transcribe", "--stream", "-", "-m", str(root / "model.pt"),
           "--device", "cpu", "--threads", "1"]
    whole = subprocess.run(cmd, input=data, capture_output=True)
    assert whole.returncode == 0, whole.stderr.decode()
    cut = subprocess.run(cmd, input=data[: len(data) // 2], capture_output=True)
    errors = cut.stderr.decode().strip().splitlines()
    assert cut.returncode == 1 and "<stdin>: truncated: the stream ended at 1.50 s, its header says 3.00 s" in errors[0], errors
    assert any(line.startswith("final") for line in cut.stdout.decode().splitlines())


def test_streaming_a_model_trained_on_whole_utterances_says_so(tiny_package):
    """A Transformer without look-ahead can run in chunks, but it was not trained so: one warning line."""
    from typer.testing import CliRunner

    from asr_transformer.cli import app

    result = CliRunner().invoke(app, ["transcribe", "--stream", str(tiny_package / "u0.wav"), "-m",
                                      str(tiny_package / "model.pt"), "--threads", "1"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: this model was trained on whole utterances (model.streaming: false): in chunks it "
                        "hears less context than it learned with, so it is less accurate than offline decoding"]
