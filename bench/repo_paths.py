"""Paths as the bench JSONs name them: relative to the repository when inside it, so no machine's folders appear."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def in_repository(path) -> str:
    """`path` relative to the repository root when it is inside it, else its file name; a word on a command line
    that is no path (an option, a number, a NAME=VALUE setting, a name such as "silero": no "/" and no file suffix)
    stays as it is."""
    text = str(path)
    if (text.startswith("-") or ("/" not in text and not Path(text).suffix) or text.replace(".", "", 1).isdigit()
            or text.split("=", 1)[0].isidentifier() and "=" in text):
        return text
    full = Path(path).resolve()
    return full.relative_to(ROOT).as_posix() if full.is_relative_to(ROOT) else full.name


def command_line(script: str, argv) -> str:
    """How `bench/<script>` was run, its paths as `in_repository` gives them."""
    return f"python bench/{script} " + " ".join(in_repository(a) for a in argv)


def report(result: dict, json_path=None) -> dict:
    """Print a bench's result as one JSON line and write it, indented, to `json_path` (when given) → the result."""
    import json

    print(json.dumps(result))
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=1) + "\n")
    return result
