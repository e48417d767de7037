"""`asr prepare general-english`: archives fetched over HTTP and checked by SHA-256, recordings read out of them
into 16-kHz FLAC with their transcripts and speakers, a test split only; a damaged download is refused."""

import dataclasses
import hashlib
import http.server
import io
import tarfile
import threading
from functools import partial

import numpy as np
import pytest
import soundfile as sf

from asr_transformer.data.corpora import general_english as ge
from asr_transformer.data.corpora.common import CorpusError
from asr_transformer.data.manifest import read_manifest


def _wav(seconds: float, rate: int, level: float) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, np.full(int(seconds * rate), level, dtype=np.float32), rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def _archive(path, top: str, members: dict[str, bytes]) -> str:
    """A .tar.gz holding `members` under `top`/; → its SHA-256."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def server(tmp_path):
    """A local HTTP server of tmp_path/www, as PyPI's file host; → its base URL."""
    root = tmp_path / "www"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(http.server.SimpleHTTPRequestHandler,
                                                                      directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", root
    httpd.shutdown()


def test_recordings_come_out_of_the_archives_with_their_transcripts(server, tmp_path):
    base, root = server
    lj = {"tests/data/ljspeech/metadata.csv": b"LJ1|In 1465 he printed.|In fourteen sixty-five he printed.\n",
          "tests/data/ljspeech/wavs/LJ1.wav": _wav(1.0, 22050, 0.1)}
    ps = {"test/data/librivox/transcription": b"<s> he was not ill </s> (book-1)\n",
          "test/data/librivox/book-1.wav": _wav(0.5, 16000, 0.2),
          "test/data/cards/cards.transcription": b"<s> ten of clubs  </s> (001)\n\n",
          "test/data/cards/001.wav": _wav(0.7, 16000, 0.3)}
    sources = (dataclasses.replace(ge.SOURCES[0], path="a/TTS.tar.gz", sha256=_archive(root / "a_TTS.tgz", "TTS-0.0.13.2", lj)),
               dataclasses.replace(ge.SOURCES[1], path="b/ps.tar.gz",
                                   sha256=_archive(root / "b_ps.tgz", "pocketsphinx-5.1.1", ps)))
    for name in ("a", "b"):
        (root / name).mkdir()
    (root / "a_TTS.tgz").rename(root / "a/TTS.tar.gz")
    (root / "b_ps.tgz").rename(root / "b/ps.tar.gz")
    summary = ge.prepare(tmp_path / "out", base_url=base, sources=sources)
    utts = {u.id: u for u in read_manifest(tmp_path / "out/test.jsonl")}
    assert summary["splits"]["test"]["utterances"] == 3 and list(summary["splits"]) == ["test"]
    assert (utts["LJ1"].text, utts["LJ1"].speaker) == ("In fourteen sixty-five he printed.", "ljspeech")
    assert (utts["librivox_book-1"].text, utts["cards_001"].text) == ("he was not ill", "ten of clubs")
    samples, rate = sf.read(utts["LJ1"].audio)
    assert rate == 16000 and utts["LJ1"].duration == pytest.approx(1.0, abs=1e-3)
    assert abs(float(np.median(samples)) - 0.1) < 0.01
    assert "pocketsphinx-5.1.1" in (tmp_path / "out/SOURCES.md").read_text()


def test_a_download_that_is_not_the_published_archive_is_refused(server, tmp_path):
    base, root = server
    (root / "c").mkdir()
    (root / "c/x.tar.gz").write_bytes(b"not the archive")
    bad = (dataclasses.replace(ge.SOURCES[2], path="c/x.tar.gz"),)
    with pytest.raises(CorpusError, match=r"x\.tar\.gz: SHA-256 .* expected 5df897e5"):
        ge.prepare(tmp_path / "out", base_url=base, sources=bad)
    with pytest.raises(CorpusError, match="cannot download"):
        ge.prepare(tmp_path / "out2", base_url=base, sources=(dataclasses.replace(bad[0], path="c/absent.tar.gz"),))
