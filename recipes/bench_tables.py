"""RESULTS.md's benchmark tables, from what the scripts in bench/ wrote (bench/*.json): nothing typed by hand.

`benchmarks_section(bench)` is the "Benchmarks" section that recipes/results.py appends; each `*_table` reads one
script's JSON (None: the script has not run, and its table is left out).
"""

from __future__ import annotations

import json
import platform
import re
from pathlib import Path


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def short_cpu_name(name: str | None = None) -> str:
    """The CPU's name (this machine's by default) without trademarks and filler: "Intel Xeon", "AMD EPYC 7B13"."""
    name = re.sub(r"\((R|TM|tm)\)|\b(CPU|Processor)\b|@.*", " ", name or cpu_name())
    return " ".join(name.split()) or "unknown CPU"


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def benchmarks_section(bench: Path) -> str:
    """The n-gram LM's build and load costs and the LM search's RTF on long audio, from bench/*.json."""
    lines = ["## Benchmarks", "", f"Written by the scripts in `{bench.name}/` (each file's docstring says what it measures); "
             "the CPU and the load on it are theirs, so compare the rows of one table, not across tables."]
    build, load = _load(bench / "lm_build.json"), _load(bench / "lm_load.json")
    if build and load:
        lines += ["", "### Word n-gram LM (the Kathleen recipe's 4-gram)", "",
                  f"`python bench/lm_build.py`: `{build['command']}` (in {build['cwd']}) builds "
                  f"{sum(build['ngrams']):,} n-grams from {build['sentences']:,} sentences, a "
                  f"{build['arpa_mb']:.0f} MB ARPA file, in {build['wall_s']:.1f} s with a peak of "
                  f"{build['peak_rss_mb']:.0f} MB ({build['cpus']} CPUs"
                  + (", byte-identical to the recipe's" if build.get("identical") else "") + ").",
                  "", f"`python bench/lm_load.py` ({load['queries']:,} random lookups; the two readers' log-probabilities "
                  f"{'are identical' if load['identical_log_probs'] else 'DIFFER'}):", "",
                  "| reader | load s | memory after load MB | after the lookups MB | lookups / s |", "|---|---|---|---|---|",
                  f"| ARPA text into Python dicts | {load['old']['seconds']:.2f} | {load['old']['rss_mb']:.0f} | "
                  f"{load['old']['rss_after_lookups_mb']:.0f} | {load['old']['lookups_per_s']:,.0f} |",
                  f"| binary, memory-mapped ({load['binary_mb']:.0f} MB file, made once from the ARPA file in "
                  f"{load['convert']['seconds']:.1f} s) | {load['load']['seconds']:.3f} | {load['load']['rss_mb']:.0f} | "
                  f"{load['load']['rss_after_lookups_mb']:.0f} | {load['load']['lookups_per_s']:,.0f} |"]
    search = _load(bench / "bounded_search.json")
    if search:
        names = {"in-domain": "in-domain (Kathleen dev utterances)", "long": "long (dev utterances joined)",
                 "random": "random speech", "other": "other speakers (FSDD digits)"}
        rows = {(r["set"], r["setting"]): r for r in search["rows"]}
        lines += ["", "### LM search on long and unfamiliar audio", "",
                  f"`nice -n {search['nice']} python bench/bounded_search.py --threads {search['threads']} --repeats "
                  f"{search['repeats']}`: `{search['model']}`, joint decoding with its word LM (beam "
                  f"{search['decoding']['beam']}), each item alone; bounds off = every CTC frame, no end detection, "
                  f"no split; on = the defaults (CTC window {search['on']['ctc_window']:g} frames, end detection "
                  f"{search['on']['end_detect']:g}, pieces of at most {search['on']['split_seconds']:g} s). "
                  f"RTF median of the repeats, {short_cpu_name(search['cpu'])}.", "",
                  "| audio | seconds | RTF bounds off | RTF on | on ÷ in-domain | CTC terms per audio second off → on |",
                  "|---|---|---|---|---|---|"]
        for name, label in names.items():
            off, on = rows.get((name, "off")), rows.get((name, "on"))
            if off and on:
                lines.append(f"| {label} | {on['audio_seconds']:.1f} | {off['rtf']:.3f} | {on['rtf']:.3f} | "
                             f"{on['rtf_vs_in_domain']:.2f} | {off['per_audio_second']['ctc_terms']:,.0f} → "
                             f"{on['per_audio_second']['ctc_terms']:,.0f} |")
    lines += hotwords_table([_load(path) for path in sorted(bench.glob("hotwords_*.json"))])
    lines += gpu_table(_load(bench / "gpu_check.json"))
    lines += loader_table(_load(bench / "loader.json"), _load(bench / "train_speed.json"), _load(bench / "gpu_check.json"))
    lines += serve_table([_load(path) for path in sorted(bench.glob("serve*.json"))])
    lines += export_table([_load(path) for path in sorted(bench.glob("inference_*.json"))])
    lines += whisper_memory_table(_load(bench / "whisper_memory.json"))
    lines += word_times_table(_load(bench / "word_times.json"))
    lines += pause_edges_table(_load(bench / "pause_edges.json"))
    lines += longform_tables([_load(path) for path in sorted(bench.glob("longform*.json"))])
    return "\n".join(lines) + "\n"


def word_times_table(run: dict | None) -> list[str]:
    """Word times by the decoder's attention (DTW) against the CTC alignment, from `python bench/word_times.py`."""
    if not run:
        return []
    return ["", "### Word times without a CTC head", "",
            f"`{run['command']}`: each utterance's words timed by the decoder's cross-attention (dynamic time warping, "
            "as Whisper packages are timed) and by CTC forced alignment, on a model that has both; differences in "
            f"seconds (bias: attention − CTC); {short_cpu_name(run['cpu'])}, {run['threads']} threads.", "",
            "| model | set | words | start: mean, median, bias | end: mean, median, bias | both within 0.1 s % "
            "| within 0.2 s % |", "|---|---|---|---|---|---|---|",
            f"| `{run['model']}` | `{run['manifest']}` ({run['utterances']}) | {run['words']} | {run['start_mean']:.3f}, "
            f"{run['start_median']:.3f}, {run['start_bias']:+.3f} | {run['end_mean']:.3f}, {run['end_median']:.3f}, "
            f"{run['end_bias']:+.3f} | {run['within_0.1']:.1f} | {run['within_0.2']:.1f} |"]


def pause_edges_table(run: dict | None) -> list[str]:
    """Word times at pauses inside a Whisper window, from `python bench/pause_edges.py` (bench/pause_edges.json)."""
    if not run:
        return []
    return ["", "### Word times at pauses", "",
            f"`{run['command']}`: {run['recordings']} recordings joined in order into {run['files']} files with "
            f"{run['pause']:g}-s pauses, transcribed with word times; each recording's first word's start against its "
            "speech onset and its last word's end against its offset (frames within 35 dB of its loudest); seconds; "
            f"{short_cpu_name(run['cpu'])}, {run['threads']} threads.", "",
            "| model | edge | median error | bias | within 0.2 s % | within 0.5 s % |", "|---|---|---|---|---|---|"] + [
            f"| `{run['model']}` | {label} | {run[f'{key}_median']:.3f} | {run[f'{key}_bias']:+.3f} | "
            f"{run[f'{key}_within_0.2']:.1f} | {run[f'{key}_within_0.5']:.1f} |"
            for key, label in (("first_start", "first word's start"), ("last_end", "last word's end"))]


def longform_tables(runs: list[dict]) -> list[str]:
    """Long recordings with pauses and non-speech, by voice detector and window, from `python bench/longform.py`
    (bench/longform*.json): a table per run."""
    lines = ["", "### Long recordings: voice detectors"] if runs else []
    for run in runs:
        alone, row0 = run.get("one_by_one"), run["rows"][0]
        repeats = run.get("repeats", 1)
        placed = (f" ({run['utterances'] // repeats} placed {repeats} times, each time with other pauses, gains and "
                  "inserts)" if repeats > 1 else "")
        lines += ["", f"`{run['command']}`: {run['utterances']} test utterances{placed} joined in order into "
                  f"{run['recordings']} recordings ({run['minutes']:g} minutes in all) with pauses, level changes of "
                  f"−12 to +6 dB, a DC offset and {run['inserts']} non-speech inserts of 2–6 s at speech level "
                  f"({run['sounds']} alarm, bell, phone and signal sounds from Debian's sound-theme-freedesktop, and "
                  "generated white and brown noise), transcribed with word times; and a recording of "
                  f"{row0.get('non_speech_minutes', 0):g} minutes of such pauses and inserts alone."
                  + (f" One by one: the same utterances decoded alone, WER {alone['wer_toolkit']:.2f} % (CER "
                     f"{alone['cer_toolkit']:.2f}, Whisper's normalizer {alone['wer_whisper']:.2f})." if alone else "")
                  + " Invented: words written inside an insert (and "
                  "per hour of the recordings); non-speech: words written for the recording without speech; deleted "
                  "and inserted: the alignment's counts (toolkit normalizer) of "
                  f"{row0['reference_words']} reference words; edges: the median distance from each utterance's "
                  "speech onset (offset) to the nearest segment start (end) of the detector; windows: how much speech "
                  "a Whisper window holds (segments: a model with a CTC head reads each segment alone); peak: the "
                  f"process's resident memory; {short_cpu_name(run['cpu'])}, {run['threads']} threads."
                  + (" Decoding options beside the package's: " + ", ".join(f"`{k}={v}`" for k, v in
                                                                          run["options"].items()) + "."
                     if run.get("options") else ""), "",
                  "| model | detector | windows | WER % | CER % | WER % (Whisper's normalizer) | invented words (per "
                  "hour) | non-speech words | deleted | inserted | edges s (start, end) | RTF | peak MB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in run["rows"]:
            window = "segments" if row["windows"] is None else (f"≤ {row['windows']:g} s" if row["windows"]
                                                                else "whole (30 s)")
            edges = (f"{row['start_error_median']:.2f}, {row['end_error_median']:.2f}"
                     if "start_error_median" in row else "-")
            lines.append(f"| `{run['model']}` | {row['vad']} | {window} | {row['wer_toolkit']:.2f} | "
                         f"{row['cer_toolkit']:.2f} | {row['wer_whisper']:.2f} | {row['invented_words']} "
                         f"({row['invented_per_hour']:g}) | {row.get('non_speech_words', '-')} | "
                         f"{row['deleted_toolkit']} | {row['inserted_toolkit']} | {edges} | {row['rtf']:.3f} | "
                         f"{row['peak_mb']:,} |")
    return lines


def whisper_memory_table(run: dict | None) -> list[str]:
    """Peak memory and time of `asr transcribe` with a Whisper package, by input length and batch size, and the
    sizes of the files a Whisper user keeps (`python bench/whisper_memory.py`, bench/whisper_memory.json)."""
    if not run:
        return []
    lines = ["", "### Whisper: memory and file sizes", "",
             f"`{run['command']}`: `asr transcribe` of other speakers' English in a fresh process each (peak "
             f"resident memory); {short_cpu_name(run['cpu'])}, {run['threads']} threads. Batch: 30-s windows decoded "
             "at once (`asr import whisper` now sets 2; it was 16).", "",
             "| input | batch | peak memory MB | seconds |", "|---|---|---|---|"]
    for row in run["runs"]:
        lines.append(f"| {row['input_seconds']} s | {row['batch_size']} | {row['peak_mb']:,} | {row['wall_seconds']:.1f} |")
    lines += ["", "| file | MB |", "|---|---|"]
    lines += [f"| `{name}` | {size:,.1f} |" for name, size in run["sizes_mb"].items()]
    return lines


def export_table(runs: list[dict]) -> list[str]:
    """A package against its fp32 and int8 exports, each decoding as the package does, from `python
    bench/inference.py` (bench/inference_*.json): a table per package."""
    lines = ["", "### Exports: the package against `asr export`"] if runs else []
    names = {"package": "package (PyTorch)", "package_int8": "package, `--precision int8`",
             "export": "`asr export` (onnxruntime)", "export_int8": "`asr export --int8`"}
    for run in runs:
        first = next(iter(run["runs"].values()))
        lms = ", ".join(f"`{first[k]}`" for k in ("lm", "word_lm") if first.get(k)) or "no LM"
        lines += ["", f"`{run['command']}`: `{run['manifest']}` decoded in the package's mode ({first['mode']}, "
                  f"{lms}) by each, one process at a time; same: utterances whose transcript equals the package's; "
                  f"size: the package file or the export folder; peak: the process's resident memory; "
                  f"{short_cpu_name(run['cpu'])}, {run['threads']} threads.", "",
                  "| runs | WER % | CER % | WER % (Whisper's normalizer) | same as the package | RTF | size MB | "
                  "peak MB |", "|---|---|---|---|---|---|---|---|"]
        for label, row in run["runs"].items():
            whisper = f"{100 * row['wer_whisper']:.2f}" if row.get("wer_whisper") is not None else "-"
            lines.append(f"| {names.get(label, label)} | {100 * row['wer']:.2f} | {100 * row['cer']:.2f} | {whisper} | "
                         f"{row['same_as_package']}/{row['utterances']} | {row['rtf']:.4f} | {row['size_mb']:.1f} | "
                         f"{row['peak_mb']:,} |")
    return lines


def serve_table(runs: list[dict]) -> list[str]:
    """`asr serve` under concurrent clients from `python bench/serve.py` (bench/serve*.json), against decoding the
    same files one at a time: a table per model."""
    lines = ["", "### Serving (`asr serve`)"] if runs else []
    for run in runs:
        lines += _serve_rows(run)
    return lines


def _serve_rows(run: dict) -> list[str]:
    alone = run["rows"][0]
    command = run.get("command") or f"python bench/serve.py {run['model']} {run['manifest']}"
    lines = ["", f"`{command}`: clients send its files (mean "
             f"{run['mean audio seconds']:.1f} s) to POST /v1/audio/transcriptions, each waiting for its answer; "
             f"one at a time in one process: {alone['requests/s']:.2f} requests/s. Latency in seconds; batch: "
             f"requests the server decoded together; server peak memory {run['server peak MB']:.0f} MB; "
             f"{short_cpu_name(run['cpu'])}, {run['threads']} threads.", "",
             "| clients | requests/s | audio s/s | × one at a time | p50 | p95 | p99 | mean batch | wrong answers |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in run["rows"][1:]:
        lines.append(f"| {row['clients']} | {row['requests/s']:.2f} | {row['audio s/s']:.1f} | "
                     f"{row['requests/s'] / alone['requests/s']:.2f} | {row['p50']:.2f} | {row['p95']:.2f} | "
                     f"{row['p99']:.2f} | {row['mean batch']:.1f} | {row['mismatches']} |")
    return lines


def hotwords_table(runs: list[dict]) -> list[str]:
    """Contextual biasing from `python bench/hotwords.py` (bench/hotwords_*.json): per model and set, without a list
    and with each utterance's list (its rare words and distractors), errors on the listed words and the others."""
    if not runs:
        return []
    lines = ["", "### Hotwords (contextual biasing)", "",
             "`python bench/hotwords.py`: each utterance decoded alone, without a list and with its own: the words of "
             "its reference seen fewer than N (rare <) times in training, plus up to 100 distractors drawn from the "
             "other rare words. "
             "B-WER: errors on the listed words; U-WER: on the others; recall, precision and F1 of the listed words "
             "(%). RTF: one utterance at a time.", "",
             "| model | set | mode | rare < | words a list | list | bonus | WER | B-WER | U-WER | recall | precision "
             "| F1 | RTF | CPU |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        mode = run["mode"] + (f", streamed in {run['stream']} ms chunks" if run.get("stream") else "")
        for row in run["rows"]:
            lines.append(f"| `{run['model']}` | `{run['manifest']}` ({run['utterances']}) | {mode} | {run['rare_below']} | "
                         f"{run.get('list_words', '-')} | {row['list']} | {'-' if row['score'] is None else row['score']} | "
                         f"{row['wer']:.2f} | {row['b_wer']:.2f} | {row['u_wer']:.2f} | {row['recall']:.1f} | "
                         f"{row['precision']:.1f} | {row['f1']:.1f} | {row['rtf']:.4f} | "
                         f"{short_cpu_name(run['cpu'])}, {run['threads']} threads |")
    return lines


def gpu_table(check: dict | None) -> list[str]:
    """Training speed on a GPU from `bash bench/gpu_check.sh`: the in-memory model step per precision and the real
    trainer (`asr train`, default device, the real loader), with their ratio."""
    if not check or "gpu" not in check.get("environment", {}):
        return []
    env, ratio = check["environment"], check.get("trainer_vs_model") or {}
    lines = ["", f"### Training on a GPU ({env['gpu']}, torch {env['torch']})", "",
             f"`{check['command']}`: the model of `{check['config']}` (vocabulary {check['model']['vocab']}).", "",
             "| loop | precision | audio s/s | steps/s | model FLOP utilisation % | peak GPU memory MB |",
             "|---|---|---|---|---|---|"]
    for row in check["training"]:
        if "error" not in row:
            lines.append(f"| in-memory batches | {row['precision']} | {row['audio_s_per_s']:,.0f} | {row['steps_per_s']} | "
                         f"{row.get('mfu_percent', '-')} | {row.get('peak_memory_MB', '-')} |")
    train = check.get("trainer", {}).get("train", {})
    if ratio:
        lines.append(f"| `asr train` on {check['trainer'].get('corpus_hours', '?')} h of WAVs (epoch {train.get('epochs')}) | "
                     f"{ratio['precision']} | {ratio['trainer_audio_s_per_s']:,.0f} | - | - | - |")
        lines += ["", f"The real trainer runs at {ratio['ratio']:.2f} × the in-memory step's speed."]
    return lines


def loader_table(run: dict | None, speed: dict | None, gpu: dict | None) -> list[str]:
    """The training loader's audio seconds per second per core, from files and shards (bench/loader.py), beside what
    a training step consumes (bench/train_speed.py on this CPU; bench/gpu_check.py on a GPU when it ran), and the
    loader cores that takes (arithmetic)."""
    if not run:
        return []
    lines = ["", "### Training data loader", "",
             f"`{run['command']}`: {run['utterances']:,} utterances ({run['hours']} h) read as `asr train` reads them "
             f"with `{run['config']}` (speed factors {run['speed_factors']}, log-mel, SpecAugment), from files and "
             f"from {run['shards']} tar shards of {run['per_shard']} (written by `asr shard` in "
             f"{run['shard_write_s']} s); {short_cpu_name(run['cpu'])}, {run['cpus']} cores.", "",
             "| source | loader workers | cores used | audio s/s | audio s/s per core |", "|---|---|---|---|---|"]
    for row in run["rows"]:
        lines.append(f"| {row['source']} | {row['workers']} | {row['cores']} | {row['audio_s_per_s']:,.0f} | "
                     f"{row['audio_s_per_s_per_core']:,.0f} |")
    worker_rows = [r for r in run["rows"] if r["source"] == "shards" and r["workers"] > 0] or run["rows"]
    per_core = min(r["audio_s_per_s_per_core"] for r in worker_rows)
    steps = [(f"{r['shape']} {r['precision']}, this CPU ({r['threads']} threads)", r["audio_s_per_s"])
             for r in (speed or {}).get("results", []) if "audio_s_per_s" in r and r["shape"] in ("small", "ref10m")]
    steps += [(f"{gpu['environment']['gpu']} {r['precision']}", r["audio_s_per_s"])
              for r in (gpu or {}).get("training", []) if "audio_s_per_s" in r and "gpu" in gpu.get("environment", {})]
    lines += ["", f"Loader cores a training step needs (arithmetic, not measured: the step's audio s/s over the "
                  f"loader's slowest per-core rate from shards with workers, {per_core:,.0f}); the step's figure is "
                  "bench/train_speed.py's (in-memory batches)" + (" and bench/gpu_check.py's" if gpu else "") + ":", "",
              "| training step | audio s/s | loader cores |", "|---|---|---|"]
    lines += [f"| {name} | {rate:,.0f} | {rate / per_core:.2f} |" for name, rate in steps]
    lines += [f"| a GPU step of {rate:,} audio s/s (example) | {rate:,} | {rate / per_core:.1f} |"
              for rate in (2_000, 10_000, 50_000)]
    return lines
