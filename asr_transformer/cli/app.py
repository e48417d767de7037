"""The `asr` Typer application: its groups, the one-line error reporting every command shares, and the options
several commands take."""

from __future__ import annotations

import sys
import warnings
from typing import NoReturn

import typer
from typer.core import TyperGroup

try:  # typer carries its own copy of click since 0.22
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover
    from click import exceptions as click_errors

from asr_transformer.errors import UserError


class OneLineErrors(TyperGroup):
    """The `asr` group: every user mistake (a bad option, a missing or malformed file) is one line on stderr,
    `error: …`, and a non-zero exit status (2 for options, 1 for files and values); no traceback."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        warnings.showwarning = _show_warning
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = code if isinstance(code, int) else 0
        except click_errors.NoArgsIsHelpError as e:
            e.show()
            code = 0
        except click_errors.UsageError as e:
            command = e.ctx.command_path if e.ctx else "asr"
            code = print_error(f"{command}: {e.format_message()} (see `{command} --help`)", e.exit_code)
        except click_errors.ClickException as e:
            code = print_error(e.format_message(), e.exit_code)
        except typer.Abort:
            code = print_error("interrupted", 130)
        except UserError as e:
            code = print_error(str(e), 1)
        except OSError as e:  # a file that cannot be read or written: its name and the reason
            code = print_error(f"{e.filename}: {e.strerror}" if e.filename else str(e), 1)
        if not standalone_mode:
            return code
        sys.exit(code)


_python_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """The toolkit's own warnings (a UserWarning of asr_transformer) as one line, `warning: …`; others as Python
    shows them."""
    if issubclass(category, UserWarning) and category.__module__.startswith("asr_transformer"):
        typer.secho(f"warning: {message}", fg="yellow", err=True)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


def print_error(message: str, code: int) -> int:
    typer.secho(f"error: {message}", fg="red", err=True)
    return code


def fail(message: str) -> NoReturn:
    """Stop the command with `error: <message>` on one line (OneLineErrors prints it)."""
    raise UserError(message)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"asr-transformer {version('asr-transformer')}")
        raise typer.Exit()


app = typer.Typer(
    cls=OneLineErrors,
    help="asr-transformer: train a Transformer speech recognizer on your data and transcribe audio.\n\n"
    "Pipeline: prepare → tokenizer → train → average → decode → score; transcribe any audio file.\n\n"
    "On Linux `asr` restarts itself once with glibc malloc tunables that reuse freed memory on huge pages "
    "(faster on CPUs); ASR_MALLOC_TUNING=0 turns this off.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False,
)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")):
    """asr-transformer: train a Transformer speech recognizer on your data and transcribe audio."""


prepare_app = typer.Typer(help="Import a corpus into train/dev/test JSONL manifests.", no_args_is_help=True)
app.add_typer(prepare_app, name="prepare")
import_app = typer.Typer(help="Import a pretrained model from another toolkit as a model package.",
                         no_args_is_help=True)

OUT = typer.Option(..., "--out", "-o", help="Output directory for the manifests.")
THREADS = typer.Option(0, help="CPU threads for torch (0: OMP_NUM_THREADS when set, else all cores).")
DEVICE = typer.Option("auto", help="cpu, cuda, cuda:N or auto.")
PRECISION = typer.Option("fp32", help="fp32, bf16 (the encoder in bf16: about 2× faster on CPUs with AMX and on "
                         "GPUs, slower than fp32 on CPUs without AMX), fp16 (CUDA only), int8 (the Linear layers "
                         "quantized to int8, CPU only) or auto (bf16 where it is fast).")
