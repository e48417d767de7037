"""The model package as a complete recognizer: decoding defaults and LMs inside (`asr package`), decoded with no
flags to the same hypotheses as the flags give, `asr info`, the README's Python lines, and int8."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import typer
from typer.testing import CliRunner

from asr_transformer.cli import app

SETTING = ["--mode", "joint", "--beam", "3", "--ctc-weight", "0.4", "--length-penalty", "0.5", "--lm-weight", "0.3",
           "--word-lm-weight", "0.6"]


def asr(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def packaged(tiny_package, tmp_path_factory):
    """tiny_package with a token 3-gram and a word 2-gram LM, packaged with SETTING as its decoding defaults."""
    root, tmp = tiny_package, tmp_path_factory.mktemp("packaged")
    asr("lm", root / "test.jsonl", "--tokenizer", root / "tok", "--order", "3", "--out", tmp / "lm.arpa")
    asr("lm", root / "test.jsonl", "--tokenizer", root / "tok", "--order", "2", "--words", "--out", tmp / "words.arpa")
    asr("package", root / "model.pt", "--out", tmp / "model.pt", "--lm", tmp / "lm.arpa", "--word-lm",
        tmp / "words.arpa", *SETTING)
    return tmp


def hypotheses(folder):
    return [(r["id"], r["text"], r["tokens"], r["score"])
            for r in map(json.loads, (folder / "hyp.jsonl").read_text().splitlines())]


def test_package_decodes_with_no_flags_as_the_flags_do(tiny_package, packaged):
    common = ["--threads", "1", "--device", "cpu", "--batch-size", "2"]
    asr("decode", packaged / "model.pt", tiny_package / "test.jsonl", "--out", packaged / "inside", *common)
    asr("decode", tiny_package / "model.pt", tiny_package / "test.jsonl", "--out", packaged / "flags", *SETTING,
        "--lm", packaged / "lm.arpa", "--word-lm", packaged / "words.arpa", *common)
    inside = hypotheses(packaged / "inside")
    assert inside == hypotheses(packaged / "flags") and len(inside) == 4
    rtf = json.loads((packaged / "inside" / "rtf.json").read_text())
    assert rtf["mode"] == "joint" and rtf["options"]["beam"] == 3 and rtf["options"]["word_lm_weight"] == 0.6
    assert rtf["lm"] == "lm.arpa" and rtf["word_lm"] == "words.arpa" and rtf["word_lm_order"] == 2
    # the LMs took part: without them the scores differ; every default stays overridable
    asr("decode", packaged / "model.pt", tiny_package / "test.jsonl", "--out", packaged / "no_lm", "--no-lm", *common)
    assert [h[3] for h in hypotheses(packaged / "no_lm")] != [h[3] for h in inside]
    asr("decode", packaged / "model.pt", tiny_package / "test.jsonl", "--out", packaged / "ctc", "--mode", "ctc",
        *common)
    assert json.loads((packaged / "ctc" / "rtf.json").read_text())["lm"] is None  # ctc fuses no LM


def test_transcribe_takes_the_package_setup_and_every_decoding_option(tiny_package, packaged, tmp_path):
    from asr_transformer.inference.recognizer import Recognizer

    wave = (0.3 * np.sin(2 * np.pi * 250 * np.arange(16000) / 16000) * (np.arange(16000) > 4000)).astype(np.float32)
    sf.write(tmp_path / "a.wav", wave, 16000)
    text = asr("transcribe", tmp_path / "a.wav", "--model", packaged / "model.pt", "--threads", "1").stdout.strip()
    flags = asr("transcribe", tmp_path / "a.wav", "--model", tiny_package / "model.pt", "--threads", "1", *SETTING,
                "--lm", packaged / "lm.arpa", "--word-lm", packaged / "words.arpa").stdout.strip()
    assert text == flags
    rec = Recognizer(packaged / "model.pt", device="cpu", threads=1)
    assert rec.transcribe(tmp_path / "a.wav")["text"] == text and rec.options.ctc_weight == 0.4
    assert rec.lms == {"lm": "lm.arpa", "word_lm": "words.arpa"}
    assert Recognizer(packaged / "model.pt", device="cpu", beam=1, word_lm=False).options.beam == 1
    # asr transcribe accepts every decoding option of asr decode (what decode writes aside: --nbest, --score)
    from dataclasses import fields

    from asr_transformer.config import VAD_OPTIONS, DecodeConfig

    commands = typer.main.get_command(app).commands
    options = {name: {o for p in commands[name].params for o in p.opts if o.startswith("--")}
               for name in ("decode", "transcribe")}
    decoding = {"--" + f.name.replace("_", "-") for f in fields(DecodeConfig)} - {"--nbest"}
    decoding |= {"--lm", "--word-lm", "--no-lm", "--precision", "--device", "--threads"}
    detector = {"--" + name.replace("_", "-") for name in VAD_OPTIONS}  # transcribe's: decode reads utterances whole
    assert decoding - detector <= options["decode"] and decoding <= options["transcribe"]
    assert not detector & options["decode"]
    assert "--mode" in options["transcribe"] and "--maskctc-threshold" in options["transcribe"]


def test_info_shows_what_the_package_holds(tiny_package, packaged, tmp_path):
    out = asr("info", packaged / "model.pt").stdout
    assert "2 Transformer (pre-LN) encoder blocks" in out and "units:      char" in out
    assert "mode joint, beam 3, CTC weight 0.4, length bonus 0.5, LM weight 0.3, word LM weight 0.6" in out
    assert re.search(r"token LM +lm\.arpa: 3-gram, [\d,]+ \+ [\d,]+ \+ [\d,]+ n-grams", out)
    assert re.search(r"word LM +words\.arpa: 2-gram", out)
    # a validated result recorded from a decoding of the package itself
    folder = packaged / "inside_scored"
    asr("decode", packaged / "model.pt", tiny_package / "test.jsonl", "--out", folder, "--threads", "1")
    asr("package", packaged / "model.pt", "--out", tmp_path / "validated.pt", "--result", f"test={folder}")
    out = asr("info", tmp_path / "validated.pt").stdout
    assert re.search(r"test: +WER [\d.]+ %, CER [\d.]+ % on 4 utterances \(decoded with these defaults\)", out)
    # --no-lm removes the LMs; a bad --result is one line
    asr("package", tmp_path / "validated.pt", "--out", tmp_path / "bare.pt", "--no-lm")
    assert "LMs:        none" in asr("info", tmp_path / "bare.pt").stdout
    for bad in (["--result", "test"], ["--result", f"dev={tmp_path}"], ["--mode", "fast"]):
        result = CliRunner().invoke(app, ["package", str(packaged / "model.pt"), "--out", str(tmp_path / "x.pt"), *bad])
        assert result.exit_code == 1 and "error" in result.output and "Traceback" not in result.output, bad


def test_readme_python_lines(packaged):
    """The three lines README.md shows, run as written there (the package and audio paths replaced)."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = re.search(r"```python\n(from asr_transformer import Recognizer\n.*?)```", text, re.S).group(1)
    wave = (0.3 * np.sin(2 * np.pi * 300 * np.arange(12000) / 16000)).astype(np.float32)
    sf.write(packaged / "audio.wav", wave, 16000)
    code = block.replace('"exp/phone/model.pt"', repr(str(packaged / "model.pt"))).replace(
        '"audio.wav"', repr(str(packaged / "audio.wav")))
    printed = []
    exec(compile(code, "README.md", "exec"), {"print": printed.append})
    assert len(printed) == 1 and isinstance(printed[0], str)


def test_int8_quantizes_the_linear_layers_and_stays_close(tiny_package):
    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.model.int8 import Int8Linear

    fp32 = Recognizer(tiny_package / "model.pt", device="cpu", threads=1)
    int8 = Recognizer(tiny_package / "model.pt", device="cpu", threads=1, precision="int8")
    layers = [*int8.model.encoder.modules(), *int8.model.decoder.modules()]
    assert not any(isinstance(m, torch.nn.Linear) for m in layers)
    quantized = [m for m in layers if isinstance(m, Int8Linear)]
    assert len(quantized) == sum(isinstance(m, torch.nn.Linear) for m in [*fp32.model.encoder.modules(),
                                                                         *fp32.model.decoder.modules()])
    feats = torch.randn(2, 120, 80)
    lens = torch.tensor([120, 90])
    with torch.inference_mode():
        a, a_lens = fp32.model.encode(feats, lens)
        b, b_lens = int8.model.encode(feats, lens)
        assert torch.equal(a_lens, b_lens)
        err = (fp32.model.ctc_log_probs(a).exp() - int8.model.ctc_log_probs(b).exp()).abs().max().item()
    assert 0 < err < 0.05  # quantized, so not equal; close in probability
    with pytest.raises(Exception, match="int8 runs on the CPU only"):
        from asr_transformer.package import check_precision
        check_precision("int8", "cuda")


def resave(src: Path, dst: Path, edit) -> None:
    """What a deliberate edit does: change the payload, keep any signature line, recompute the SHA-256 footer."""
    import hashlib
    import io

    from asr_transformer.checkpoint_io import FOOTER, FOOTER_LEN, SIGNATURE, SIGNATURE_LEN

    body = src.read_bytes()[:-FOOTER_LEN]
    signed = body[-SIGNATURE_LEN:].startswith(SIGNATURE)
    payload, signature = (body[:-SIGNATURE_LEN], body[-SIGNATURE_LEN:]) if signed else (body, b"")
    state = torch.load(io.BytesIO(payload), weights_only=True)
    edit(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    body = buffer.getvalue() + signature
    dst.write_bytes(body + FOOTER + hashlib.sha256(body).hexdigest().encode() + b"\n")


def zero_encoder(state):
    state["weights"]["encoder.layers.0.self_attn.q.weight"].zero_()


def permute_ctc(state):
    state["weights"]["ctc.proj.weight"] = state["weights"]["ctc.proj.weight"].flip(0).contiguous()


def four_heads(state):
    state["config"]["model"]["heads"] = 4


@pytest.fixture
def signed(tiny_package, tmp_path, monkeypatch):
    """tiny_package re-written with ASR_PACKAGE_KEY set (so signed); the variable stays set."""
    from asr_transformer.package import load_package, save_package

    monkeypatch.delenv("ASR_PACKAGE_KEY", raising=False)
    model, tokenizer, cfg = load_package(tiny_package / "model.pt")
    monkeypatch.setenv("ASR_PACKAGE_KEY", "a secret")
    save_package(tmp_path / "signed.pt", cfg, tokenizer, model.state_dict())
    return tmp_path / "signed.pt"


@pytest.mark.parametrize("edit", [zero_encoder, permute_ctc, four_heads])
def test_an_edited_package_with_a_recomputed_footer_is_refused_only_with_the_key(signed, tmp_path, monkeypatch, edit):
    from asr_transformer.checkpoint_io import SignatureError
    from asr_transformer.package import load_package

    resave(signed, tmp_path / "edited.pt", edit)
    monkeypatch.delenv("ASR_PACKAGE_KEY")
    edited, _, cfg = load_package(tmp_path / "edited.pt")  # the checksum cannot tell a deliberate edit
    original, _, original_cfg = load_package(signed)
    assert cfg != original_cfg or any(not torch.equal(v, original.state_dict()[k])
                                      for k, v in edited.state_dict().items())  # the edit went through
    monkeypatch.setenv("ASR_PACKAGE_KEY", "a secret")
    load_package(signed)
    with pytest.raises(SignatureError, match=rf"^{tmp_path}/edited\.pt: signature mismatch: the file was changed "
                                             rf"after it was signed, or signed with another key than "
                                             rf"ASR_PACKAGE_KEY's; do not use it$"):
        load_package(tmp_path / "edited.pt")
    monkeypatch.setenv("ASR_PACKAGE_KEY", "another secret")
    with pytest.raises(SignatureError, match="signature mismatch"):
        load_package(signed)


def test_a_signed_package_round_trips_and_an_unsigned_one_needs_signing(tiny_package, signed, tmp_path):
    from asr_transformer.checkpoint_io import SignatureError, is_signed, load_checkpoint
    from asr_transformer.package import load_package

    model, _, _ = load_package(signed)  # ASR_PACKAGE_KEY is set
    original = load_checkpoint(tiny_package / "model.pt", format="asr-model")["weights"]  # no key: not checked
    assert model.state_dict().keys() == original.keys()
    for name, value in original.items():
        assert torch.equal(model.state_dict()[name], value), name
    assert is_signed(signed) and not is_signed(tiny_package / "model.pt")
    assert "signature:  valid for ASR_PACKAGE_KEY" in asr("info", signed).stdout
    # `asr package` keeps it signed
    asr("package", signed, "--out", tmp_path / "beam.pt", "--beam", "4")
    assert is_signed(tmp_path / "beam.pt") and load_package(tmp_path / "beam.pt")[2].decode.beam == 4
    # an unsigned package is refused while the key is set, until its owner signs it
    with pytest.raises(SignatureError, match=r"model\.pt: not signed, and a signed file is required \(ASR_PACKAGE_KEY "
                                             r"is set: only packages signed with that key load\); if you trust it, "
                                             r"sign it: `asr package .* --sign`$"):
        load_package(tiny_package / "model.pt")
    result = CliRunner().invoke(app, ["decode", str(tiny_package / "model.pt"), str(tiny_package / "test.jsonl"),
                                      "--out", str(tmp_path / "dec")])
    assert result.exit_code == 1 and "not signed" in result.output and "Traceback" not in result.output
    asr("package", tiny_package / "model.pt", "--out", tmp_path / "now_signed.pt", "--sign")
    resigned, _, _ = load_package(tmp_path / "now_signed.pt")
    for name, value in model.state_dict().items():
        assert torch.equal(value, resigned.state_dict()[name]), name


def test_a_config_out_of_step_with_the_weights_is_refused(tiny_package, tmp_path, monkeypatch):
    from asr_transformer.checkpoint_io import CheckpointError
    from asr_transformer.config import ConfigError
    from asr_transformer.package import load_package

    monkeypatch.delenv("ASR_PACKAGE_KEY", raising=False)

    def wider(state):
        state["config"]["model"]["d_model"] = 128

    resave(tiny_package / "model.pt", tmp_path / "wider.pt", wider)
    with pytest.raises(CheckpointError, match=rf"^{tmp_path}/wider\.pt: encoder\.subsampling\.conv\.0\.weight is "
                                              rf"\(64, 1, 3, 3\) in the weights, \(128, 1, 3, 3\) in the model its "
                                              rf"config describes: config and weights disagree"):
        load_package(tmp_path / "wider.pt")

    def deeper(state):
        state["config"]["model"]["encoder_layers"] = 3

    resave(tiny_package / "model.pt", tmp_path / "deeper.pt", deeper)
    with pytest.raises(CheckpointError, match=r"deeper\.pt: no weight encoder\.layers\.2\.[\w.]+, which the model"):
        load_package(tmp_path / "deeper.pt")

    def three_heads(state):
        state["config"]["model"]["heads"] = 3

    resave(tiny_package / "model.pt", tmp_path / "heads.pt", three_heads)
    with pytest.raises(ConfigError, match=r"heads\.pt:config: model\.heads=3: must be a divisor of model\.d_model=64"):
        load_package(tmp_path / "heads.pt")
    result = CliRunner().invoke(app, ["info", str(tmp_path / "heads.pt")])
    assert result.exit_code == 1 and "model.heads=3" in result.output and "Traceback" not in result.output


def test_every_kind_of_package_decodes_with_its_own_defaults(tiny_package, tmp_path):
    """A model without a CTC head (an imported or fine-tuned Whisper) gets attention beam search where its config
    names a CTC mode (the default joint), when written and when an older package is read; a CTC mode asked for
    explicitly is refused in one line."""
    from asr_transformer.config import PRESETS, Config, ModelConfig
    from asr_transformer.data.tokenizer import load_tokenizer
    from asr_transformer.model.asr import ASRModel
    from asr_transformer.package import load_package, read_package, save_package, set_decoding
    from asr_transformer.inference.recognizer import Recognizer

    tok = load_tokenizer(tiny_package / "tok")
    cfg = Config()
    cfg.model = ModelConfig(input_dim=cfg.features.num_mel_bins, vocab_size=tok.vocab_size, ctc=False,
                            ctc_weight=0.0, **PRESETS["tiny"])
    assert cfg.decode.mode == "joint"
    torch.manual_seed(0)
    save_package(tmp_path / "no_ctc.pt", cfg, tok, ASRModel(cfg.model).state_dict())
    assert read_package(tmp_path / "no_ctc.pt")["config"]["decode"]["mode"] == "beam"
    state = read_package(tmp_path / "no_ctc.pt")
    state["config"]["decode"]["mode"] = "joint"  # as written before the defaults were fitted
    assert load_package(tmp_path / "no_ctc.pt", state=state)[2].decode.mode == "beam"
    wave = np.random.default_rng(0).standard_normal(8000).astype(np.float32) * 0.1
    for package in (tiny_package / "model.pt", tmp_path / "no_ctc.pt"):
        texts = Recognizer(package, threads=1).recognize_arrays([wave])
        assert len(texts) == 1 and isinstance(texts[0], str)
    with pytest.raises(ValueError, match="mode joint needs a CTC head"):
        set_decoding(tmp_path / "no_ctc.pt", tmp_path / "out.pt", {"mode": "joint"})
    assert not (tmp_path / "out.pt").exists()


def test_a_tied_embedding_is_stored_once(tmp_path):
    """An averaged state dict holds the tied output projection as a second, equal tensor: the package stores one
    (Whisper tiny's 80-MB matrix was written twice), and loads with the tie in place."""
    import torch

    from asr_transformer.config import PRESETS, Config, ModelConfig
    from asr_transformer.data.tokenizer import train_tokenizer
    from asr_transformer.model.asr import ASRModel
    from asr_transformer.package import load_package, save_package

    tok = train_tokenizer(["one two three", "four five"] * 5, tmp_path / "tok", model_type="char")
    cfg = Config()
    cfg.model = ModelConfig(input_dim=80, vocab_size=tok.vocab_size, **{**PRESETS["tiny"], "d_model": 256,
                                                                          "ffn_dim": 32}, tie_embeddings=True)
    cfg.model.vocab_size = 2000  # a large embedding, so that a copy shows in the size
    weights = ASRModel(cfg.model).state_dict()
    copied = {k: v.clone() for k, v in weights.items()}  # as averaging gives them: equal, not shared
    save_package(tmp_path / "shared.pt", cfg, tok, weights)
    save_package(tmp_path / "copied.pt", cfg, tok, copied)
    embedding_bytes = 2000 * 256 * 4
    sizes = [(tmp_path / name).stat().st_size for name in ("shared.pt", "copied.pt")]
    assert abs(sizes[1] - sizes[0]) < embedding_bytes // 10, sizes
    model, _, _ = load_package(tmp_path / "copied.pt")
    assert model.decoder.output.weight is model.decoder.embed.weight
    torch.testing.assert_close(model.decoder.embed.weight, weights["decoder.embed.weight"])


def test_fp16_weights_halve_a_package_and_load_as_float32(tiny_package, tmp_path):
    import torch
    from typer.testing import CliRunner

    from asr_transformer.cli import app
    from asr_transformer.package import load_package

    result = CliRunner().invoke(app, ["package", str(tiny_package / "model.pt"), "-o", str(tmp_path / "half.pt"),
                                      "--fp16-weights"])
    assert result.exit_code == 0, result.output
    full, half = (tiny_package / "model.pt").stat().st_size, (tmp_path / "half.pt").stat().st_size
    original, _, _ = load_package(tiny_package / "model.pt")
    float_bytes = sum(t.numel() * 4 for t in original.state_dict().values() if t.is_floating_point())
    assert full - half > 0.45 * float_bytes, (full, half, float_bytes)  # each float weight: 2 bytes, was 4
    model, _, _ = load_package(tmp_path / "half.pt")
    for (name, a), b in zip(original.state_dict().items(), model.state_dict().values()):
        assert b.dtype == a.dtype, name
        torch.testing.assert_close(b, a.half().to(a.dtype) if a.is_floating_point() else a)


def test_int8_linear_is_close_to_the_float_layer_row_by_row():
    from asr_transformer.model.int8 import Int8Linear

    torch.manual_seed(0)
    linear = torch.nn.Linear(77, 33)
    x = torch.randn(2, 5, 77)
    x[0, 1] *= 1000  # one loud frame: per-row scales keep it from costing the others their precision
    x[1, 2] = 0  # a silent frame stays exactly the bias
    layer = Int8Linear(linear)
    assert layer.weight.dtype == torch.int8 and layer.weight.shape == (33, 77)
    with torch.no_grad():
        want, got = linear(x), layer(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    rel = ((got - want).norm(dim=-1) / want.norm(dim=-1)).max().item()
    assert 0 < rel < 0.02
    assert torch.equal(got[1, 2], linear.bias.detach())
    assert layer(torch.zeros(0, 77)).shape == (0, 33)
