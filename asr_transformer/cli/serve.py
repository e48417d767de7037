"""`asr serve`: models behind OpenAI's transcription API and a live-caption WebSocket (asr_transformer/server)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from asr_transformer.cli.app import DEVICE, THREADS, app, fail
from asr_transformer.cli.options import recognizer


@app.command()
def serve(
    models: List[str] = typer.Option(..., "--model", "-m", help="A model package or export to serve, as NAME=PATH "
                                     "or PATH (named after its file), or a model's name (whisper-tiny.en, …); "
                                     "repeatable, the first is the default."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, min=0, max=65535, help="Port to listen on."),
    api_key: Optional[str] = typer.Option(None, envvar="ASR_API_KEY", help="Require 'Authorization: Bearer KEY' "
                                          "(also from $ASR_API_KEY)."),
    max_upload_mb: float = typer.Option(25.0, min=0.001, help="Largest upload, in MB."),
    max_audio_seconds: float = typer.Option(600.0, min=0.1, help="Longest audio a request may send."),
    max_queue: int = typer.Option(64, min=1, help="Requests that may wait for a model; more are answered 429."),
    batch_wait_ms: float = typer.Option(10.0, min=0.0, help="How long a model gathers requests to decode together."),
    max_batch_requests: int = typer.Option(16, min=1, help="Requests decoded together at most."),
    max_streams: int = typer.Option(16, min=1, help="Live streams (WebSocket /v1/stream) open at once."),
    stream_idle_seconds: float = typer.Option(30.0, min=0.1, help="Close a live stream that sends nothing this long."),
    workers: int = typer.Option(1, min=1, help="Processes serving the same port, each with its own copy of the "
                                "models (and, with --threads 0, an equal share of the cores)."),
    device: str = DEVICE,
    threads: int = THREADS,
):
    """Serve models over HTTP with OpenAI's transcription API (POST /v1/audio/transcriptions), so the openai client
    and the tools built on it can use them; live captions over a WebSocket (/v1/stream); also GET /v1/models,
    /health and /metrics (Prometheus). Needs the serve extra: pip install 'asr-transformer[serve]'."""
    try:
        import uvicorn

        from asr_transformer.server.app import ServeConfig, create_app
    except ImportError as e:
        fail(f"asr serve needs the serve extra ({e.name} is missing): pip install 'asr-transformer[serve]'")
    loaded, paths = {}, {}
    for item in models:
        name, _, path = item.rpartition("=")
        if not name:  # a model's name (whisper-tiny.en), a file's stem (of exp/x/model.pt: x), an export folder's
            from asr_transformer.hub import is_name

            name = path if is_name(path) else Path(path).parent.name if Path(path).stem == "model" else Path(path).stem
        if name in loaded:
            fail(f"--model {item}: the name '{name}' is taken; give NAME=PATH")
        loaded[name] = recognizer(Path(path), device, threads, "fp32", None, None, False)  # checked: one-line errors
        paths[name] = str(Path(loaded[name].path).resolve())  # a name's: its package in the cache
    config = ServeConfig(api_key=api_key, max_upload_mb=max_upload_mb, max_audio_seconds=max_audio_seconds,
                         max_queue=max_queue, batch_wait_ms=batch_wait_ms, max_batch_requests=max_batch_requests,
                         max_streams=max_streams, stream_idle_seconds=stream_idle_seconds)
    typer.echo(f"serving {', '.join(loaded)} on http://{host}:{port} (OpenAI base_url http://{host}:{port}/v1)",
               err=True)
    if workers == 1:
        uvicorn.run(create_app(loaded, config), host=host, port=port, log_level="warning", timeout_graceful_shutdown=60)
        return
    import os

    from asr_transformer.server.workers import SETTINGS, settings_json
    from asr_transformer.threads import cpu_threads

    loaded.clear()  # each worker loads its own copy
    share = threads or max(1, cpu_threads(0) // workers)
    os.environ[SETTINGS] = settings_json(paths, device, share, config)
    typer.echo(f"{workers} workers, {share} thread(s) each", err=True)
    uvicorn.run("asr_transformer.server.workers:app_from_environment", factory=True, workers=workers, host=host,
                port=port, log_level="warning", timeout_graceful_shutdown=60)
