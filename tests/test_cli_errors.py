"""Every command answers a user's mistake with one line, `error: …`, naming the file, line or option; a non-zero
exit status and no traceback."""

import pytest
from typer.testing import CliRunner

from asr_transformer.cli import app


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    """A folder of bad inputs: a manifest whose line 2 is not JSON, a package that is not one, a folder where a
    file is expected, a YAML file that does not parse, a missing path."""
    root = tmp_path_factory.mktemp("bad")
    (root / "bad.jsonl").write_text('{"id": "a", "audio": "a.wav", "text": "hi", "duration": 1.0}\nnot json\n')
    (root / "fake.pt").write_bytes(b"not a model package")
    (root / "folder").mkdir()
    (root / "bad.yaml").write_text("model:\n  d_model: [\n")
    return root


# (arguments, what the error line must name); {d} is the folder of bad inputs
CASES = [
    ("prepare folder {d}/missing -o {d}/o", "{d}/missing"),
    ("prepare kaldi {d}/missing -o {d}/o", "{d}/missing"),
    ("prepare fsdd --source {d}/missing -o {d}/o", "{d}/missing"),
    ("prepare kathleen --source {d}/missing -o {d}/o", "{d}/missing"),
    ("prepare commonvoice --source {d}/missing -o {d}/o", "{d}/missing"),
    ("prepare an4 --source {d}/missing -o {d}/o", "{d}/missing"),
    ("prepare librispeech --source {d}/missing -o {d}/o", "{d}/missing"),
    ("prepare synthetic -o {d}/o --text-file {d}/missing.txt", "{d}/missing.txt"),
    ("prepare synthetic -o {d}/o --train-weight letters", "--train-weight"),
    ("prepare folder {d}/folder -o {d}/o --split-by nonsense", "{d}/folder"),
    ("combine {d}/c.jsonl {d}/missing.jsonl", "{d}/missing.jsonl"),
    ("combine {d}/c.jsonl {d}/bad.jsonl", "{d}/bad.jsonl:2"),
    ("resample {d}/bad.jsonl {d}/r.jsonl --rate 8000", "{d}/bad.jsonl:2"),
    ("resample {d}/bad.jsonl {d}/r.jsonl --rate 4", "--rate"),
    ("export-kaldi {d}/missing.jsonl {d}/k", "{d}/missing.jsonl"),
    ("export-kaldi {d}/bad.jsonl {d}/k", "{d}/bad.jsonl:2"),
    ("tokenizer {d}/missing.jsonl -o {d}/t", "{d}/missing.jsonl"),
    ("tokenizer {d}/bad.jsonl -o {d}/t", "{d}/bad.jsonl:2"),
    ("lm {d}/bad.jsonl --tokenizer {d}/folder -o {d}/lm.arpa", "{d}/folder"),
    ("lm {d}/bad.jsonl --tokenizer {d}/folder -o {d}/lm.arpa --order 0", "--order"),
    ("cmvn {d}/missing.jsonl -o {d}/c.json", "{d}/missing.jsonl"),
    ("cmvn {d}/bad.jsonl -o {d}/c.json", "{d}/bad.jsonl:2"),
    ("train --data {d}/missing --exp {d}/e", "--data"),
    ("train --data {d} --exp {d}/e --config {d}/missing.yaml", "--config"),
    ("train --data {d} --exp {d}/e --config {d}/bad.yaml", "{d}/bad.yaml:3"),
    ("train --data {d} --exp {d}/e --set model.no_such_key=1", "no_such_key"),
    ("train --data {d} --exp {d}/e --set model.d_model", "model.d_model"),
    ("average {d}/missing -o {d}/m.pt", "{d}/missing"),
    ("average {d}/folder -o {d}/m.pt --by nonsense", "nonsense"),
    ("decode {d}/missing.pt {d}/bad.jsonl -o {d}/dec", "{d}/missing.pt"),
    ("decode {d}/fake.pt {d}/bad.jsonl -o {d}/dec", "{d}/fake.pt"),
    ("decode {d}/folder {d}/bad.jsonl -o {d}/dec", "{d}/folder"),
    ("decode {d}/fake.pt {d}/missing.jsonl -o {d}/dec", "{d}/missing.jsonl"),
    ("decode {d}/fake.pt {d}/bad.jsonl -o {d}/dec --beam many", "--beam"),
    ("decode {d}/fake.pt {d}/bad.jsonl", "--out"),
    ("package {d}/missing.pt -o {d}/p.pt", "{d}/missing.pt"),
    ("package {d}/fake.pt -o {d}/p.pt", "{d}/fake.pt"),
    ("package {d}/fake.pt -o {d}/p.pt --result test", "--result"),
    ("export {d}/missing.pt -o {d}/x", "{d}/missing.pt"),
    ("export {d}/fake.pt -o {d}/x", "{d}/fake.pt"),
    ("export {d}/fake.pt -o {d}/x --mode sampling", "--mode"),
    ("info {d}/missing.pt", "{d}/missing.pt"),
    ("info {d}/fake.pt", "{d}/fake.pt"),
    ("info {d}/folder", "{d}/folder"),
    ("score {d}/missing", "{d}/missing"),
    ("score {d}/folder --normalizer lowercase", "--normalizer"),
    ("join {d}/missing.jsonl {d}/j.jsonl", "{d}/missing.jsonl"),
    ("join {d}/bad.jsonl {d}/j.jsonl", "{d}/bad.jsonl:2"),
    ("join {d}/bad.jsonl {d}/j.jsonl --min-seconds 20 --max-seconds 10", "--min-seconds"),
    ("transcribe {d}/a.wav --model {d}/missing.pt", "{d}/missing.pt"),
    ("transcribe {d}/a.wav --model {d}/folder", "{d}/folder"),
    ("transcribe {d}/a.wav --model {d}/fake.pt", "{d}/fake.pt"),
    ("transcribe {d}/a.wav --model {d}/fake.pt -f docx", "docx"),
    ("serve --model {d}/missing.pt --port 0", "{d}/missing.pt"),
    ("serve --model {d}/fake.pt --port 0", "{d}/fake.pt"),
    ("plot {d}/missing -o {d}/p.png", "{d}/missing"),
    ("plot {d}/folder -o {d}/p.png", "{d}/folder"),
    ("no-such-command", "no-such-command"),
]


@pytest.mark.parametrize("args, named", CASES, ids=[c[0].split(" {d}")[0] + f" #{i}" for i, c in enumerate(CASES)])
def test_a_mistake_is_one_line_naming_what_is_wrong(bad, args, named):
    result = CliRunner().invoke(app, args.format(d=bad).split(), prog_name="asr")
    assert isinstance(result.exception, SystemExit) and result.exit_code != 0, (result.exception, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert named.format(d=bad) in lines[0]
    assert "Traceback" not in result.output


def test_version_and_help_answer():
    from importlib.metadata import version

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"asr-transformer {version('asr-transformer')}"


def test_every_option_and_argument_has_help():
    import typer

    def commands(group, path=()):
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from commands(command, path + (name,))
            else:
                yield " ".join(path + (name,)), command

    missing = [f"asr {path} {param.name}" for path, command in commands(typer.main.get_command(app))
               for param in command.params if param.name != "help" and not getattr(param, "help", None)]
    assert missing == []


def test_output_options_are_named_alike():
    """Every command that writes a file or folder takes it as -o/--out (or as a positional argument)."""
    import typer

    root = typer.main.get_command(app)
    groups = [root, *[c for c in root.commands.values() if hasattr(c, "commands")]]
    for group in groups:
        for name, command in group.commands.items():
            for param in getattr(command, "params", []):
                if any(o in ("--output-dir", "--output", "--out-dir") for o in param.opts):
                    assert "--out" in param.opts and "-o" in param.opts, f"asr {name}: {param.opts}"
