"""Bad input, tried as a user would hand it over: damaged audio, manifests, configs, option values, damaged
packages, streams and Python API arguments, each through the path a user takes (the command line in process, or
the API). Every outcome is classified:

- clear:        refused in one `error: …` line (exit status ≠ 0), or a UserError naming what is wrong;
- traceback:    any other exception, or a traceback printed;
- silent-wrong: taken (exit 0, or a result) although the input is not valid;
- lost:         a file outside the output folder changed;
- ok:           valid input, handled.

    python bench/bad_inputs.py [--out bench/bad_inputs.json] [--seed 0] [--per-category 40]

Writes the counts per category as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr_transformer.errors import UserError  # noqa: E402

OUTCOMES = ("ok", "clear", "traceback", "silent-wrong", "lost")


def tiny_package(root: Path) -> Path:
    """A random `tiny` model package with character units (what the outcomes need is its code path, not words)."""
    import torch

    from asr_transformer.config import PRESETS, Config, ModelConfig
    from asr_transformer.data.tokenizer import train_tokenizer
    from asr_transformer.model.asr import ASRModel
    from asr_transformer.package import save_package

    tok = train_tokenizer(["one two three", "four five six"] * 5, root / "tok", model_type="char")
    cfg = Config()
    cfg.model = ModelConfig(input_dim=cfg.features.num_mel_bins, vocab_size=tok.vocab_size, **PRESETS["tiny"],
                            streaming=True)
    torch.manual_seed(0)
    save_package(root / "model.pt", cfg, tok, ASRModel(cfg.model).state_dict())
    return root / "model.pt"


def good_audio(rng: random.Random) -> bytes:
    rate = rng.choice([8000, 16000, 22050, 44100])
    t = np.arange(int(rng.uniform(0.2, 1.5) * rate)) / rate
    buffer = io.BytesIO()
    sf.write(buffer, (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), rate,
             format=rng.choice(["WAV", "FLAC", "OGG"]))
    return buffer.getvalue()


def damaged(data: bytes, rng: random.Random) -> bytes:
    """`data` cut short, overwritten, with bytes inserted or dropped; or random bytes."""
    if rng.random() < 0.2:
        return rng.randbytes(rng.randint(0, 300))
    data = bytearray(data)
    for _ in range(rng.randint(1, 5)):
        at = rng.randrange(max(1, len(data)))
        action = rng.choice(["set", "insert", "drop", "cut"])
        if action == "set" and data:
            data[at] = rng.randrange(256)
        elif action == "insert":
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif action == "drop":
            del data[at:at + rng.randint(1, 64)]
        else:
            del data[at:]
    return bytes(data)


def readable(path_or_bytes) -> bool:
    from asr_transformer.data.audio import AudioError, load_audio

    try:
        load_audio(path_or_bytes, allow_silent=True)
        return True
    except AudioError:
        return False


def run_cli(args: list[str], input: bytes | None = None):
    from typer.testing import CliRunner

    from asr_transformer.cli import app

    return CliRunner().invoke(app, args, input=input, prog_name="asr")


def cli_outcome(result, valid: bool) -> str:
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "traceback"
    if "Traceback" in result.output:
        return "traceback"
    if result.exit_code == 0:
        return "ok" if valid else "silent-wrong"
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    return "clear" if errors else "traceback"


def api_outcome(call, valid) -> str:
    """Run `call`; `valid` says whether its input was good (a bool, or a function of the result)."""
    try:
        result = call()
    except UserError:
        return "clear"
    except Exception:
        traceback.print_exc(limit=2, file=sys.stderr)
        return "traceback"
    good = valid(result) if callable(valid) else valid
    return "ok" if good else "silent-wrong"


def snapshot(folder: Path, skip: str) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if skip not in p.parts}


def audio_files(model: Path, work: Path, rng: random.Random, n: int) -> list[str]:
    """Damaged audio files through `asr transcribe -o out`: exit 1 exactly when one is unreadable."""
    outcomes = []
    for i in range(n):
        folder = work / f"audio{i}"
        folder.mkdir()
        files = []
        for j in range(rng.randint(1, 3)):
            (folder / f"in{j}.wav").write_bytes(damaged(good_audio(rng), rng) if rng.random() < 0.8 else good_audio(rng))
            files.append(str(folder / f"in{j}.wav"))
        before = snapshot(folder, "out")
        result = run_cli(["transcribe", *files, "-m", str(model), "-o", str(folder / "out"), "-f", "json",
                          "--threads", "1", "--mode", "ctc"])
        outcome = cli_outcome(result, all(readable(f) for f in files))
        outcomes.append("lost" if snapshot(folder, "out") != before else outcome)
    return outcomes


def manifests(model: Path, work: Path, rng: random.Random, n: int) -> list[str]:
    """Manifests with damaged lines through `asr decode`: exit 0 only for a manifest whose every line is good."""
    from asr_transformer.data.manifest import read_manifest

    wav = work / "good.wav"
    wav.write_bytes(good_audio(random.Random(1)))
    lines = ['{"id": "a", "audio": "%s", "duration": 1.0, "text": "one"}' % wav,
             '{"id": "b", "audio": "%s", "text": "two"}' % wav, '{"id": "c", "audio": "missing.wav", "text": "x"}',
             '{"id": "a", "audio": 3, "text": "hi"}', "not json", "[1, 2]", "{}", '{"id": "d", "text": null}',
             '{"audio_filepath": "%s", "duration": "long", "text": "t"}' % wav, "", '{"format": "asr-manifest"}']
    outcomes = []
    for i in range(n):
        path = work / f"m{i}.jsonl"
        path.write_text("\n".join(rng.choice(lines) for _ in range(rng.randint(1, 4))), encoding="utf-8")
        try:
            valid = all(readable(u.audio) for u in read_manifest(path)) and len(read_manifest(path)) > 0
        except UserError:
            valid = False
        result = run_cli(["decode", str(model), str(path), "-o", str(work / f"dm{i}"), "--threads", "1",
                          "--mode", "ctc"])
        outcomes.append(cli_outcome(result, valid))
    return outcomes


def configs(rng: random.Random, n: int) -> list[str]:
    """`--set` overrides of every kind through the config loader: a checked config, or a ConfigError."""
    from asr_transformer.config import load_config, validate

    keys = ["model.d_model", "model.heads", "model.block", "model.conv_kernel", "train.lr", "train.max_epochs",
            "decode.beam", "decode.ctc_weight", "decode.mode", "data.max_duration", "augment.speed_factors",
            "model.nonsense", "nothing", "features.num_mel_bins", "train.precision"]
    values = ["0", "-1", "7", "256", "1e-3", "abc", "[1, 2]", "true", "null", "{a: 1}", "conformer", "1.5", ""]
    outcomes = []
    for _ in range(n):
        items = [f"{rng.choice(keys)}={rng.choice(values)}" for _ in range(rng.randint(1, 3))]

        def load():
            cfg = load_config(None, items)
            validate(cfg)
            return cfg
        outcomes.append(api_outcome(load, True))
    return outcomes


def options(model: Path, work: Path) -> list[str]:
    """Every decoding option out of range, and --threads -1, on decode, transcribe and package."""
    wav = work / "good.wav"
    manifest = work / "one.jsonl"
    manifest.write_text('{"id": "a", "audio": "%s", "text": "one"}\n' % wav)
    bad = [["--beam", "0"], ["--ctc-weight", "2"], ["--lm-weight", "-1"], ["--word-lm-weight", "-0.5"],
           ["--nbest", "0"], ["--batch-size", "0"], ["--max-len-ratio", "0"], ["--maskctc-iterations", "0"],
           ["--maskctc-threshold", "1.5"], ["--ctc-window", "-1"], ["--beam-threshold", "-1"], ["--end-detect", "-1"],
           ["--split-seconds", "-1"], ["--chunk-ms", "-40"], ["--left-chunks", "-2"], ["--hotword-score", "-1"],
           ["--numbers", "roman"], ["--mode", "fast"], ["--threads", "-1"], ["--device", "tpu"],
           ["--precision", "fp8"]]
    outcomes = []
    for option in bad:
        for command in (["decode", str(model), str(manifest), "-o", str(work / "o")],
                        ["transcribe", str(wav), "-m", str(model)],
                        ["package", str(model), "-o", str(work / "p.pt")]):
            if command[0] == "package" and option[0] in ("--threads", "--device", "--precision", "--nbest"):
                continue  # not options of package (nbest is: it stays)
            if command[0] == "transcribe" and option[0] == "--nbest":
                continue
            outcomes.append(cli_outcome(run_cli(command + option), False))
    return outcomes


def packages(model: Path, work: Path, rng: random.Random, n: int) -> list[str]:
    """Damaged packages (bytes cut, flipped, dropped) through `asr transcribe`."""
    wav = work / "good.wav"
    data = model.read_bytes()
    outcomes = []
    for i in range(n):
        path = work / f"pkg{i}.pt"
        path.write_bytes(damaged(data, rng))
        outcomes.append(cli_outcome(run_cli(["transcribe", str(wav), "-m", str(path), "--threads", "1"]),
                                    path.read_bytes() == data))
    return outcomes


def streams(model: Path, rng: random.Random, n: int) -> list[str]:
    """Damaged audio streamed (stream_file) and arrays fed to a stream."""
    from asr_transformer.inference.recognizer import Recognizer
    from asr_transformer.inference.streaming import StreamingRecognizer, stream_file

    rec = Recognizer(model, device="cpu", threads=1, mode="ctc")
    outcomes = []
    for _ in range(n):
        data = damaged(good_audio(rng), rng)
        outcomes.append(api_outcome(lambda: list(stream_file(rec, data, 160)), readable(data)))
        array = random_array(rng)  # an empty block is valid here: nothing arrived yet
        valid = good_array(array) or isinstance(array, np.ndarray) and array.size == 0
        outcomes.append(api_outcome(lambda: StreamingRecognizer(rec, 160).feed(array), valid))
    return outcomes


def random_array(rng: random.Random):
    kind = rng.choice(["nan", "inf", "loud", "int", "3d", "empty", "good", "stereo", "list", "none", "complex"])
    x = np.random.default_rng(rng.randrange(1 << 30)).standard_normal(rng.randint(1, 4000)).astype(np.float32) * 0.1
    return {"nan": np.where(x > 0.1, np.nan, x), "inf": np.where(x > 0.1, np.inf, x), "loud": x * 1e4,
            "int": (x * 3e4).astype(np.int16), "3d": x[: len(x) // 4 * 4].reshape(-1, 2, 2), "empty": x[:0],
            "good": x, "stereo": np.stack([x, x], 1), "list": list(x[:10]), "none": None,
            "complex": x.astype(complex)}[kind]


def good_array(array) -> bool:
    return (isinstance(array, np.ndarray) and array.dtype.kind == "f" and array.size > 0 and array.ndim in (1, 2)
            and np.isfinite(array).all() and np.abs(array).max() <= 100)


def api(model: Path, rng: random.Random, n: int) -> list[str]:
    """Arrays and other arguments to Recognizer.recognize_arrays and Recognizer.transcribe."""
    from asr_transformer.inference.recognizer import Recognizer

    rec = Recognizer(model, device="cpu", threads=1, mode="ctc")
    outcomes = []
    for _ in range(n):
        array = random_array(rng)
        outcomes.append(api_outcome(lambda: rec.recognize_arrays([array]), good_array(array)))
        outcomes.append(api_outcome(lambda: rec.transcribe(array), good_array(array)))
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(Path(__file__).with_name("bad_inputs.json")))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-category", type=int, default=40)
    args = parser.parse_args()
    import warnings

    warnings.simplefilter("ignore")  # the no-speech and streaming notices are not what is counted here
    rng, n = random.Random(args.seed), args.per_category
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = tiny_package(work)
        (work / "good.wav").write_bytes(good_audio(random.Random(1)))
        results = {"audio files": audio_files(model, work, rng, n), "manifests": manifests(model, work, rng, n),
                   "configs": configs(rng, n), "options": options(model, work),
                   "packages": packages(model, work, rng, n), "streams": streams(model, rng, n),
                   "Python API": api(model, rng, n)}
    table = {name: {o: outcomes.count(o) for o in OUTCOMES} | {"tried": len(outcomes)}
             for name, outcomes in results.items()}
    table["all"] = {o: sum(row[o] for row in table.values()) for o in (*OUTCOMES, "tried")}
    report = {"command": "python bench/bad_inputs.py --seed %d --per-category %d" % (args.seed, n), "counts": table}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    for name, row in table.items():
        print(f"{name:12s} " + "  ".join(f"{k} {row[k]}" for k in ("tried", *OUTCOMES)))


if __name__ == "__main__":
    main()
