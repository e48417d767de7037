"""LoRA fine-tuning: the adapted model starts as the pretrained one, trains only its low-rank updates, and its
checkpoints hold a plain model that gives the adapted model's outputs; an interrupted run resumes exactly."""

import pytest
import torch

from asr_transformer.config import ModelConfig, apply_preset
from asr_transformer.model.asr import ASRModel
from asr_transformer.model.lora import LoRALinear, add_lora, merged_state_dict
from asr_transformer.package import average_checkpoints, load_package
from tests.test_train import run, weights


def _tiny_model(seed: int = 0) -> ASRModel:
    torch.manual_seed(seed)
    cfg = ModelConfig()
    apply_preset(cfg, "tiny")
    cfg.vocab_size = 11
    return ASRModel(cfg).eval()


def _outputs(model, feats, lens, tokens):
    """The encoder's output and the attention + CTC loss of `tokens`."""
    enc, enc_lens = model.encode(feats, lens)
    return enc, model.losses(enc, enc_lens, tokens, torch.tensor([3, 2]))["loss"]


def test_adapted_model_starts_as_the_pretrained_one_and_merges_back():
    model, plain = _tiny_model(), _tiny_model()
    feats, lens = torch.randn(2, 60, 80), torch.tensor([60, 41])
    tokens = torch.tensor([[4, 5, 6], [7, 8, 0]])
    before = _outputs(model, feats, lens, tokens)
    layers = add_lora(model, ["attn", "ffn"], rank=4, alpha=8.0)
    assert layers and all(isinstance(model.get_submodule(n), LoRALinear) for n in layers)
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trained and all(n.endswith((".lora_a", ".lora_b")) for n in trained)
    for a, b in zip(before, _outputs(model, feats, lens, tokens)):
        torch.testing.assert_close(a, b)  # B starts at zero: the same model
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".lora_b"):
                p.normal_(0, 0.1)
    adapted = _outputs(model, feats, lens, tokens)
    assert not torch.allclose(adapted[0], before[0])
    plain.load_state_dict(merged_state_dict(model))  # strict: the plain model's names, no lora_* tensors
    for a, b in zip(adapted, _outputs(plain, feats, lens, tokens)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_add_lora_refuses_targets_that_name_nothing():
    with pytest.raises(ValueError, match="names no Linear layer"):
        add_lora(_tiny_model(), ["attention"], rank=4, alpha=8.0)


def test_lora_run_trains_only_the_update_and_resumes_exactly(tone_corpus, tmp_path):
    """From a package: epoch checkpoints are plain models (no lora_*); the weights LoRA does not touch (norms,
    embeddings) end as they started; an interrupted run resumes to the same weights."""
    run(tone_corpus, tmp_path / "base", ["train.max_epochs=1"])
    average_checkpoints(tmp_path / "base", tmp_path / "base.pt", last=1)
    lora = ["train.max_epochs=2", f"train.init_from={tmp_path / 'base.pt'}", "train.lora_rank=4",
            "train.lora_alpha=8", "train.lr=5e-3", "data.max_batch=4"]
    start = load_package(tmp_path / "base.pt")[0].state_dict()
    run(tone_corpus, tmp_path / "full", lora)
    end = weights(tmp_path / "full/checkpoints/epoch_2.pt")
    assert not any(n.endswith((".lora_a", ".lora_b")) for n in end) and end.keys() == start.keys()
    for name in ("encoder.layers.0.norm1.weight", "decoder.embed.weight"):
        torch.testing.assert_close(end[name], start[name], msg=name)
    assert not torch.allclose(end["decoder.layers.0.self_attn.q.weight"], start["decoder.layers.0.self_attn.q.weight"])
    run(tone_corpus, tmp_path / "split", lora, stop_after_batches=3)
    run(tone_corpus, tmp_path / "split", lora)
    full, split = weights(tmp_path / "full/checkpoints/last.pt"), weights(tmp_path / "split/checkpoints/last.pt")
    assert any(n.endswith(".lora_a") for n in full)
    for name in full:
        assert torch.equal(full[name], split[name]), name
