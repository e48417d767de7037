"""The `asr` command line: thin wrappers over library functions, one module per group of commands.

Heavy modules (torch and everything that imports it) are imported inside the commands, so `asr --help` answers
at once. app.py: the application and its one-line errors; options.py: the decoding options, declared once;
output.py: what the commands print; data.py, training.py, models.py, transcribe.py, serve.py: the commands."""

from asr_transformer.cli import data, training, models, transcribe, serve  # noqa: F401, I001 (in help order)
from asr_transformer.cli.app import app, import_app

app.add_typer(import_app, name="import")

__all__ = ["app"]
