"""`asr export`: ONNX graphs and torch.export programs equal the PyTorch model (several lengths and batch sizes), and the
onnxruntime recognizer (no PyTorch) writes the package's transcripts."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
import sys

import numpy as np
import pytest
import soundfile as sf
import torch

pytest.importorskip("onnxruntime", reason="export tests need the onnx extra: pip install -e '.[onnx]'")

from asr_transformer.config import PRESETS, Config, ModelConfig  # noqa: E402
from asr_transformer.data.audio import load_utterance  # noqa: E402
from asr_transformer.data.manifest import read_manifest  # noqa: E402
from asr_transformer.data.tokenizer import load_tokenizer  # noqa: E402
from asr_transformer.inference.export import DecoderExport, DecoderStepExport, EncoderExport, export_package  # noqa: E402
from asr_transformer.inference.exported import EXPORTED_MODES, ExportedRecognizer  # noqa: E402
from asr_transformer.inference.exported_features import fbank  # noqa: E402
from asr_transformer.model.asr import ASRModel  # noqa: E402
from asr_transformer.package import save_package  # noqa: E402
from asr_transformer.inference.recognizer import Recognizer  # noqa: E402

SHAPES = [(1, 57), (2, 160), (3, 301), (5, 98)]  # (batch, frames): several lengths and batch sizes


@pytest.fixture(scope="module")
def exported(tone_corpus, tmp_path_factory):
    """A random tiny Conformer package (InterCTC, per-utterance CMN, trained for Mask-CTC) on the tone corpus' tokenizer, and its ONNX,
    int8 ONNX and torch.export (.pt2) exports."""
    root = tmp_path_factory.mktemp("export")
    tok = load_tokenizer(tone_corpus / "tokenizer")
    cfg = Config()
    cfg.model = ModelConfig(input_dim=80, vocab_size=tok.vocab_size, **PRESETS["tiny"], block="conformer", conv_kernel=7,
                            interctc_weight=0.3, utterance_cmn=True, nat_weight=0.3)
    cfg.decode.max_len_ratio, cfg.decode.beam, cfg.decode.vad = 0.3, 4, "energy"  # tones, not speech: Silero's detector hears none
    torch.manual_seed(0)
    model = ASRModel(cfg.model)
    save_package(root / "model.pt", cfg, tok, model.state_dict())
    export_package(root / "model.pt", root / "onnx")
    export_package(root / "model.pt", root / "int8", int8=True)
    with pytest.warns(FutureWarning, match="torchscript is deprecated"):  # its old name: pt2 programs written
        export_package(root / "model.pt", root / "pt2", fmt="torchscript")
    assert sorted(p.name for p in (root / "pt2").glob("*.pt2")) == ["decoder.pt2", "decoder_step.pt2", "encoder.pt2",
                                                                           "nat_decoder.pt2"]
    return root, model.eval()


def batch(B: int, T: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor([T] + [max(9, T - 23 * i) for i in range(1, B)])
    return torch.randn(B, T, 80, generator=g) * 3 + 5, lens


def step_inputs(model, feats, lens, prefix: int):
    """Decoder step inputs after `prefix` tokens, from the reference model's own step (its cache)."""
    with torch.no_grad():
        enc, enc_lens = model.encode(feats, lens)
        enc_mask = torch.arange(enc.size(1)) < enc_lens.unsqueeze(1)
        tokens = torch.randint(5, model.cfg.vocab_size, (feats.size(0), prefix + 1), generator=torch.Generator().manual_seed(1))
        tokens[:, 0] = 2
        cache = None
        if prefix:
            _, cache = model.decoder_step(enc, enc_mask, tokens[:, :prefix], None)
        expected, _ = model.decoder_step(enc, enc_mask, tokens, cache)
        cross = [layer.src_attn.project_kv(enc, enc) for layer in model.decoder.layers]
    M = len(model.decoder.layers)
    self_kv = cache[:M] if cache else [torch.zeros(feats.size(0), 0, 2 * model.cfg.d_model)] * M
    return (tokens[:, -1:], torch.tensor([prefix]), enc_mask, *self_kv, *cross), expected, enc_lens


def test_numpy_fbank_equals_the_torch_fbank():
    from asr_transformer.data.features import fbank as torch_fbank

    wave = np.random.default_rng(0).uniform(-0.5, 0.5, 16000 + 123).astype(np.float32)
    expected = torch_fbank(torch.from_numpy(wave)).numpy()
    assert fbank(wave).shape == expected.shape == (99, 80)  # 1 + (16123 - 400) // 160 frames
    np.testing.assert_allclose(fbank(wave), expected, atol=2e-4, rtol=1e-5)
    assert fbank(wave[:300]).shape == (0, 80)


@pytest.mark.parametrize("B,T", SHAPES)
def test_onnx_encoder_and_decoder_step_equal_pytorch(exported, B, T):
    import onnxruntime as ort

    root, model = exported
    encoder = ort.InferenceSession(str(root / "onnx/encoder.onnx"), providers=["CPUExecutionProvider"])
    step = ort.InferenceSession(str(root / "onnx/decoder_step.onnx"), providers=["CPUExecutionProvider"])
    feats, lens = batch(B, T)
    with torch.no_grad():
        expected = EncoderExport(model)(feats, lens)
    got = encoder.run(None, {"feats": feats.numpy(), "feat_lens": lens.numpy()})
    np.testing.assert_array_equal(got[1], expected[1].numpy())
    valid = (np.arange(got[0].shape[1])[None] < got[1][:, None])[..., None]
    for g, e in zip([got[0], *got[2:]], [expected[0], *expected[2:]]):
        assert g.shape == tuple(e.shape)
        np.testing.assert_allclose(np.where(valid, g, 0), np.where(valid, e.numpy(), 0), atol=1e-4)
    names = [i.name for i in step.get_inputs()]
    for prefix in (0, 1, 4):  # the first step (empty cache) and later ones
        inputs, expected_lp, _ = step_inputs(model, feats, lens, prefix)
        log_probs, *new_cache = step.run(None, {n: t.numpy() for n, t in zip(names, inputs)})
        np.testing.assert_allclose(log_probs, expected_lp.numpy(), atol=1e-4)
        assert all(c.shape[1] == prefix + 1 for c in new_cache)
    # the teacher-forced decoder: every position at once, sequences of several lengths (padded)
    decoder = ort.InferenceSession(str(root / "onnx/decoder.onnx"), providers=["CPUExecutionProvider"])
    _, _, enc_mask, *rest = step_inputs(model, feats, lens, 0)[0]
    cross = rest[len(rest) // 2:]
    tokens = torch.randint(5, model.cfg.vocab_size, (B, 7), generator=torch.Generator().manual_seed(2))
    tokens[:, 0] = 2
    token_lens = torch.tensor([7] + [max(1, 7 - 2 * i) for i in range(1, B)])
    with torch.no_grad():
        expected_lp = DecoderExport(model.decoder)(tokens, token_lens, enc_mask, *cross)
    feeds = {"tokens": tokens.numpy(), "token_lens": token_lens.numpy(), "enc_mask": enc_mask.numpy(),
             **{f"cross_kv_{i}": c.numpy() for i, c in enumerate(cross)}}
    got = decoder.run(None, feeds)[0]
    valid = (np.arange(7)[None] < token_lens.numpy()[:, None])[..., None]
    np.testing.assert_allclose(np.where(valid, got, 0), np.where(valid, expected_lp.numpy(), 0), atol=1e-4)


@pytest.mark.parametrize("B,T", SHAPES)
def test_the_nat_decoder_graph_equals_pytorch_and_sees_every_position(exported, B, T):
    """nat_decoder.onnx and .pt2 = the decoder without the causal mask, over the encoder graph's cross_kv_i."""
    import onnxruntime as ort

    root, model = exported
    nat = ort.InferenceSession(str(root / "onnx/nat_decoder.onnx"), providers=["CPUExecutionProvider"])
    feats, lens = batch(B, T, seed=5)
    with torch.no_grad():
        enc, enc_lens = model.encode(feats, lens)
        cross = model.decoder.cross_kv(enc)
    enc_mask = torch.arange(enc.size(1)) < enc_lens.unsqueeze(1)
    tokens = torch.randint(5, model.cfg.vocab_size, (B, 6), generator=torch.Generator().manual_seed(4))
    tokens[:, 0], tokens[:, 1::2] = 2, 4  # <sos>, and <mask>s
    token_lens = torch.tensor([6] + [max(1, 6 - i) for i in range(1, B)])
    with torch.no_grad():
        expected = torch.log_softmax(model.decoder(enc, enc_mask, tokens, token_lens, causal=False), -1)
    feeds = {"tokens": tokens.numpy(), "token_lens": token_lens.numpy(), "enc_mask": enc_mask.numpy(),
             **{f"cross_kv_{i}": c.numpy() for i, c in enumerate(cross)}}
    got = nat.run(None, feeds)[0]
    valid = (np.arange(6)[None] < token_lens.numpy()[:, None])[..., None]
    np.testing.assert_allclose(np.where(valid, got, 0), np.where(valid, expected.numpy(), 0), atol=1e-4)
    program = torch.export.load(str(root / "pt2/nat_decoder.pt2")).module()
    with torch.no_grad():
        torch.testing.assert_close(program(tokens, token_lens, enc_mask, *cross) * torch.from_numpy(valid),
                                   expected * torch.from_numpy(valid), atol=1e-4, rtol=0)
    feeds["tokens"] = feeds["tokens"].copy()
    feeds["tokens"][0, 4] = 5 if feeds["tokens"][0, 4] != 5 else 6  # another later token changes position 0
    assert not np.allclose(nat.run(None, feeds)[0][0, 0], got[0, 0])


@pytest.mark.parametrize("B,T", SHAPES[:2])
def test_torch_export_programs_equal_pytorch(exported, B, T):
    root, model = exported
    encoder, step = (torch.export.load(str(root / f"pt2/{name}.pt2")).module() for name in ("encoder", "decoder_step"))
    feats, lens = batch(B, T, seed=3)
    with torch.no_grad():
        got, expected = encoder(feats, lens), EncoderExport(model)(feats, lens)
        valid = (torch.arange(got[0].size(1)) < got[1].unsqueeze(1)).unsqueeze(-1)
        torch.testing.assert_close(got[0] * valid, expected[0] * valid, atol=1e-4, rtol=0)
        inputs, expected_lp, _ = step_inputs(model, feats, lens, 2)
        torch.testing.assert_close(step(*inputs)[0], expected_lp, atol=1e-4, rtol=0)
        torch.testing.assert_close(DecoderStepExport(model)(*inputs)[0], expected_lp, atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", EXPORTED_MODES)
def test_exported_recognizer_writes_the_package_transcripts(exported, tone_corpus, mode):
    root, _ = exported
    waves = [load_utterance(u) for u in read_manifest(tone_corpus / "test.jsonl")]
    bonus = 3.0  # a length bonus, so that the random model's beams do not end at once
    package = Recognizer(root / "model.pt", device="cpu", threads=1, mode=mode, batch_size=3, length_penalty=bonus)
    onnx = ExportedRecognizer(root / "onnx", threads=1, mode=mode, batch_size=3, length_penalty=bonus)
    assert onnx.recognize_arrays(waves) == package.recognize_arrays(waves)
    got = [h for i in range(0, len(waves), 3) for h in onnx.decode_waves(waves[i:i + 3])]
    want = [h for i in range(0, len(waves), 3) for h in package.decode_waves(waves[i:i + 3])]
    assert [h.tokens for h in got] == [h.tokens for h in want] and any(h.tokens for h in want)
    np.testing.assert_allclose([h.score for h in got], [h.score for h in want], atol=1e-3)


def test_an_export_silences_the_windows_the_package_silences(exported, tone_corpus):
    """ctc_confidence_threshold between the windows' CTC confidences: the export empties the windows the package
    empties, and gives the others as it does."""
    root, _ = exported
    waves = [load_utterance(u) for u in read_manifest(tone_corpus / "test.jsonl")]
    checks = dict(mode="joint", length_penalty=3.0, logprob_threshold=0.0)
    seen = Recognizer(root / "model.pt", device="cpu", threads=1, ctc_confidence_threshold=1e-9, **checks)
    means = sorted(h.parts["ctc_confidence"] for h in seen.decode_waves(waves))
    cut = float(np.mean(means[len(means) // 2 - 1:len(means) // 2 + 1]))  # half of them below
    package = Recognizer(root / "model.pt", device="cpu", threads=1, ctc_confidence_threshold=cut, **checks)
    onnx = ExportedRecognizer(root / "onnx", threads=1, ctc_confidence_threshold=cut, **checks)
    want, got = package.decode_waves(waves), onnx.decode_waves(waves)
    assert [h.tokens for h in got] == [h.tokens for h in want]
    assert any(not h.tokens for h in want) and any(h.tokens for h in want)
    np.testing.assert_allclose([h.parts["ctc_confidence"] for h in got], [h.parts["ctc_confidence"] for h in want],
                               atol=1e-4)


@pytest.fixture(scope="module")
def exported_with_lms(exported, tone_corpus):
    """The `exported` package with a token 3-gram, a word bigram and hotwords among its defaults, and its export."""
    from asr_transformer.data.manifest import read_manifest as read
    from asr_transformer.lm_build import build_lm
    from asr_transformer.package import set_decoding

    root, _ = exported
    texts = root / "train.txt"
    texts.write_text("".join(u.text + "\n" for u in read(tone_corpus / "train.jsonl")))
    build_lm([texts], tone_corpus / "tokenizer", root / "tokens.arpa", order=3)
    build_lm([texts], tone_corpus / "tokenizer", root / "words.arpa", order=2, words=True)
    set_decoding(root / "model.pt", root / "lms.pt", options={"lm_weight": 0.4, "word_lm_weight": 0.3,
                                                                "hotwords": ["ab", "dc\t2.5"], "beam": 4},
                 lms={"lm": root / "tokens.arpa", "word_lm": root / "words.arpa"})
    export_package(root / "lms.pt", root / "lms_onnx")
    return root / "lms.pt", root / "lms_onnx"


@pytest.mark.parametrize("mode", ["beam", "joint", "rescore", "ctc_beam"])
def test_an_export_fuses_the_packages_lms_and_hotwords_as_the_package_does(exported_with_lms, tone_corpus, mode):
    package_path, export_path = exported_with_lms
    meta = json.loads((export_path / "export.json").read_text())
    assert meta["lms"] == {"lm": {"file": "lm.ngram", "name": "tokens.arpa"},
                           "word_lm": {"file": "word_lm.ngram", "name": "words.arpa"}}
    waves = [load_utterance(u) for u in read_manifest(tone_corpus / "test.jsonl")]
    kw = dict(threads=1, mode=mode, batch_size=3, length_penalty=3.0)
    package, onnx = Recognizer(package_path, device="cpu", **kw), ExportedRecognizer(export_path, **kw)
    assert onnx.lms == {"lm": "tokens.arpa", "word_lm": "words.arpa"}
    got = [h for i in range(0, len(waves), 3) for h in onnx.decode_waves(waves[i:i + 3])]
    want = [h for i in range(0, len(waves), 3) for h in package.decode_waves(waves[i:i + 3])]
    assert [h.tokens for h in got] == [h.tokens for h in want] and any(h.tokens for h in want)
    fused = ("lm", "context") if mode != "ctc_beam" else ("context",)  # hotwords alone bias ctc_beam
    assert all(set(fused) <= set(h.parts) for h in want + got)
    np.testing.assert_allclose([h.score for h in got], [h.score for h in want], atol=1e-3)
    for key in fused:
        np.testing.assert_allclose([h.parts[key] for h in got], [h.parts[key] for h in want], atol=1e-3)
    # without the LMs and hotwords the search is another (so the ones above took part)
    plain = ExportedRecognizer(export_path, lm=False, word_lm=False, hotwords=[], **kw)
    assert [h.score for h in plain.decode_waves(waves[:3])] != pytest.approx([h.score for h in got[:3]], abs=1e-3)


def test_int8_export_is_smaller_and_close(exported, tone_corpus):
    root, _ = exported
    assert json.loads((root / "int8/export.json").read_text())["precision"] == "int8"
    size = {kind: sum(f.stat().st_size for f in (root / kind).glob("*.onnx")) + (root / kind / "weights.bin").stat().st_size
            for kind in ("onnx", "int8")}
    assert size["int8"] < 0.8 * size["onnx"]  # the matrix products' weights int8; convolutions, embeddings stay fp32
    waves = [load_utterance(u) for u in read_manifest(tone_corpus / "test.jsonl")]
    fp32, int8 = ExportedRecognizer(root / "onnx", threads=1), ExportedRecognizer(root / "int8", threads=1)
    feats = [fp32.features(w) for w in waves[:3]]
    (a, lens, _, _), (b, _, _, _) = fp32.encode(feats), int8.encode(feats)
    valid = (np.arange(a.shape[1])[None] < lens[:, None])[..., None]
    diff = np.abs(np.exp(a) - np.exp(b)) * valid
    assert 0 < diff.max() < 0.1


def test_the_graphs_share_one_copy_of_each_weight(exported):
    """Every large tensor of the three graphs lives in weights.bin, each distinct one once: the decoder's
    embedding, used by both decoder graphs, is written once and read by both."""
    import onnx

    root, model = exported
    weights = (root / "onnx" / "weights.bin").read_bytes()
    spans = {}  # (offset, length) → the graphs that read it
    for graph in ("encoder", "decoder_step", "decoder"):
        for tensor in onnx.load(str(root / "onnx" / f"{graph}.onnx"), load_external_data=False).graph.initializer:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                entry = {e.key: e.value for e in tensor.external_data}
                assert entry["location"] == "weights.bin"
                spans.setdefault((int(entry["offset"]), int(entry["length"])), set()).add(graph)
            else:
                assert len(tensor.raw_data) < 1024, (graph, tensor.name)
    contents = [weights[o:o + n] for o, n in spans]
    assert len(set(contents)) == len(contents)  # no tensor written twice
    embedding = model.decoder.embed.weight.detach().numpy().tobytes()
    assert weights.count(embedding) == 1
    step = {span for span, readers in spans.items() if "decoder_step" in readers}
    assert step and all("decoder" in spans[span] for span in step)  # the two decoder graphs share every weight
    assert any(weights[o:o + n] == embedding and readers == {"decoder_step", "decoder"}
               for (o, n), readers in spans.items())


def test_a_tied_embedding_folded_into_the_output_is_read_back_transposed(tone_corpus, tmp_path):
    """A model whose output projection is its embedding: the exporter folds the projection into the embedding's
    transpose; weights.bin holds the embedding once, the whole-sequence graph reads it through a Transpose node,
    and rescoring (that graph) and decoding give the package's transcripts."""
    import onnx

    tok = load_tokenizer(tone_corpus / "tokenizer")
    cfg = Config()
    cfg.model = ModelConfig(input_dim=80, vocab_size=tok.vocab_size, **PRESETS["tiny"], tie_embeddings=True)
    cfg.decode.max_len_ratio, cfg.decode.beam = 0.3, 3
    torch.manual_seed(1)
    model = ASRModel(cfg.model)
    save_package(tmp_path / "model.pt", cfg, tok, model.state_dict())
    export_package(tmp_path / "model.pt", tmp_path / "onnx")
    embedding = model.decoder.embed.weight.detach().numpy()
    weights = (tmp_path / "onnx" / "weights.bin").read_bytes()
    assert weights.count(embedding.tobytes()) == 1 and np.ascontiguousarray(embedding.T).tobytes() not in weights
    graph = onnx.load(str(tmp_path / "onnx" / "decoder.onnx"), load_external_data=False).graph
    assert any(n.op_type == "Transpose" and n.input[0].endswith("/transposed") for n in graph.node)
    waves = [load_utterance(u) for u in read_manifest(tone_corpus / "test.jsonl")]
    for mode in ("rescore", "greedy"):
        package = Recognizer(tmp_path / "model.pt", device="cpu", threads=1, mode=mode)
        exported = ExportedRecognizer(tmp_path / "onnx", threads=1, mode=mode)
        assert [h.tokens for h in exported.decode_waves(waves)] == [h.tokens for h in package.decode_waves(waves)]


def test_transcribe_an_export_without_torch(exported, tmp_path):
    """`asr transcribe --model <export>` with torch made unimportable gives the package's transcript."""
    root, _ = exported
    t = np.arange(16000 * 2) / 16000
    burst = 0.3 * np.sin(2 * np.pi * 300 * t) * (np.sin(2 * np.pi * 3 * t) > 0) * (t > 0.3) * (t < 1.7)
    sf.write(tmp_path / "talk.wav", burst.astype(np.float32), 16000)
    code = ("import sys; sys.modules['torch'] = None; sys.modules['torchaudio'] = None\n"
            "from asr_transformer.cli import app\n"
            f"app(['transcribe', {str(tmp_path / 'talk.wav')!r}, '--model', {str(root / 'onnx')!r}, '--threads', '1', "
            "'-f', 'json'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    expected = Recognizer(root / "model.pt", device="cpu", threads=1).transcribe(tmp_path / "talk.wav")
    assert result["text"] == expected["text"] and len(result["segments"]) == len(expected["segments"]) >= 1
    assert json.loads((root / "onnx/export.json").read_text())["config"]["decode"]["mode"] == "joint"  # the package's
    # the NAT decoder's Mask-CTC runs without torch too
    proc = subprocess.run([sys.executable, "-c", code.replace("'-f', 'json'", "'--mode', 'maskctc'")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # options an export cannot honour are one clear line
    proc = subprocess.run([sys.executable, "-c", code.replace("'-f', 'json'", "'--temperature', '0.5'")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "an export does not sample" in proc.stderr


def test_asr_decode_an_export_writes_what_the_package_decoding_writes(exported, tone_corpus, tmp_path):
    from typer.testing import CliRunner

    from asr_transformer.cli import app

    root, _ = exported
    for model, out in ((root / "onnx", tmp_path / "onnx"), (root / "model.pt", tmp_path / "package")):
        run = CliRunner().invoke(app, ["decode", str(model), str(tone_corpus / "test.jsonl"), "--mode", "ctc,rescore",
                                       "--threads", "1", "--batch-size", "3", "--out", str(out)])
        assert run.exit_code == 0, run.output
    for mode in ("ctc", "rescore"):
        onnx, package = ([json.loads(line) for line in (tmp_path / kind / mode / "hyp.jsonl").read_text().splitlines()]
                         for kind in ("onnx", "package"))
        assert [(r["id"], r["tokens"], r["text"]) for r in onnx] == [(r["id"], r["tokens"], r["text"]) for r in package]
        rtf = json.loads((tmp_path / "onnx" / mode / "rtf.json").read_text())
        assert rtf["runtime"] == "onnxruntime" and rtf["utterances"] == 8 and rtf["model_mb"] > 0
        assert json.loads((tmp_path / "onnx" / mode / "result.json").read_text())["wer"] == pytest.approx(
            json.loads((tmp_path / "package" / mode / "result.json").read_text())["wer"])


@pytest.mark.parametrize("beam", [1, 3, 8])
def test_numpy_ctc_prefix_beam_search_equals_the_torch_one(beam):
    from asr_transformer.decode.ctc_prefix import ctc_prefix_beam_search as torch_search
    from asr_transformer.inference.exported_search import ctc_prefix_beam_search

    g = torch.Generator().manual_seed(beam)
    for T, V in ((1, 5), (30, 8), (60, 20)):
        log_probs = (torch.randn(1, T, V, generator=g) * 3).log_softmax(-1)
        want = torch_search(log_probs, torch.tensor([T]), beam)[0]
        got = ctc_prefix_beam_search(log_probs[0].numpy(), T, beam)
        assert [h.tokens for h in got] == [h.tokens for h in want]
        np.testing.assert_allclose([h.score for h in got], [h.score for h in want], atol=1e-4)


def test_too_short_utterances_decode_to_nothing(exported):
    root, _ = exported
    onnx = ExportedRecognizer(root / "onnx", threads=1)
    waves = [np.zeros(400, np.float32), np.zeros(900, np.float32)]  # 1 and 4 feature frames: no encoder frame
    for mode in EXPORTED_MODES:
        hyps = onnx.decode_features([onnx.features(w) for w in waves], replace(onnx.options, mode=mode))
        assert [h.tokens for h in hyps] == [[], []], mode
