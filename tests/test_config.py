import pytest

from asr_transformer.config import PRESETS, ConfigError, load_config, save_config


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
