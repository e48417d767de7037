"""`asr serve --workers N`: N processes that each load the models and serve the same socket.

uvicorn starts each worker in a fresh process and builds its application there by calling `app_from_environment`,
which reads what `asr serve` put in $ASR_SERVE_SETTINGS (JSON: the models by name and path, the device, the
threads of each worker and the `ServeConfig`). The workers share nothing but the listening socket: each holds its
own copy of every model, batches its own requests and has its own /metrics. One worker (the default) is the most
a 2-core machine wants; on more cores, N workers of cores/N threads each serve more requests at once than one
worker of every core, at N times the memory.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from asr_transformer.server.app import ServeConfig, create_app

SETTINGS = "ASR_SERVE_SETTINGS"


def settings_json(models: dict[str, str], device: str, threads: int, config: ServeConfig) -> str:
    """What each worker needs to build its application, as $ASR_SERVE_SETTINGS holds it."""
    return json.dumps({"models": models, "device": device, "threads": threads, "config": asdict(config)})


def load_model(path: str, device: str, threads: int):
    """A recognizer for a package, or for an ONNX export folder (onnxruntime, no PyTorch)."""
    from asr_transformer.inference.exported import ExportedRecognizer, is_exported

    if is_exported(Path(path)):
        return ExportedRecognizer(path, threads)
    from asr_transformer.inference.recognizer import Recognizer

    return Recognizer(path, device=device, threads=threads)


def app_from_environment():
    """uvicorn's application factory in each worker process: the models and limits from $ASR_SERVE_SETTINGS."""
    settings = json.loads(os.environ[SETTINGS])
    models = {name: load_model(path, settings["device"], settings["threads"])
              for name, path in settings["models"].items()}
    return create_app(models, ServeConfig(**settings["config"]))
