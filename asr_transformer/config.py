"""Options as small dataclasses; YAML in and out; `section.key=value` overrides; model presets."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import yaml

from asr_transformer.fileio import atomic_open
from asr_transformer.errors import DecodeError, UserError
from asr_transformer.numerals import NUMBER_STYLES


@dataclass
class FeatureConfig:
    """Log-mel filterbank front-end: Kaldi's fbank, or Whisper's log-mel spectrogram."""

    kind: str = "fbank"  # fbank (Kaldi-compatible) | whisper (Whisper's: STFT 400/160, Slaney mel, log10, (x+4)/4)
    sample_rate: int = 16000
    num_mel_bins: int = 80
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    dither: float = 0.0  # in 16-bit sample units, training only
    # whisper: zero-pad every utterance to this many seconds, as Whisper's 30-s window (0: as long as it is)
    pad_to_seconds: float = 0.0


@dataclass
class AugmentConfig:
    """Training-only augmentation: speed perturbation and additive noise of the waveform, SpecAugment of features."""

    speed_factors: list[float] = field(default_factory=lambda: [1.0])  # e.g. [0.9, 1.0, 1.1]
    noise_prob: float = 0.0  # chance that an utterance gets white noise in an epoch; 0 disables
    noise_snr: list[float] = field(default_factory=lambda: [10.0, 40.0])  # its SNR in dB, uniform in [low, high]
    # model.speaker_cmn: chance that an utterance is normalized by its own mean instead of its speaker's in an
    # epoch, as a file transcribed alone is
    own_mean_prob: float = 0.0
    # vocal tract length perturbation (Jaitly & Hinton 2013): the filterbank's frequency axis warped by a factor
    # drawn per utterance and epoch from this list, as Kaldi's VTLN warps it; e.g. [0.9, 0.95, 1.0, 1.05, 1.1]
    vtlp_warps: list[float] = field(default_factory=lambda: [1.0])
    # a random microphone: that share of utterances per epoch gets a smooth random frequency response, up to
    # ±eq_db at 6 points across the filterbank (data.features.random_equalizer)
    eq_prob: float = 0.0
    eq_db: float = 6.0
    freq_masks: int = 2
    freq_mask_width: int = 27  # max bins per mask
    time_masks: int = 2
    time_mask_width: int = 40  # max frames per mask ...
    time_mask_ratio: float = 0.05  # ... and at most this fraction of the utterance
    time_warp: int = 0  # max warp distance in frames; 0 disables
    # silence around the speech: that share of utterances per epoch gets up to silence_seconds before and after it
    # (each drawn uniformly), of faint noise (−90 to −60 dBFS) or digital zeros; a model trained on tightly cut
    # utterances otherwise writes words into the pauses a voice detector leaves around speech
    silence_prob: float = 0.0
    silence_seconds: float = 0.5
    # non-speech sounds beside the speech: that share of utterances per epoch gets, on one side (drawn), beyond its
    # silence, 0.5 s to sound_seconds of clips from the folder `sounds` (real recordings: bells, jingles, ring tones;
    # any format soundfile reads), drawn and joined, at sound_db dB of the speech's RMS (uniform in [low, high]); the
    # transcript stays the same (data/sounds.py). A model that never heard such sounds writes words into them
    sounds: str = ""
    sound_prob: float = 0.0
    sound_seconds: float = 3.0
    sound_db: list[float] = field(default_factory=lambda: [-10.0, 5.0])


@dataclass
class DataConfig:
    """Batching and filtering of the training and validation manifests."""

    max_frames: int = 12000  # feature frames per batch, padding included
    max_batch: int = 64
    min_duration: float = 0.1  # seconds
    max_duration: float = 20.0  # seconds, at the slowest of augment.speed_factors (Whisper's window: 30)
    num_workers: int = 0
    bucket_width: float = 0.1  # random jitter of lengths when bucketing (varies batches per epoch)
    cache_audio: bool = False  # keep features in memory (small corpora: saves decoding and fbank every epoch)
    # training from a shard list (`asr shard`): each reader's utterances pass a shuffle buffer of this many, then
    # go to one of `buckets` duration buckets (bounds at the training set's duration quantiles) that give batches
    shuffle_buffer: int = 1000
    buckets: int = 10


@dataclass
class ModelConfig:
    """Transformer encoder-decoder with a CTC head."""

    input_dim: int = 80
    vocab_size: int = 0  # filled from the tokenizer (as are decoder_prompt and the suppressed ids below)
    d_model: int = 256
    heads: int = 4
    encoder_layers: int = 12
    decoder_layers: int = 6
    ffn_dim: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    subsampling: int = 4  # 4, 6 or 8; 2 with the whisper front-end
    subsampling_channels: int = 0  # conv channels of the front-end; 0 = d_model (ESPnet/WeNet)
    pre_norm: bool = True  # False: post-LN, the original Transformer drawing
    utterance_cmn: bool = False  # subtract each utterance's own mean (speaker/channel) before global CMVN
    # subtract the mean of all its speaker's utterances instead (the manifests' `speaker`; Kaldi's per-speaker CMN):
    # the channel goes, the word's own spectrum stays. An utterance alone or of speaker "unknown" uses its own mean.
    speaker_cmn: bool = False
    # the encoder's blocks (model/encoder.py: BLOCKS): transformer (self-attention, feed-forward) or conformer
    # (macaron feed-forwards, attention and a depthwise convolution of conv_kernel frames; always pre-LN). A config
    # of old that gives only conv_kernel (> 0: Conformer, 0: Transformer) still reads as it did.
    block: str = "transformer"
    conv_kernel: int = 15
    tie_embeddings: bool = False
    ctc_weight: float = 0.3
    # InterCTC (Lee & Watanabe 2021): this share of the CTC loss is taken at the output of encoder block
    # `interctc_layer` (1-based; 0 = the middle block) through the same final LayerNorm and CTC head
    interctc_weight: float = 0.0
    interctc_layer: int = 0
    # the non-autoregressive (NAT) decoder: Mask-CTC (Higuchi et al. 2020; decoding mode maskctc) with the same
    # decoder, run without the causal mask. It also learns to fill masked tokens: it reads <sos> y1 … yn with a
    # random share of them replaced by <mask>, and each position predicts the token after it, as in teacher forcing,
    # so that both ways share what the decoder learns (one network, two attention masks, as UniLM). Its loss is
    # added with this weight; 0: autoregressive only. In decoding, greedy CTC gives the length and a first guess,
    # and the decoder fills the tokens CTC is unsure of, all at once (decode.maskctc_*)
    nat_weight: float = 0.0
    # Self-conditioned CTC (Nozaki & Komatsu 2021): that block's CTC posteriors, projected back to d_model by a
    # linear layer, are added to its output before the next block, in training and decoding alike
    interctc_condition: bool = False
    label_smoothing: float = 0.1
    ctc: bool = True  # a CTC head on the encoder (an imported Whisper has none unless asked for)
    # a no-speech head: a linear layer on the encoder's output averaged over a window, the probability that the window
    # holds no speech (what Whisper's no-speech token gives Whisper; decode.no_speech_threshold). `asr no-speech`
    # trains it on a package, the rest of the model frozen
    no_speech_head: bool = False
    # Whisper's architecture, as options of the same blocks (`asr import whisper` sets them):
    frontend: str = "conv2d"  # conv2d (the subsampling above) | whisper (two Conv1d + GELU, time ×1/2)
    activation: str = "relu"  # of the Transformer blocks' feed-forward: relu | gelu
    # sinusoidal: ×√d and interleaved sin/cos tables (Vaswani et al.); whisper: the encoder's fixed sin|cos table
    # and the decoder's learned one, added unscaled
    positions: str = "sinusoidal"
    max_source_positions: int = 1500  # whisper: rows of the encoder's table (30 s of audio)
    max_target_positions: int = 448  # whisper: rows of the decoder's table (its prompt and output)
    decoder_prompt: list[int] = field(default_factory=list)  # ids the decoder reads before BEGIN
    suppress_tokens: list[int] = field(default_factory=list)  # ids the decoder never emits in decoding
    suppress_from: int = 0  # > 0: nor any id from this one on
    # [layer, head] pairs of decoder cross-attention heads that follow the audio in time (Whisper ships them),
    # for word times without a CTC head (decode/attention_align.py); [] every head of the upper half of the layers
    alignment_heads: list = field(default_factory=list)
    # streaming (WeNet's dynamic chunks): each training batch draws a chunk size, full context half the time, else
    # 1..streaming_max_chunk encoder frames, and the encoder attends within its chunk and all chunks before it; the
    # Conformer convolutions see no future frames. One model then decodes offline and streaming (decode.chunk_ms)
    streaming: bool = False
    streaming_max_chunk: int = 25


def max_output_tokens(m: ModelConfig) -> int | None:
    """The most tokens between BEGIN and END that the decoder's position table has room for (Whisper's fixed
    table holds the prompt, BEGIN and these); None: no limit (sinusoidal positions are made as needed)."""
    return m.max_target_positions - len(m.decoder_prompt) - 1 if m.positions == "whisper" else None


BEST_METRICS = ("valid_loss", "valid_cer", "valid_wer", "valid_acc")  # how epochs are ranked; acc: higher is better


@dataclass
class TrainConfig:
    max_epochs: int = 50
    # training-time budget (0 = none): after each epoch the plan shrinks to the epochs that fit in it at the last
    # epoch's pace (the cosine schedule then still anneals to 0), and training stops once an epoch ends past it
    max_minutes: float = 0.0
    lr: float = 1e-3  # peak learning rate, reached at the end of warmup
    warmup_steps: int = 0  # optimizer steps; 0 = scale with the data (warmup_epochs)
    warmup_epochs: float = 2.0
    schedule: str = "noam"  # noam (inverse square root after warmup) | cosine (to 0 at the end of max_epochs)
    weight_decay: float = 0.0
    clip_grad: float = 5.0
    accum_grad: int = 1
    precision: str = "fp32"  # fp32 | bf16 | fp16 (fp16 on CUDA only) | auto (bf16 where the CPU has AMX or on GPUs)
    keep_best: int = 5
    # valid_loss | valid_cer (CTC greedy) | valid_wer (attention greedy, decoded each epoch) | valid_acc
    best_metric: str = "valid_loss"
    checkpoint_minutes: float = 30.0
    seed: int = 1
    scheduled_sampling: float = 0.0  # final probability of feeding the decoder its own prediction
    log_interval: int = 20
    # fine-tuning: a model package (`asr average`'s model.pt) whose weights start a fresh run (not a resumed one)
    init_from: str = ""
    # parameter-name prefixes taken from it, e.g. [encoder] across vocabularies; empty: the whole model
    init_modules: list[str] = field(default_factory=list)
    # parameter-name prefixes left as they start, e.g. [encoder] to fine-tune only the decoder
    freeze_modules: list[str] = field(default_factory=list)
    # LoRA (model/lora.py): train only a rank-`lora_rank` update of each Linear layer whose name holds one of
    # `lora_modules`, scaled by lora_alpha / lora_rank; checkpoints hold the merged weights. 0: every weight trains
    lora_rank: int = 0
    lora_alpha: float = 32.0
    lora_modules: list[str] = field(default_factory=lambda: ["attn", "ffn"])


@dataclass
class DecodeConfig:
    """How a model decodes. The one place decoding defaults are written: a model package carries its own copy
    (`asr package` sets it to the values chosen on dev), and `asr decode`/`asr transcribe` options override it."""

    mode: str = "joint"  # one of MODES
    beam: int = 10
    ctc_weight: float = 0.3  # λ of the CTC score in joint and rescore
    length_penalty: float = 0.0  # score bonus per output token (beam, joint, rescore)
    max_len_ratio: float = 1.0  # max output tokens per encoder frame
    maskctc_iterations: int = 10
    maskctc_threshold: float = 0.9  # tokens CTC is less sure of are masked (chosen on dev: experiments/synthetic.md)
    lm_weight: float = 0.5  # β of the token n-gram LM in beam, joint and rescore, when there is one
    word_lm_weight: float = 0.3  # γ of the word n-gram LM where a word ends, when there is one
    nbest: int = 1
    batch_size: int = 16
    ctc_window: float = 30.0  # joint: CTC prefix scores sum the frames within this (log) of the prefix's best; 0: all
    beam_threshold: float = 0.0  # beam, joint: drop running hypotheses this far (log) below the best one; 0: none
    end_detect: float = 10.0  # beam, joint: stop when for 3 steps every end scores this far below the best; 0: off
    split_seconds: float = 8.0  # joint: a longer utterance is searched in pieces cut at CTC pauses; 0: whole
    # the encoder attends in chunks of this many ms (a multiple of one encoder frame: 40 ms at ×4 subsampling),
    # each chunk seeing `left_chunks` chunks before it (-1: all): what streaming decoding computes; 0 = full context
    chunk_ms: int = 0
    left_chunks: int = -1
    # phrases to favour (hotwords), each "phrase" or "phrase<TAB>score" (decode/hotwords.py), and the bonus per token
    # of a phrase whose entry gives none; every search but the greedy ones takes them
    hotwords: list = field(default_factory=list)
    hotword_score: float = 2.0
    numbers: str = ""  # how the text writes numbers: "" as the model wrote them, digits (15) or words (fifteen)
    # Whisper packages: the language to transcribe ("" the package's; an English-only model takes only en), and
    # text the decoder reads as what came before (names, spellings, style), as whisper's --initial_prompt
    language: str = ""
    initial_prompt: str = ""
    # whisper's fallback (decode/fallback.py): sample at `temperature` (0: the mode's search); a window whose text
    # repeats itself (gzip compression ratio above `compression_ratio_threshold`) or whose tokens average a
    # log-probability below `logprob_threshold` is decoded again, sampling `temperature_increment` hotter each
    # time up to 1.0 (0: never again)
    temperature: float = 0.0
    temperature_increment: float = 0.0
    logprob_threshold: float = -1.0
    compression_ratio_threshold: float = 2.4
    # Whisper packages and packages with a no-speech head (model.no_speech_head): a window whose no-speech probability
    # is above this and whose tokens average a log-probability below `logprob_threshold` gives no text (whisper's
    # silence check; 1: off)
    no_speech_threshold: float = 0.6
    # packages with a CTC head: a window whose CTC tokens average a posterior below this and whose tokens average a
    # log-probability below `logprob_threshold` gives no text (the same silence check, CTC's confidence in place of
    # Whisper's no-speech token; 0: off)
    ctc_confidence_threshold: float = 0.0
    # the voice detector that cuts `transcribe`'s audio into segments (inference/segmenter.py): silero (neural; the
    # vad extra), energy (levels), none (all of it, in pieces), auto (silero where installed, else energy); the
    # speech probability that starts speech (silero), and in seconds: the least speech that makes a segment, the
    # pause that ends one, the context kept around it (min_speech 0.25 s as Silero's and sherpa-onnx's own default:
    # shorter bursts were mostly bells and clicks, which a model writes words for; docs/experiments/synthetic.md)
    vad: str = "auto"
    vad_threshold: float = 0.5
    min_speech: float = 0.25
    min_silence: float = 0.3
    speech_pad: float = 0.2
    # Whisper packages: each window reads the text of the windows before it as its prompt (whisper's
    # condition_on_previous_text; windows are then decoded one at a time); off: each window is decoded alone
    condition_on_previous_text: bool = False
    # a model without a CTC head (Whisper) reads consecutive segments merged into windows of at most this many
    # seconds (0: as long as its encoder takes, 30 s for Whisper); tiny.en skipped sentences in longer ones
    max_window: float = 15.0


MODES = ("greedy", "beam", "joint", "ctc", "ctc_beam", "maskctc", "rescore")
VAD_DETECTORS = ("auto", "silero", "energy", "none")
VAD_OPTIONS = ("vad", "vad_threshold", "min_speech", "min_silence", "speech_pad", "max_window")  # not decode's
CTC_MODES = ("joint", "ctc", "ctc_beam", "maskctc", "rescore")  # decoding modes that read the CTC head


def validate_decoding(options: DecodeConfig) -> None:
    """Check the decoding options' ranges (RANGES), as `validate` does a whole config's: ConfigError naming the
    first value out of range, `decode.<field>=<value>: must be …`."""
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if (allowed := range_error(f"decode.{f.name}", value)) is not None:
            raise ConfigError(f"decode.{f.name}={value!r}: must be {allowed}")


def check_modes(modes, model: ModelConfig | None = None) -> list[str]:
    """`modes` (one name or several) → their list; DecodeError for an unknown, missing or repeated one, or (given
    the `model`) maskctc for a model whose decoder never learned to fill masked tokens."""
    modes = [modes] if isinstance(modes, str) else list(modes)
    if not modes:
        raise DecodeError(f"no decoding mode given; choose from: {', '.join(MODES)}")
    for m in modes:
        if m not in MODES:
            raise DecodeError(f"unknown decoding mode '{m}'; choose from: {', '.join(MODES)}")
    if len(set(modes)) != len(modes):
        raise DecodeError(f"decoding mode listed twice in {', '.join(modes)}")
    if model is not None and "maskctc" in modes and model.nat_weight <= 0:
        raise DecodeError("mode maskctc: this model's decoder was not trained to fill masked tokens (model.nat_weight "
                          "is 0); decode with another mode, or train with model.nat_weight > 0")
    return modes


def fit_decoding(cfg: "Config") -> None:
    """Make the decoding defaults run on the model they come with: a model without a CTC head (an imported or
    fine-tuned Whisper) decodes by attention beam search where its config names a CTC mode."""
    if not cfg.model.ctc and cfg.decode.mode in CTC_MODES:
        cfg.decode.mode = "beam"


@dataclass
class Config:
    features: FeatureConfig = field(default_factory=FeatureConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)


PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(d_model=64, heads=2, encoder_layers=2, decoder_layers=1, ffn_dim=128),
    "small": dict(d_model=144, heads=4, encoder_layers=6, decoder_layers=3, ffn_dim=576),
    "base": dict(d_model=256, heads=4, encoder_layers=12, decoder_layers=6, ffn_dim=2048),
    "large": dict(d_model=512, heads=8, encoder_layers=12, decoder_layers=6, ffn_dim=2048),
}
# Whisper's shapes (fine-tuning an imported Whisper: `asr import whisper`); with features.kind: whisper
WHISPER = dict(frontend="whisper", subsampling=2, activation="gelu", positions="whisper", tie_embeddings=True,
               ctc=False, ctc_weight=0.0, max_source_positions=1500, max_target_positions=448)
PRESETS.update({
    "whisper_tiny": dict(WHISPER, d_model=384, heads=6, encoder_layers=4, decoder_layers=4, ffn_dim=1536),
    "whisper_base": dict(WHISPER, d_model=512, heads=8, encoder_layers=6, decoder_layers=6, ffn_dim=2048),
    "whisper_small": dict(WHISPER, d_model=768, heads=12, encoder_layers=12, decoder_layers=12, ffn_dim=3072),
})


class ConfigError(UserError, ValueError):
    pass


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def _update(obj, values: dict, where: str) -> None:
    if isinstance(obj, ModelConfig):
        values = _block_of_old(values)
    if isinstance(obj, TrainConfig) and "mask_ctc" in values:  # configs of old: the decoder trained for Mask-CTC only
        if values["mask_ctc"]:
            raise ConfigError(f"{where}.mask_ctc: replaced by model.nat_weight (the decoder learns to fill masks "
                              "beside decoding autoregressively); a model trained with it needs retraining")
        values = {k: v for k, v in values.items() if k != "mask_ctc"}
    for key, value in values.items():
        if key == "preset" and isinstance(obj, ModelConfig):
            apply_preset(obj, value)
            continue
        names = {f.name: f for f in dataclasses.fields(obj)}
        if key not in names:
            raise ConfigError(f"{where}: unknown key '{key}' (known: {', '.join(names)})")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{key}: expected a mapping")
            _update(current, value, f"{where}.{key}")
        else:
            setattr(obj, key, _coerce(current, value, f"{where}.{key}"))


def upgraded(data: dict) -> dict:
    """A whole config as a mapping (a saved config.yaml, a package's), its keys of old read as today's."""
    if isinstance(data.get("model"), dict):
        data = {**data, "model": _block_of_old(data["model"])}
    if isinstance(data.get("train"), dict) and data["train"].get("mask_ctc") is False:  # a key of old, off
        data = {**data, "train": {k: v for k, v in data["train"].items() if k != "mask_ctc"}}
    return data


def _block_of_old(values: dict) -> dict:
    """Model keys from before model.block: conv_kernel alone chose the block (> 0: Conformer of that width)."""
    if "conv_kernel" not in values or "block" in values or not isinstance(values["conv_kernel"], int):
        return values
    values = dict(values)
    if values["conv_kernel"] > 0:
        return {"block": "conformer", **values}
    del values["conv_kernel"]  # 0: Transformer blocks, and the Conformer's width left at its default
    return {"block": "transformer", **values}


def _coerce(current, value, where: str):
    if isinstance(current, (int, float)) and not isinstance(current, bool) and isinstance(value, str):
        try:  # YAML 1.1 reads "2e-3" as a string
            value = float(value)
        except ValueError:
            pass
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if isinstance(current, int) and not isinstance(value, bool) and isinstance(value, (int, float)):
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return int(value)
    if isinstance(current, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(current, list) and isinstance(value, list):
        return value
    if isinstance(current, str) and isinstance(value, str):
        return value
    raise ConfigError(f"{where}: expected {type(current).__name__}, got {value!r}")


def apply_preset(model: ModelConfig, name: str) -> None:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset '{name}' (known: {', '.join(PRESETS)})")
    for key, value in PRESETS[name].items():
        setattr(model, key, value)


def from_dict(values: dict | None, where: str = "config") -> Config:
    """A checked Config from nested values (a package's, an export's); ConfigError naming `where` otherwise."""
    cfg = Config()
    _update(cfg, values or {}, where)
    validate(cfg, where)
    return cfg


def _fraction(v) -> bool:
    return 0 <= v < 1


def _probability(v) -> bool:
    return 0 <= v <= 1


# (key, test, the allowed range as the error states it); cross-key checks are in `validate`
RANGES = [
    ("features.sample_rate", lambda v: v >= 1000, "≥ 1000 (Hz)"),
    ("features.num_mel_bins", lambda v: v >= 1, "≥ 1"),
    ("features.frame_length_ms", lambda v: v > 0, "> 0"),
    ("features.frame_shift_ms", lambda v: v > 0, "> 0"),
    ("features.dither", lambda v: v >= 0, "≥ 0"),
    ("augment.speed_factors", lambda v: len(v) > 0 and all(f > 0 for f in v), "a non-empty list of factors > 0"),
    ("augment.vtlp_warps", lambda v: len(v) > 0 and all(f > 0 for f in v), "a non-empty list of factors > 0"),
    ("augment.noise_prob", _probability, "in [0, 1]"),
    ("augment.noise_snr", lambda v: len(v) == 2 and v[0] <= v[1], "[low, high] in dB, low ≤ high"),
    ("augment.own_mean_prob", _probability, "in [0, 1]"),
    ("augment.sound_prob", _probability, "in [0, 1]"),
    ("augment.sound_seconds", lambda v: v >= 0.5, "≥ 0.5 (the shortest stretch of sound)"),
    ("augment.sound_db", lambda v: len(v) == 2 and v[0] <= v[1], "[low, high] in dB, low ≤ high"),
    ("augment.eq_prob", _probability, "in [0, 1]"),
    ("augment.eq_db", lambda v: v >= 0, "≥ 0"),
    ("augment.freq_masks", lambda v: v >= 0, "≥ 0"),
    ("augment.freq_mask_width", lambda v: v >= 0, "≥ 0"),
    ("augment.time_masks", lambda v: v >= 0, "≥ 0"),
    ("augment.time_mask_width", lambda v: v >= 0, "≥ 0"),
    ("augment.time_mask_ratio", _probability, "in [0, 1]"),
    ("augment.time_warp", lambda v: v >= 0, "≥ 0"),
    ("data.max_frames", lambda v: v >= 1, "≥ 1"),
    ("data.max_batch", lambda v: v >= 1, "≥ 1"),
    ("data.min_duration", lambda v: v >= 0, "≥ 0 (seconds)"),
    ("data.num_workers", lambda v: v >= 0, "≥ 0"),
    ("data.bucket_width", lambda v: v >= 0, "≥ 0"),
    ("model.input_dim", lambda v: v >= 1, "≥ 1"),
    ("model.vocab_size", lambda v: v >= 0, "≥ 0 (0: taken from the tokenizer)"),
    ("model.d_model", lambda v: v >= 1, "≥ 1"),
    ("model.heads", lambda v: v >= 1, "≥ 1"),
    ("model.encoder_layers", lambda v: v >= 1, "≥ 1"),
    ("model.decoder_layers", lambda v: v >= 0, "≥ 0"),
    ("model.ffn_dim", lambda v: v >= 1, "≥ 1"),
    ("model.dropout", _fraction, "in [0, 1)"),
    ("model.attention_dropout", _fraction, "in [0, 1)"),
    ("model.subsampling", lambda v: v in (2, 4, 6, 8), "2 (whisper front-end), 4, 6 or 8"),
    ("model.subsampling_channels", lambda v: v >= 0, "≥ 0 (0: d_model)"),
    ("model.conv_kernel", lambda v: v > 0 and v % 2 == 1, "an odd width (the Conformer convolution's)"),
    ("model.ctc_weight", _probability, "in [0, 1]"),
    ("model.interctc_weight", _fraction, "in [0, 1)"),
    ("model.interctc_layer", lambda v: v >= 0, "≥ 0 (0: the middle block)"),
    ("model.nat_weight", lambda v: v >= 0, "≥ 0 (0: no NAT decoding)"),
    ("model.label_smoothing", _fraction, "in [0, 1)"),
    ("model.frontend", lambda v: v in ("conv2d", "whisper"), "conv2d or whisper"),
    ("model.activation", lambda v: v in ("relu", "gelu"), "relu or gelu"),
    ("model.positions", lambda v: v in ("sinusoidal", "whisper"), "sinusoidal or whisper"),
    ("model.max_source_positions", lambda v: v >= 1, "≥ 1"),
    ("model.max_target_positions", lambda v: v >= 2, "≥ 2"),
    ("model.suppress_from", lambda v: v >= 0, "≥ 0 (0: none)"),
    ("model.streaming_max_chunk", lambda v: v >= 1, "≥ 1 (encoder frames)"),
    ("features.kind", lambda v: v in ("fbank", "whisper"), "fbank or whisper"),
    ("features.pad_to_seconds", lambda v: v >= 0, "≥ 0 (0: no padding)"),
    ("train.max_epochs", lambda v: v >= 1, "≥ 1"),
    ("train.max_minutes", lambda v: v >= 0, "≥ 0 (0: no time budget)"),
    ("train.lr", lambda v: v > 0, "> 0"),
    ("train.warmup_steps", lambda v: v >= 0, "≥ 0"),
    ("train.warmup_epochs", lambda v: v >= 0, "≥ 0"),
    ("train.schedule", lambda v: v in ("noam", "cosine"), "noam or cosine"),
    ("train.weight_decay", lambda v: v >= 0, "≥ 0"),
    ("train.clip_grad", lambda v: v > 0, "> 0"),
    ("train.accum_grad", lambda v: v >= 1, "≥ 1"),
    ("train.precision", lambda v: v in ("auto", "fp32", "bf16", "fp16"), "auto, fp32, bf16 or fp16"),
    ("train.keep_best", lambda v: v >= 0, "≥ 0 (0: keep every epoch)"),
    ("train.best_metric", lambda v: v in BEST_METRICS, ", ".join(BEST_METRICS)),
    ("train.checkpoint_minutes", lambda v: v >= 0, "≥ 0"),
    ("train.lora_rank", lambda v: v >= 0, "≥ 0 (0: no LoRA)"),
    ("train.lora_alpha", lambda v: v > 0, "> 0"),
    ("train.scheduled_sampling", _probability, "in [0, 1]"),
    ("train.log_interval", lambda v: v >= 1, "≥ 1"),
    ("decode.beam", lambda v: v >= 1, "≥ 1"),
    ("decode.ctc_weight", _probability, "in [0, 1]"),
    ("decode.max_len_ratio", lambda v: v > 0, "> 0"),
    ("decode.maskctc_iterations", lambda v: v >= 1, "≥ 1"),
    ("decode.maskctc_threshold", _probability, "in [0, 1]"),
    ("decode.lm_weight", lambda v: v >= 0, "≥ 0"),
    ("decode.word_lm_weight", lambda v: v >= 0, "≥ 0"),
    ("decode.nbest", lambda v: v >= 1, "≥ 1"),
    ("decode.batch_size", lambda v: v >= 1, "≥ 1"),
    ("decode.chunk_ms", lambda v: v >= 0, "≥ 0 (0: full context)"),
    ("decode.left_chunks", lambda v: v >= -1, "≥ -1 (-1: every chunk before)"),
    ("decode.ctc_window", lambda v: v >= 0, "≥ 0 (0: every frame)"),
    ("decode.beam_threshold", lambda v: v >= 0, "≥ 0 (0: no threshold)"),
    ("decode.end_detect", lambda v: v >= 0, "≥ 0 (0: off)"),
    ("decode.split_seconds", lambda v: v >= 0, "≥ 0 (0: whole utterances)"),
    ("decode.hotwords", lambda v: all(isinstance(e, str) and e.strip() for e in v), "a list of phrases"),
    ("decode.hotword_score", lambda v: 0 <= v < float("inf"), "≥ 0"),
    ("decode.numbers", lambda v: v in NUMBER_STYLES, "digits, words or '' (as the model wrote them)"),
    ("decode.temperature", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("decode.temperature_increment", lambda v: 0 <= v <= 1, "in [0, 1] (0: no fallback)"),
    ("decode.logprob_threshold", lambda v: v <= 0, "≤ 0"),
    ("decode.compression_ratio_threshold", lambda v: v >= 1, "≥ 1"),
    ("decode.no_speech_threshold", lambda v: 0 <= v <= 1, "in [0, 1] (1: off)"),
    ("decode.ctc_confidence_threshold", lambda v: 0 <= v <= 1, "in [0, 1] (0: off)"),
    ("decode.vad", lambda v: v in VAD_DETECTORS, "one of " + ", ".join(VAD_DETECTORS)),
    ("decode.vad_threshold", lambda v: 0 < v < 1, "in (0, 1)"),
    ("decode.min_speech", lambda v: 0 <= v < float("inf"), "≥ 0 seconds"),
    ("decode.min_silence", lambda v: 0 < v < float("inf"), "> 0 seconds"),
    ("decode.speech_pad", lambda v: 0 <= v < float("inf"), "≥ 0 seconds"),
    ("decode.max_window", lambda v: v == 0 or 1 <= v < float("inf"), "0 (the model's window) or ≥ 1 seconds"),
]


def range_error(key: str, value) -> str | None:
    """What `key` ("section.name") must be when `value` is outside its range in RANGES; None when it is inside."""
    return next((_outside(ok, allowed, value) for name, ok, allowed in RANGES if name == key), None)


def _outside(ok, allowed: str, value) -> str | None:
    """`allowed` when `value` fails the test `ok`, else None."""
    try:
        return None if ok(value) else allowed
    except TypeError:  # e.g. a number where a list of strings goes
        return allowed


def validate(cfg: Config, where: str = "config") -> None:
    """Check every value's range (RANGES) and the keys that must agree; ConfigError naming the first bad key and
    what it allows. `where` (a package, an export) prefixes the message unless it is the default "config"."""
    def fail(key, value, allowed):
        raise ConfigError(("" if where == "config" else f"{where}: ") + f"{key}={value!r}: must be {allowed}")

    for key, ok, allowed in RANGES:
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if _outside(ok, allowed, value) is not None:
            fail(key, value, allowed)
    m, d = cfg.model, cfg.data
    if m.d_model % m.heads:
        fail("model.heads", m.heads, f"a divisor of model.d_model={m.d_model}")
    if m.interctc_layer >= m.encoder_layers:
        fail("model.interctc_layer", m.interctc_layer, f"below model.encoder_layers={m.encoder_layers}")
    if not m.ctc and (m.ctc_weight > 0 or m.interctc_weight > 0):
        fail("model.ctc_weight", m.ctc_weight, "0 in a model without a CTC head (model.ctc: false)")
    if (m.frontend == "whisper") != (m.subsampling == 2):
        fail("model.subsampling", m.subsampling, "2 with model.frontend: whisper, and only with it")
    if m.frontend == "whisper" and cfg.features.kind != "whisper":
        fail("features.kind", cfg.features.kind, "whisper with model.frontend: whisper")
    if m.streaming and (m.frontend != "conv2d" or m.utterance_cmn or m.speaker_cmn):
        fail("model.streaming", True, "used with the conv2d front-end and global CMVN only (no utterance_cmn or "
             "speaker_cmn: a stream has no whole utterance to take a mean over)")
    if d.max_duration <= d.min_duration:
        fail("data.max_duration", d.max_duration, f"> data.min_duration={d.min_duration}")


def load_config(path: str | os.PathLike | None, overrides: list[str] = ()) -> Config:
    """Read a YAML config (or defaults when `path` is None) and apply `a.b=value` overrides; the result is checked
    (`validate`): ConfigError naming the key and its allowed range."""
    values: dict = {}
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                values = yaml.safe_load(f) or {}
        except FileNotFoundError:
            raise ConfigError(f"{path}: config file not found") from None
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            where = getattr(e, "problem_mark", None)
            line = f":{where.line + 1}" if where is not None else ""
            reason = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"{path}{line}: not valid YAML ({reason})") from None
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
    cfg = Config()
    _update(cfg, values, str(path or "config"))
    for item in overrides:
        apply_override(cfg, item)
    validate(cfg)
    return cfg


def apply_override(cfg: Config, item: str) -> None:
    """Apply one `section.key=value` override; the value is parsed as YAML (numbers, lists, bools)."""
    if "=" not in item:
        raise ConfigError(f"override '{item}': expected section.key=value")
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        raise ConfigError(f"--set {item}: the value is not valid YAML") from None
    nested: Any = value
    for part in reversed(key.strip().split(".")):
        nested = {part: nested}
    _update(cfg, nested, "--set")


def save_config(cfg: Config, path: str | os.PathLike) -> None:
    with atomic_open(path) as f:
        yaml.safe_dump(to_dict(cfg), f, sort_keys=False)
