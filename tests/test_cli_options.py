"""The decoding options are declared once (cli/options.py): every DecodeConfig field is an option of `asr decode`,
`asr transcribe` and `asr package`, a value out of range gets the same one-line error from each, and a package
can store every field."""

from __future__ import annotations

from dataclasses import fields

import pytest
import typer
from typer.testing import CliRunner

from asr_transformer.cli import app
from asr_transformer.config import VAD_OPTIONS, DecodeConfig

COMMANDS = ("decode", "transcribe", "package")
# a transcript is the best hypothesis of each segment; a manifest's utterances are decoded whole, without a detector
NOT_IN = {"transcribe": {"nbest"}, "decode": set(VAD_OPTIONS)}


def options_of(command: str) -> set[str]:
    click_command = typer.main.get_command(app).commands[command]
    return {param.name for param in click_command.params}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_decoding_field_is_an_option(command):
    missing = {f.name for f in fields(DecodeConfig)} - options_of(command) - NOT_IN.get(command, set())
    assert not missing, f"asr {command} lacks {sorted(missing)}"


def test_transcribe_leaves_out_only_nbest():
    assert {f.name for f in fields(DecodeConfig)} - options_of("transcribe") == NOT_IN["transcribe"]


def command_line(command: str, tmp_path, option: list[str]) -> list[str]:
    """`asr COMMAND` with a model that does not exist: the options are checked before it is looked for."""
    manifest = tmp_path / "test.jsonl"
    manifest.write_text("")
    model = str(tmp_path / "missing.pt")
    return {"decode": ["decode", model, str(manifest), "-o", str(tmp_path / "out")],
            "transcribe": ["transcribe", "a.wav", "-m", model],
            "package": ["package", model, "-o", str(tmp_path / "p.pt")]}[command] + option


BAD = [
    (["--ctc-weight", "1.5"], "--ctc-weight 1.5: must be in [0, 1]"),
    (["--beam", "0"], "--beam 0: must be ≥ 1"),
    (["--lm-weight", "-1"], "--lm-weight -1.0: must be ≥ 0"),
    (["--end-detect", "-2"], "--end-detect -2.0: must be ≥ 0 (0: off)"),
    (["--left-chunks", "-3"], "--left-chunks -3: must be ≥ -1"),
    (["--numbers", "roman"], "--numbers roman: must be digits, words or ''"),
    (["--mode", "fast"], "--mode fast: unknown decoding mode 'fast'"),
    (["--hotword-score", "-1"], "--hotword-score -1.0: must be ≥ 0"),
]
TRANSCRIBE_BAD = [  # the voice detector's options: transcribe's and package's (decode reads utterances whole)
    (["--vad", "loud"], "--vad loud: must be one of auto, silero, energy, none"),
    (["--vad-threshold", "1.5"], "--vad-threshold 1.5: must be in (0, 1)"),
    (["--min-silence", "0"], "--min-silence 0.0: must be > 0 seconds"),
]


@pytest.mark.parametrize("option, message", BAD, ids=[b[0][0] for b in BAD])
def test_a_value_out_of_range_gets_the_same_error_everywhere(tmp_path, option, message):
    errors = set()
    for command in COMMANDS:
        result = CliRunner().invoke(app, command_line(command, tmp_path, option), prog_name="asr")
        assert result.exit_code == 1, (command, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), (command, result.output)
        errors.add(lines[0])
    assert len(errors) == 1, errors


@pytest.mark.parametrize("option, message", TRANSCRIBE_BAD, ids=[b[0][0] for b in TRANSCRIBE_BAD])
def test_a_voice_detector_option_out_of_range_gets_one_line(tmp_path, option, message):
    for command in ("transcribe", "package"):
        result = CliRunner().invoke(app, command_line(command, tmp_path, option), prog_name="asr")
        lines = result.output.strip().splitlines()
        assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith(f"error: {message}"), result.output


def test_only_decode_takes_several_modes(tmp_path):
    result = CliRunner().invoke(app, command_line("package", tmp_path, ["--mode", "beam,ctc"]), prog_name="asr")
    assert result.exit_code == 1 and "--mode beam,ctc: give one mode" in result.output


def test_a_package_stores_every_field(tiny_package, tmp_path):
    """Each field set by `asr package` (values other than the defaults) is the package's decoding default after."""
    from asr_transformer.config import from_dict
    from asr_transformer.package import read_package

    values = dict(mode="beam", beam=3, ctc_weight=0.4, length_penalty=0.5, max_len_ratio=0.8, maskctc_iterations=3,
                  maskctc_threshold=0.8, lm_weight=0.2, word_lm_weight=0.1, nbest=2, batch_size=4, ctc_window=12.0,
                  beam_threshold=8.0, end_detect=5.0, split_seconds=6.0, chunk_ms=0, left_chunks=2,
                  hotword_score=1.5, numbers="words", temperature=0.1, temperature_increment=0.3,
                  logprob_threshold=-0.8, compression_ratio_threshold=2.0, vad="energy", vad_threshold=0.6,
                  min_speech=0.1, min_silence=0.5, speech_pad=0.3, no_speech_threshold=0.5, max_window=12.0,
                  ctc_confidence_threshold=0.6,
                  condition_on_previous_text=True)
    assert set(values) | {"hotwords", "language", "initial_prompt"} == {f.name for f in fields(DecodeConfig)}
    args = ["package", str(tiny_package / "model.pt"), "-o", str(tmp_path / "p.pt"), "--hotword", "one two"]
    for name, value in values.items():
        args += ["--" + name.replace("_", "-")] + ([] if isinstance(value, bool) else [str(value)])  # a switch
    result = CliRunner().invoke(app, args, prog_name="asr")
    assert result.exit_code == 0, result.output
    stored = from_dict(read_package(tmp_path / "p.pt")["config"]).decode
    assert {name: getattr(stored, name) for name in values} == values
    assert stored.hotwords == ["one two"]


def test_a_package_refuses_a_prompt_its_model_cannot_read(tiny_package, tmp_path):
    for option in (["--initial-prompt", "one two"], ["--language", "de"]):
        result = CliRunner().invoke(app, ["package", str(tiny_package / "model.pt"), "-o", str(tmp_path / "p.pt"),
                                          *option], prog_name="asr")
        assert result.exit_code == 1 and "only Whisper packages take them" in result.output, result.output
        assert not (tmp_path / "p.pt").exists()
