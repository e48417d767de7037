"""The recognition server's application (`asr serve`): Starlette routes over loaded model packages.

Routes:
    GET  /                          → a page that captions the browser's microphone live (page.html, over /v1/stream)
    GET  /health                    → {"status": "ok", "models": [...], "pid": the worker process}
    GET  /v1/models                 → OpenAI's model list
    POST /v1/audio/transcriptions   → OpenAI's transcription API (openai_format.py)
    WS   /v1/stream                 → live captions: PCM in, partial and final transcripts out (live.py)
    GET  /metrics                   → Prometheus text: requests by status, audio seconds, latency, queue depth

Each model is loaded once and decodes on one thread of its own, so requests never copy it and never interleave
on it (its torch threads do the parallel work). Requests that arrive together are decoded together: a model's
batcher takes what waits in its queue (gathering for `batch_wait_ms` after the first, at most
`max_batch_requests`), and `transcribe_many` decodes all their segments in shared batches, similar lengths side by
side. At most `ServeConfig.max_queue` requests wait for a model; one more is answered 429. Every bad request gets
its status and a JSON error naming the problem (400 not audio, 401 no or a wrong key, 404 an unknown model, 413
too large or too long, 415 not a form, 422 a missing or wrong field, 429 busy); the server keeps serving.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from asr_transformer.data.audio import AudioError, audio_info
from asr_transformer.errors import UserError
from asr_transformer.inference.cues import needs_word_times
from asr_transformer.server.live import LiveSession
from asr_transformer.server.metrics import Metrics
from asr_transformer.server.openai_format import GRANULARITIES, RESPONSE_FORMATS, error_body, render

ENGLISH = ("", "en", "english")

PAGE = Path(__file__).with_name("page.html")  # GET /: the live-caption page


@dataclass
class ServeConfig:
    """What the server accepts: an API key (None: none needed), the largest upload, the longest audio, and how
    many requests may wait for each model."""

    api_key: str | None = None
    max_upload_mb: float = 25.0  # OpenAI's own limit
    max_audio_seconds: float = 600.0
    max_queue: int = 64
    batch_wait_ms: float = 10.0  # how long a model's batcher gathers requests after the first
    max_batch_requests: int = 16  # requests decoded together at most
    max_streams: int = 16  # live streams at once
    stream_idle_seconds: float = 30.0  # a stream that sends nothing this long is closed


class RequestError(Exception):
    """A request the server refuses: its HTTP status and the JSON error OpenAI's clients read."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.body = status, error_body(message, param=param, code=code)


@dataclass
class Job:
    """A transcription request waiting for its model's batcher."""

    audio: bytes
    words: bool
    hotwords: tuple[str, ...]
    prompt: str  # a Whisper model's initial prompt ("" for none)
    future: asyncio.Future


@dataclass
class ModelSlot:
    """A loaded model (a `Recognizer` or `ExportedRecognizer`), the one thread that decodes with it, the queue of
    requests for it and the task that batches them (started with the first request)."""

    name: str
    recognizer: object
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=1))
    waiting: int = 0
    queue: asyncio.Queue | None = None
    batcher: asyncio.Task | None = None


def create_app(models: dict[str, object], config: ServeConfig = ServeConfig()) -> Starlette:
    """The ASGI application serving `models` ({name: recognizer}; the first is the default)."""
    if not models:
        raise ValueError("the server needs at least one model")
    slots = {name: ModelSlot(name, rec) for name, rec in models.items()}
    metrics = Metrics()

    async def page(request: Request) -> Response:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "models": list(slots), "pid": os.getpid()})  # pid: which worker

    async def list_models(request: Request) -> Response:
        _authorize(request, config)
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model", "created": 0,
                                                          "owned_by": "asr-transformer"} for name in slots]})

    async def transcriptions(request: Request) -> Response:
        _authorize(request, config)
        form = await _read_form(request, config)
        slot = _pick_model(form, slots)
        audio, response_format, words, options = _transcription_fields(form, slot)
        seconds = _check_audio(audio, config)
        if slot.waiting >= config.max_queue:
            raise RequestError(429, f"model '{slot.name}' has {slot.waiting} requests waiting; try again later",
                               code="busy")
        slot.waiting += 1
        metrics.queue_depth(slot.name, slot.waiting)
        try:
            if slot.batcher is None:
                slot.queue = asyncio.Queue()
                slot.batcher = asyncio.create_task(_batcher(slot, config, metrics))
            job = Job(audio, words, tuple(options.get("hotwords", ())), options.get("initial_prompt", ""),
                      asyncio.get_running_loop().create_future())
            await slot.queue.put(job)
            result = await job.future
        finally:
            slot.waiting -= 1
            metrics.queue_depth(slot.name, slot.waiting)
        metrics.audio_seconds += seconds
        body, content_type = render(result, response_format, words)
        return Response(body, media_type=content_type)

    async def metrics_text(request: Request) -> Response:
        return Response(metrics.text(), media_type="text/plain; version=0.0.4")

    async def timed(request: Request, handler) -> Response:
        started = time.monotonic()
        try:
            response = await handler(request)
        except RequestError as e:
            response = JSONResponse(e.body, status_code=e.status)
        except Exception as e:  # a fault of the server, not of the request: said, logged, and the server goes on
            logging.getLogger("asr_transformer.server").exception("%s %s failed", request.method, request.url.path)
            response = JSONResponse(error_body(f"the server failed on this request ({type(e).__name__}: {e})",
                                               "server_error"), status_code=500)
        metrics.request(request.url.path, response.status_code, time.monotonic() - started)
        return response

    def route(path: str, handler, methods: list[str]) -> Route:
        async def endpoint(request: Request) -> Response:
            return await timed(request, handler)
        return Route(path, endpoint, methods=methods)

    streams = set()

    async def live(websocket: WebSocket) -> None:
        try:
            _authorize(websocket, config)
            slot = _pick_model(websocket.query_params, slots)
        except RequestError as e:
            await websocket.close(code=1008, reason=e.body["error"]["message"][:120])
            return
        await websocket.accept()
        if len(streams) >= config.max_streams:
            await _refuse(websocket, f"{len(streams)} streams are open, the most this server takes; try again later",
                          1013)
            return
        streams.add(websocket)
        try:
            await _serve_stream(websocket, slot, config, metrics)
        except WebSocketDisconnect:
            pass
        finally:
            streams.discard(websocket)

    return Starlette(routes=[route("/", page, ["GET"]), route("/health", health, ["GET"]), route("/v1/models", list_models, ["GET"]),
                             route("/v1/audio/transcriptions", transcriptions, ["POST"]),
                             WebSocketRoute("/v1/stream", live), route("/metrics", metrics_text, ["GET"])])


async def _serve_stream(websocket: WebSocket, slot: ModelSlot, config: ServeConfig, metrics: Metrics) -> None:
    """Read PCM until {"type": "end"}, sending each event as it comes; decoding runs on the model's thread."""
    loop = asyncio.get_running_loop()
    session = LiveSession(slot.recognizer)
    while True:
        try:
            message = await asyncio.wait_for(websocket.receive(), config.stream_idle_seconds)
        except asyncio.TimeoutError:
            await _refuse(websocket, f"no audio for {config.stream_idle_seconds:g} s; closing the stream", 1001)
            return
        if message["type"] == "websocket.disconnect":
            return
        audio = message.get("bytes")
        if audio is None and not _is_end(message.get("text")):
            await _refuse(websocket, 'send binary 16-bit PCM at 16 kHz, then the text {"type": "end"}', 1003)
            return
        try:
            if audio is not None:
                metrics.audio_seconds += len(audio) / 2 / 16000
                events = await loop.run_in_executor(slot.executor, session.feed, audio)
            else:
                events = await loop.run_in_executor(slot.executor, session.finish) + [{"type": "done"}]
        except UserError as e:  # audio or a model the stream cannot take: said, and this stream ends
            await _refuse(websocket, str(e), 1011)
            return
        for event in events:
            await websocket.send_json(event)
        if audio is None:
            await websocket.close()
            return


def _is_end(text: str | None) -> bool:
    try:
        return text is not None and json.loads(text).get("type") == "end"
    except (ValueError, AttributeError):
        return False


async def _refuse(websocket: WebSocket, message: str, code: int) -> None:
    await websocket.send_json({"type": "error", "message": message})
    await websocket.close(code=code)


def _authorize(request: Request | WebSocket, config: ServeConfig) -> None:
    """401 unless the request carries the key: `Authorization: Bearer <key>`, or for a WebSocket `?api_key=`."""
    if config.api_key is None:
        return
    header = request.headers.get("authorization", "")
    given = header[len("Bearer "):] if header.startswith("Bearer ") else ""
    if isinstance(request, WebSocket) and not given:
        given = request.query_params.get("api_key", "")
    if not hmac.compare_digest(given.encode(), config.api_key.encode()):
        raise RequestError(401, "a valid API key is needed: send 'Authorization: Bearer <key>'",
                           code="invalid_api_key")


async def _read_form(request: Request, config: ServeConfig):
    """The multipart form, its body read up to the upload limit (413 beyond it, 415 for another content type)."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise RequestError(415, "send the audio as multipart/form-data (a 'file' field and the options)")
    limit = int(config.max_upload_mb * 1024 * 1024)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"the upload is {int(declared) / 1e6:.1f} MB; the limit is {config.max_upload_mb:g} MB")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise RequestError(413, f"the upload passes the limit of {config.max_upload_mb:g} MB")
    request._body = bytes(body)  # Starlette parses the form from the body read here
    try:
        return await request.form(max_files=1, max_fields=50)
    except Exception as e:  # a malformed multipart body
        raise RequestError(400, f"the form cannot be read ({e})") from None


def _pick_model(form, slots: dict[str, ModelSlot]) -> ModelSlot:
    name = str(form.get("model") or "")
    if not name or name not in slots and len(slots) == 1:  # one model: OpenAI clients send "whisper-1"
        return next(iter(slots.values()))
    if name not in slots:
        raise RequestError(404, f"model '{name}' is not served here; models: {', '.join(slots)}", param="model",
                           code="model_not_found")
    return slots[name]


def _transcription_fields(form, slot: ModelSlot) -> tuple[bytes, str, bool, dict]:
    """(audio bytes, response format, word timestamps?, decoding options) of a transcription form."""
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise RequestError(422, "the form has no 'file' (the audio)", param="file")
    response_format = str(form.get("response_format") or "json")
    if response_format not in RESPONSE_FORMATS:
        raise RequestError(422, f"response_format '{response_format}': choose from {', '.join(RESPONSE_FORMATS)}",
                           param="response_format")
    granularities = [str(g) for g in form.getlist("timestamp_granularities[]")]
    unknown = [g for g in granularities if g not in GRANULARITIES]
    if unknown:
        raise RequestError(422, f"timestamp_granularities[] '{unknown[0]}': choose from {', '.join(GRANULARITIES)}",
                           param="timestamp_granularities[]")
    language = str(form.get("language") or "").lower()
    if language not in ENGLISH:
        raise RequestError(422, f"language '{language}': model '{slot.name}' transcribes English (en)",
                           param="language")
    options = {}
    prompt = str(form.get("prompt") or "").strip()
    if prompt and not getattr(slot.recognizer, "reads_prompt", False):
        raise RequestError(422, f"prompt: model '{slot.name}' reads no prompt (imported Whisper models do); to favour "
                                "words, send them as 'hotwords' (one phrase per line)", param="prompt")
    if prompt:
        options["initial_prompt"] = prompt
    hotwords = [p.strip() for p in str(form.get("hotwords") or "").splitlines() if p.strip()]
    if hotwords:
        options["hotwords"] = hotwords
    audio = upload.file.read()
    words = "word" in granularities or (response_format in ("srt", "vtt") and needs_word_times(slot.recognizer))
    return audio, response_format, words, options


def _check_audio(audio: bytes, config: ServeConfig) -> float:
    """The audio's duration; 400 when it is not audio, 413 when longer than the limit."""
    try:
        seconds = audio_info(audio)[0]
    except AudioError as e:
        raise RequestError(400, f"file: not audio this server can read ({e})", param="file") from None
    if seconds > config.max_audio_seconds:
        raise RequestError(413, f"the audio is {seconds:.1f} s; the limit is {config.max_audio_seconds:g} s",
                           param="file")
    return seconds


async def _batcher(slot: ModelSlot, config: ServeConfig, metrics: Metrics) -> None:
    """Forever: take the requests waiting for the model (those arriving within `batch_wait_ms` of the first, at
    most `max_batch_requests`), decode those that ask the same (word times, hotwords, prompt) together, answer each."""
    loop = asyncio.get_running_loop()
    while True:
        jobs = [await slot.queue.get()]
        deadline = loop.time() + config.batch_wait_ms / 1000
        while len(jobs) < config.max_batch_requests:
            try:
                jobs.append(await asyncio.wait_for(slot.queue.get(), max(0.0, deadline - loop.time())))
            except asyncio.TimeoutError:
                break
        metrics.batch(len(jobs))
        groups: dict[tuple, list[Job]] = {}
        for job in jobs:
            groups.setdefault((job.words, job.hotwords, job.prompt), []).append(job)
        for (words, hotwords, prompt), group in groups.items():
            try:
                results = await loop.run_in_executor(slot.executor, _transcribe, slot.recognizer,
                                                     [j.audio for j in group], words, hotwords, prompt)
            except RequestError as e:  # one bad file fails its group: decode them one by one, so only it fails
                results = [await _alone(loop, slot, job) for job in group] if len(group) > 1 else [e]
            except Exception as e:  # never let the batcher die: the request gets a 500, the server goes on
                results = [e] * len(group)
            for job, result in zip(group, results):
                if not job.future.done():
                    (job.future.set_exception if isinstance(result, Exception) else job.future.set_result)(result)


async def _alone(loop, slot: ModelSlot, job: Job):
    try:
        return (await loop.run_in_executor(slot.executor, _transcribe, slot.recognizer, [job.audio], job.words,
                                           job.hotwords, job.prompt))[0]
    except Exception as e:
        return e


def _transcribe(recognizer, audios: list[bytes], words: bool, hotwords: tuple[str, ...], prompt: str) -> list[dict]:
    """Runs on the model's thread: several files decoded together (`transcribe_many`), with the request's prompt
    read in place of the model's own. A UserError (audio that does not decode, hotwords the model cannot write, a
    prompt too long) becomes a 400/422 naming it."""
    from asr_transformer.inference.transcribe import transcribe_many

    if hotwords and not hasattr(recognizer, "with_hotwords"):
        raise RequestError(422, "hotwords: this model is an export, which decodes without hotwords", param="hotwords")
    try:
        if hotwords:
            recognizer = recognizer.with_hotwords(list(hotwords))
        with warnings.catch_warnings(), (recognizer.prompted(prompt) if prompt else nullcontext()):
            warnings.simplefilter("ignore")
            return transcribe_many(recognizer, audios, word_timestamps=words)
    except AudioError as e:
        raise RequestError(400, f"file: {e}", param="file") from None
    except UserError as e:
        raise RequestError(422, str(e)) from None
