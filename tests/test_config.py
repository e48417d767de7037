import pytest
from typer.testing import CliRunner

from asr_transformer.cli import app
from asr_transformer.config import PRESETS, ConfigError, from_dict, load_config, save_config


def test_yaml_preset_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  preset: small\n  dropout: 0.2\ntrain:\n  max_epochs: 3\n")
    cfg = load_config(path, ["model.encoder_layers=12", "train.lr=2e-3", "augment.speed_factors=[0.9, 1.0, 1.1]",
                             "model.pre_norm=false"])
    assert cfg.model.d_model == PRESETS["small"]["d_model"] and cfg.model.dropout == 0.2
    assert cfg.model.encoder_layers == 12 and cfg.train.lr == 0.002 and cfg.train.max_epochs == 3
    assert cfg.augment.speed_factors == [0.9, 1.0, 1.1] and cfg.model.pre_norm is False
    save_config(cfg, tmp_path / "out.yaml")
    again = load_config(tmp_path / "out.yaml")
    assert again == cfg


@pytest.mark.parametrize("override,message", [
    ("model.nope=1", "unknown key 'nope'"), ("train.max_epochs=abc", "expected int"),
    ("model.pre_norm=3", "true/false"), ("noequals", "section.key=value"), ("model.preset=huge", "unknown preset"),
])
def test_bad_overrides_are_explained(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


@pytest.mark.parametrize("override,message", [
    ("train.max_epochs=-1", r"^train\.max_epochs=-1: must be ≥ 1$"),
    ("train.max_epochs=0", r"^train\.max_epochs=0: must be ≥ 1$"),
    ("train.lr=0", r"^train\.lr=0\.0: must be > 0$"),
    ("model.dropout=1", r"^model\.dropout=1\.0: must be in \[0, 1\)$"),
    ("model.heads=3", r"^model\.heads=3: must be a divisor of model\.d_model=256$"),
    ("model.subsampling=5", r"^model\.subsampling=5: must be 2 \(whisper front-end\), 4, 6 or 8$"),
    ("model.subsampling=2", r"^model\.subsampling=2: must be 2 with model\.frontend: whisper, and only with it$"),
    ("model.ctc=false", r"^model\.ctc_weight=0\.3: must be 0 in a model without a CTC head"),
    ("features.kind=htk", r"^features\.kind='htk': must be fbank or whisper$"),
    ("model.conv_kernel=16", r"^model\.conv_kernel=16: must be an odd width \(the Conformer convolution's\)$"),
    ("model.ctc_weight=1.5", r"^model\.ctc_weight=1\.5: must be in \[0, 1\]$"),
    ("augment.noise_snr=[40, 10]", r"^augment\.noise_snr=\[40, 10\]: must be \[low, high\] in dB, low ≤ high$"),
    ("augment.speed_factors=[]", r"^augment\.speed_factors=\[\]: must be a non-empty list of factors > 0$"),
    ("data.max_duration=0.05", r"^data\.max_duration=0\.05: must be > data\.min_duration=0\.1$"),
    ("train.accum_grad=0", r"^train\.accum_grad=0: must be ≥ 1$"),
    ("train.schedule=linear", r"^train\.schedule='linear': must be noam or cosine$"),
    ("decode.beam=0", r"^decode\.beam=0: must be ≥ 1$"),
])
def test_values_out_of_range_are_refused_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_ranges_are_checked_after_the_overrides_and_in_stored_configs(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  max_epochs: 0\n")
    assert load_config(path, ["train.max_epochs=3"]).train.max_epochs == 3  # the override repairs it
    with pytest.raises(ConfigError, match=r"^model\.pt:config: model\.heads=5: must be a divisor of model\.d_model"):
        from_dict({"model": {"heads": 5}}, "model.pt:config")
    for name in ("tiny", "small", "base", "large"):
        load_config(None, [f"model.preset={name}"])


def test_the_cli_refuses_a_bad_range_in_one_line_and_trains_nothing(tmp_path):
    (tmp_path / "data").mkdir()
    result = CliRunner().invoke(app, ["train", "--data", str(tmp_path / "data"), "--exp", str(tmp_path / "exp"),
                                      "--set", "train.max_epochs=-1"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["error: train.max_epochs=-1: must be ≥ 1"]
    assert not (tmp_path / "exp").exists()


def test_configs_from_before_model_block_read_as_they_did(tmp_path):
    """Before model.block, conv_kernel alone chose the encoder's blocks: > 0 Conformer of that width, 0 Transformer.
    A package's config, a YAML file and a resumed run's config.yaml of that time still mean what they meant."""
    from asr_transformer.config import Config, from_dict, to_dict
    import yaml

    from asr_transformer.train.experiment import config_difference

    old = to_dict(Config())
    del old["model"]["block"]
    for kernel, block in ((15, "conformer"), (7, "conformer"), (0, "transformer")):
        old["model"]["conv_kernel"] = kernel
        cfg = from_dict(old)
        assert cfg.model.block == block and cfg.model.conv_kernel == (kernel or 15)
        saved = tmp_path / f"config_{kernel}.yaml"
        saved.write_text(yaml.safe_dump(old))
        assert config_difference(saved, cfg) == ""  # the run resumes
        assert load_config(saved).model.block == block
    assert from_dict({"model": {"block": "transformer", "conv_kernel": 7}}).model.block == "transformer"
