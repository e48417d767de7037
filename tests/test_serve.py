"""`asr serve`, started for real on a free port, called by the official `openai` client and by plain HTTP: the
text equals `Recognizer.transcribe`'s in every response format; bad requests get their status and a JSON error
while the server keeps serving; concurrent clients each get their own answer; SIGTERM loses no request."""

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asr_transformer.config import Config, apply_preset
from asr_transformer.data.tokenizer import train_tokenizer
from asr_transformer.model.asr import ASRModel
from asr_transformer.package import save_package
from asr_transformer.inference.recognizer import Recognizer
from asr_transformer.tokens import BLANK, EOS
from asr_transformer.inference.cues import cues
from asr_transformer.inference.writers import to_srt, to_vtt

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
KEY = "test-key"
# the tone clips have no pauses, so the voice detector hands each over whole, and says so
pytestmark = pytest.mark.filterwarnings("ignore::asr_transformer.inference.transcribe.NoSpeechWarning")


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """A tiny random model whose CTC head favours 'a' and 'b' by the input's loudness, so texts differ."""
    root = tmp_path_factory.mktemp("serve")
    tok = train_tokenizer(["a b ab ba", "b a"] * 5, root / "tokenizer", model_type="char")
    cfg = Config()
    apply_preset(cfg.model, "tiny")
    cfg.model.vocab_size = tok.vocab_size
    cfg.decode.mode, cfg.decode.beam, cfg.decode.vad = "ctc", 2, "energy"  # tones, not speech: Silero's detector hears none
    torch.manual_seed(0)
    model = ASRModel(cfg.model)
    with torch.no_grad():
        model.ctc.proj.bias[BLANK] = -3.0
        model.decoder.output.bias[EOS] = 5.0
    save_package(root / "model.pt", cfg, tok, model.state_dict())
    # the same weights decoding non-autoregressively (Mask-CTC) by default: served as "other"
    cfg.model.nat_weight, cfg.decode.mode = 0.3, "maskctc"
    save_package(root / "nat.pt", cfg, tok, model.state_dict())
    return root / "model.pt"


def _wav(path: Path, seconds: float, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    t = np.arange(int(0.25 * 16000)) / 16000
    tones = [rng.uniform(0.05, 0.4) * np.sin(2 * np.pi * rng.uniform(200, 2000) * t) for _ in range(int(seconds * 4))]
    sf.write(path, np.concatenate(tones).astype(np.float32), 16000, subtype="PCM_16")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(package: Path, *args: str, other: Path | None = None) -> tuple[subprocess.Popen, str]:
    """A server of `package` as "tiny" and `other` (default: the same) as "other"."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "asr_transformer", "serve", "--model", f"tiny={package}",
                             "--model", f"other={other or package}", "--port", str(port), "--threads", "1",
                             "--device", "cpu", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server stopped: {proc.stdout.read()}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=1) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError("the server did not answer /health within 120 s")


@pytest.fixture(scope="module")
def server(package):
    proc, base = _start(package, "--api-key", KEY, "--max-upload-mb", "0.2", "--stream-idle-seconds", "2",
                        other=package.with_name("nat.pt"))
    yield base
    proc.terminate()
    proc.wait(timeout=60)


def _client(base: str):
    return openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0)


def test_openai_client_gets_the_recognizers_text_in_every_format(server, package, tmp_path):
    wav = _wav(tmp_path / "a.wav", 2.5, seed=1)
    expected = Recognizer(package, device="cpu", threads=1).transcribe(str(wav))
    assert expected["text"]
    client = _client(server)
    with open(wav, "rb") as f:
        assert client.audio.transcriptions.create(model="tiny", file=f).text == expected["text"]
    for fmt, want in (("text", expected["text"] + "\n"), ("srt", to_srt(expected)), ("vtt", to_vtt(expected))):
        with open(wav, "rb") as f:
            assert client.audio.transcriptions.create(model="tiny", file=f, response_format=fmt) == want, fmt
    with open(wav, "rb") as f:
        verbose = client.audio.transcriptions.create(model="tiny", file=f, response_format="verbose_json",
                                                     timestamp_granularities=["word", "segment"])
    assert verbose.text == expected["text"] and verbose.duration == pytest.approx(2.5, abs=0.01)
    assert [s.text for s in verbose.segments] == [s["text"] for s in expected["segments"]]
    assert [w.word for w in verbose.words] == expected["text"].split()
    assert all(0 <= w.start <= w.end <= 2.5 for w in verbose.words)
    assert [m.id for m in client.models.list()] == ["tiny", "other"]


def _post(base: str, body: bytes, content_type: str, key: str | None = KEY) -> tuple[int, dict]:
    headers = {"Content-Type": content_type, **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"{base}/v1/audio/transcriptions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _form(fields: dict, audio: bytes | None) -> tuple[bytes, str]:
    boundary = "asr-test-boundary"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    if audio is not None:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
                     f"Content-Type: audio/wav\r\n\r\n".encode() + audio + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def test_bad_requests_get_their_status_and_the_server_keeps_serving(server, tmp_path):
    audio = _wav(tmp_path / "a.wav", 1.0, seed=2).read_bytes()
    long = _wav(tmp_path / "long.wav", 8.0, seed=3).read_bytes()  # 256 kB, over the 0.2 MB limit
    cases = [
        (_form({"model": "tiny"}, audio), None, 401, "API key"),
        (_form({"model": "tiny"}, b"RIFF not audio at all"), KEY, 400, "not audio"),
        (_form({"model": "tiny"}, long), KEY, 413, "limit"),
        (_form({"model": "tiny"}, None), KEY, 422, "'file'"),
        (_form({"model": "tiny", "response_format": "docx"}, audio), KEY, 422, "response_format"),
        (_form({"model": "tiny", "language": "fr"}, audio), KEY, 422, "language"),
        (_form({"model": "nope"}, audio), KEY, 404, "'nope'"),
        (_form({"model": "tiny", "hotwords": "zzz"}, audio), KEY, 422, "zzz"),  # no 'z' in this model's units
        (_form({"model": "tiny", "prompt": "a b"}, audio), KEY, 422, "reads no prompt"),  # not a Whisper model
        ((b"{}", "application/json"), KEY, 415, "multipart"),
    ]
    for (body, content_type), key, status, named in cases:
        got, answer = _post(server, body, content_type, key)
        assert got == status and named in answer["error"]["message"], (status, answer)
    got, answer = _post(server, *_form({"model": "tiny"}, audio))
    assert got == 200 and "text" in answer
    with urllib.request.urlopen(f"{server}/metrics") as r:
        metrics = r.read().decode()
    assert 'asr_requests_total{path="/v1/audio/transcriptions",status="413"} 1' in metrics


def test_concurrent_clients_each_get_their_own_text(server, package, tmp_path):
    """Sixteen clients at once to the model "other", which decodes with Mask-CTC (non-autoregressive)."""
    wavs = [_wav(tmp_path / f"c{i}.wav", 1.0 + 0.25 * (i % 5), seed=10 + i) for i in range(16)]
    rec = Recognizer(package.with_name("nat.pt"), device="cpu", threads=1)
    assert rec.options.mode == "maskctc"
    expected = [rec.transcribe(str(w))["text"] for w in wavs]
    assert len(set(expected)) > 1

    def ask(wav: Path) -> str:
        with open(wav, "rb") as f:
            return _client(server).audio.transcriptions.create(model="other", file=f).text

    with ThreadPoolExecutor(16) as pool:
        assert list(pool.map(ask, wavs)) == expected
    with urllib.request.urlopen(f"{server}/metrics") as r:  # requests that waited together were decoded together
        sizes = [int(line.split('"')[1]) for line in r.read().decode().splitlines()
                 if line.startswith("asr_batches_total{")]
    assert max(sizes) > 1


def test_files_decoded_together_give_what_each_gives_alone(package, tmp_path):
    from asr_transformer.inference.transcribe import SegmentStream, transcribe_many

    rec = Recognizer(package, device="cpu", threads=1, batch_size=3)
    sources = []
    for i in range(5):  # speech, a pause, speech: two segments in some files
        tones = sf.read(_wav(tmp_path / f"m{i}.wav", 1.0 + 0.5 * i, seed=20 + i), dtype="float32")[0]
        sources.append(np.concatenate([tones, np.zeros(16000 * (i % 2), np.float32), tones[: 4000 * (i + 1)]]))
    assert [len(list(SegmentStream(rec, x))) for x in sources] == [1, 2, 1, 2, 1]
    alone = [rec.transcribe(x) for x in sources]
    assert transcribe_many(rec, sources) == alone
    assert len({r["text"] for r in alone}) > 1


def test_a_full_queue_answers_429_and_sigterm_finishes_the_requests_in_flight(package, tmp_path):
    proc, base = _start(package, "--max-queue", "2")
    wav = _wav(tmp_path / "long.wav", 12.0, seed=4).read_bytes()
    with ThreadPoolExecutor(6) as pool:
        answers = [pool.submit(_post, base, *_form({"model": "tiny"}, wav), None) for _ in range(6)]
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        statuses = sorted(a.result()[0] for a in answers)
    assert proc.wait(timeout=120) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has drained
    assert 429 in statuses and statuses.count(200) >= 2 and set(statuses) <= {200, 429}, statuses


def test_workers_serve_one_port_and_each_answers_as_one_process_does(package, tmp_path):
    """--workers 2: two processes serve the port (two pids answer /health over fresh connections), concurrent
    requests each get the text one process gives, and SIGTERM ends them all."""
    proc, base = _start(package, "--workers", "2")
    wavs = [_wav(tmp_path / f"w{i}.wav", 1.0 + 0.5 * i, seed=20 + i) for i in range(6)]
    expected = [Recognizer(package, device="cpu", threads=1).transcribe(str(w))["text"] for w in wavs]
    try:
        pids = set()
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline:
            with urllib.request.urlopen(f"{base}/health", timeout=10) as r:
                pids.add(json.loads(r.read())["pid"])
        assert len(pids) == 2 and proc.pid not in pids, pids

        def ask(wav):
            with open(wav, "rb") as f:
                return openai.OpenAI(base_url=f"{base}/v1", api_key="-", max_retries=0).audio.transcriptions.create(
                    model="tiny", file=f).text

        with ThreadPoolExecutor(6) as pool:
            assert list(pool.map(ask, wavs)) == expected
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    for pid in pids:  # no worker outlives the server
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_a_websocket_stream_gives_the_finals_of_asr_transcribe_stream(server, package, tmp_path):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    from asr_transformer.inference.streaming import stream_file

    wav = _wav(tmp_path / "s.wav", 3.0, seed=5)
    expected = [(e.text, round(e.start, 3), round(e.end, 3))
                for e in stream_file(Recognizer(package, device="cpu", threads=1), str(wav)) if e.kind == "final"]
    assert expected and expected[0][0]
    pcm = (sf.read(wav, dtype="int16")[0]).astype("<i2").tobytes()
    url = server.replace("http", "ws") + "/v1/stream?model=tiny"
    with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        for i in range(0, len(pcm), 3200):  # 0.1 s a message
            ws.send(pcm[i:i + 3200])
        ws.send(json.dumps({"type": "end"}))
        events = [json.loads(m) for m in ws]
    assert events[-1] == {"type": "done"}
    assert [(e["text"], e["start"], e["end"]) for e in events if e["type"] == "final"] == expected
    with pytest.raises(InvalidStatus):  # no key: the handshake is refused
        connect(url).close()
    with connect(url + f"&api_key={KEY}") as ws:  # a browser's way to send the key; then silence
        assert json.loads(ws.recv(timeout=30)) == {"type": "error", "message": "no audio for 2 s; closing the stream"}


def test_a_whisper_model_reads_each_requests_prompt_and_no_other(tmp_path):
    """OpenAI's `prompt` is Whisper's initial prompt: a request with one gets what `Recognizer(initial_prompt=…)`
    gives, and requests decoded beside it (with another prompt or none) get their own texts."""
    pytest.importorskip("tokenizers")
    from asr_transformer.whisper import import_whisper
    from tests.whisper_reference import Dims, Whisper, make_tokenizer, write_openai

    tokenizer, special = make_tokenizer(tmp_path)
    torch.manual_seed(0)
    whisper = Whisper(Dims(n_vocab=special["<|notimestamps|>"] + 4, n_audio_ctx=150))  # a 3-s window
    package = tmp_path / "whisper.pt"
    import_whisper(write_openai(whisper, tmp_path / "tiny.pt"), package, tokenizer_json=tokenizer, pad_to_seconds=0)
    from typer.testing import CliRunner

    from asr_transformer.cli import app

    result = CliRunner().invoke(app, ["package", str(package), "-o", str(package), "--vad", "energy"])  # tones
    assert result.exit_code == 0, result.output
    wav = _wav(tmp_path / "w.wav", 2.0, seed=6)
    prompts = ["", "hello world", "", "the world", "hello world"] * 2
    expected = {p: Recognizer(package, device="cpu", threads=1, initial_prompt=p).transcribe(str(wav))["text"]
                for p in set(prompts)}
    assert len(set(expected.values())) == 3  # each prompt changes this model's text
    proc, base = _start(package, "--api-key", KEY)
    try:
        def ask(prompt: str) -> str:
            with open(wav, "rb") as f:
                return _client(base).audio.transcriptions.create(model="tiny", file=f, prompt=prompt).text

        with ThreadPoolExecutor(len(prompts)) as pool:
            assert list(pool.map(ask, prompts)) == [expected[p] for p in prompts]
        assert ask("") == expected[""]
        # srt: the window is cut into cues at its words' times, as `asr transcribe -f srt` cuts it
        timed = Recognizer(package, device="cpu", threads=1).transcribe(str(wav), word_timestamps=True)
        with open(wav, "rb") as f:
            srt = _client(base).audio.transcriptions.create(model="tiny", file=f, response_format="srt")
        assert srt == to_srt(timed) and srt.count("-->") == len(cues(timed))
        assert srt != to_srt(Recognizer(package, device="cpu", threads=1).transcribe(str(wav)))  # the words' times
    finally:
        proc.terminate()
        proc.wait(timeout=60)
