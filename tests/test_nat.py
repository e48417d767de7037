"""Non-autoregressive decoding (Mask-CTC with the decoder trained both ways, model.nat_weight): the decoder sees every
position, CTC decides the length, the stated number of passes fills every mask, batched = one at a time, the numpy
search's greedy CTC = the torch one, and a tiny model overfits a batch and decodes it back through the NAT path."""

import dataclasses

import pytest
import torch

from asr_transformer.config import PRESETS, DecodeConfig, ModelConfig
from asr_transformer.errors import DecodeError
from asr_transformer.decode.ctc_prefix import ctc_greedy
from asr_transformer.decode.maskctc import greedy_with_confidence, maskctc_search
from asr_transformer.decode.search import recognize
from asr_transformer.model.asr import ASRModel
from asr_transformer.model.mask import lengths_to_mask
from asr_transformer.tokens import BLANK, EOS, MASK, SOS

torch.set_num_threads(1)
VOCAB, FEAT = 16, 20


def nat_model(seed=0, **changes) -> ASRModel:
    torch.manual_seed(seed)
    cfg = ModelConfig(input_dim=FEAT, vocab_size=VOCAB, **PRESETS["tiny"])
    return ASRModel(dataclasses.replace(cfg, **{"nat_weight": 0.3, **changes}))


def test_the_nat_loss_trains_the_decoder_without_the_causal_mask():
    m = nat_model()
    g = torch.Generator().manual_seed(1)
    feats, lens = torch.randn(2, 40, FEAT, generator=g), torch.tensor([40, 31])
    tokens, token_lens = torch.tensor([[5, 6, 7], [8, 9, -1]]), torch.tensor([3, 2])
    torch.manual_seed(0)
    out = m.train()(feats, lens, tokens, token_lens)
    assert {"loss_ctc", "loss_att", "loss_nat", "acc_nat"} <= out.keys()
    expected = m.cfg.ctc_weight * out["loss_ctc"] + (1 - m.cfg.ctc_weight) * out["loss_att"]
    torch.testing.assert_close(out["loss"], expected + m.cfg.nat_weight * out["loss_nat"])
    # the objective: <sos> y with some tokens masked, each position predicting the token after it, where masked
    torch.manual_seed(0)
    enc, enc_lens = m.encode(feats, lens)
    logits, targets = m._masked_lm(enc, torch.arange(enc.size(1)) < enc_lens[:, None], tokens, token_lens)
    assert logits.shape[:2] == targets.shape == (2, 4) and (targets[:, -1] == -1).all()
    picked = targets >= 0
    assert picked.any(1).all() and (targets[picked] == tokens[:, :3].clamp(min=0)[picked[:, :3]]).all()
    plain = nat_model(nat_weight=0.0).train()(feats, lens, tokens, token_lens)
    assert "loss_nat" not in plain
    with pytest.raises(ValueError, match="CTC head"):
        ASRModel(dataclasses.replace(m.cfg, ctc=False))


def test_maskctc_needs_a_decoder_trained_for_it():
    m = nat_model(nat_weight=0.0).eval()
    with pytest.raises(DecodeError, match="nat_weight"):
        recognize(m, torch.randn(1, 30, FEAT), torch.tensor([30]), DecodeConfig(mode="maskctc"))


def test_numpy_greedy_ctc_equals_the_torch_one():
    g = torch.Generator().manual_seed(0)
    log_probs = torch.log_softmax(torch.randn(3, 25, VOCAB, generator=g) * 3, -1)
    log_probs[:, :, BLANK] += 1.0
    lens = torch.tensor([25, 17, 0])
    ref = ctc_greedy(log_probs, lens)
    tokens, counts, confidence, score = greedy_with_confidence(log_probs.numpy(), lens.numpy())
    assert counts.tolist() == ref.lengths.tolist() and tokens.tolist() == ref.tokens.tolist()
    torch.testing.assert_close(torch.from_numpy(confidence), ref.confidence)
    torch.testing.assert_close(torch.from_numpy(score), ref.score)


def test_the_nat_pass_is_not_causal():
    """Changing the last token changes the NAT pass's outputs at the first position; the AT pass's do not change."""
    m = nat_model().eval()
    enc = torch.randn(1, 12, m.cfg.d_model)
    enc_mask = torch.ones(1, 12, dtype=torch.bool)
    a, b = torch.tensor([[SOS, 5, 6, MASK]]), torch.tensor([[SOS, 5, 6, 9]])
    lens = torch.tensor([4])
    with torch.no_grad():
        nat = [m.decoder(enc, enc_mask, t, lens, causal=False) for t in (a, b)]
        at = [m.decoder(enc, enc_mask, t, lens) for t in (a, b)]
    assert not torch.allclose(nat[0][:, 0], nat[1][:, 0])
    torch.testing.assert_close(at[0][:, :3], at[1][:, :3])


def _forced_ctc(tokens_per_utt: list[list[int]], frames: int, confidence: float) -> tuple[torch.Tensor, torch.Tensor]:
    """CTC log-probs (B, frames, VOCAB) whose greedy path is each utterance's tokens, one frame each with the
    given probability, blanks between: what decides the NAT output's length."""
    lp = torch.full((len(tokens_per_utt), frames, VOCAB), -20.0)
    lp[:, :, BLANK] = 0.0
    for b, toks in enumerate(tokens_per_utt):
        for i, t in enumerate(toks):
            lp[b, 2 * i + 1, :] = torch.log(torch.tensor((1 - confidence) / (VOCAB - 1)))
            lp[b, 2 * i + 1, t] = torch.log(torch.tensor(confidence))
    return lp, torch.full((len(tokens_per_utt),), frames)


@pytest.mark.parametrize("length", [1, 4, 7])
def test_the_length_comes_from_ctc_and_every_masked_position_is_filled(length):
    """A forced CTC output of `length` unsure tokens: the NAT output has that many tokens, none of them special."""
    m = nat_model().eval()
    lp, lens = _forced_ctc([[5 + i % 9 for i in range(length)]], 20, confidence=0.5)
    enc = torch.randn(1, 20, m.cfg.d_model)
    (hyp,), = maskctc_search(m, enc, lens, lp, iterations=2, threshold=0.9)
    assert len(hyp.tokens) == length
    assert not set(hyp.tokens) & {BLANK, SOS, EOS, MASK}


@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_the_stated_number_of_passes_fills_every_mask(iterations, monkeypatch):
    m = nat_model().eval()
    lp, lens = _forced_ctc([[5, 6, 7, 8, 9, 10], [11, 12, 13]], 16, confidence=0.5)
    enc = torch.randn(2, 16, m.cfg.d_model)
    calls = []
    forward_kv = m.decoder.forward_kv
    monkeypatch.setattr(m.decoder, "forward_kv", lambda *a, **k: calls.append(1) or forward_kv(*a, **k))
    with torch.no_grad():
        hyps = maskctc_search(m, enc, lens, lp, iterations=iterations, threshold=0.9)
    assert len(calls) == iterations  # every utterance has at least `iterations` masks: one pass each
    assert [len(n[0].tokens) for n in hyps] == [6, 3]
    assert all(MASK not in n[0].tokens for n in hyps)
    # confident CTC tokens are kept as they are
    lp2, _ = _forced_ctc([[5, 6, 7, 8, 9, 10], [11, 12, 13]], 16, confidence=0.999)
    with torch.no_grad():
        kept = maskctc_search(m, enc, lens, lp2, iterations=iterations, threshold=0.9)
    assert [n[0].tokens for n in kept] == [[5, 6, 7, 8, 9, 10], [11, 12, 13]]


def test_nat_batched_equals_one_at_a_time():
    m = nat_model(seed=2).eval()
    with torch.no_grad():
        m.ctc.proj.weight.mul_(5.0)  # some confident, some unsure CTC tokens
    g = torch.Generator().manual_seed(3)
    lengths = (61, 44, 29)
    feats = torch.randn(3, 61, FEAT, generator=g)
    opts = DecodeConfig(mode="maskctc", maskctc_iterations=3, maskctc_threshold=0.9)
    with torch.no_grad():
        batched = recognize(m, feats, torch.tensor(lengths), opts)
        single = [recognize(m, feats[i:i + 1, :n], torch.tensor([n]), opts)[0] for i, n in enumerate(lengths)]
    assert [h[0].tokens for h in batched] == [h[0].tokens for h in single]
    for a, b in zip(batched, single):
        assert a[0].score == pytest.approx(b[0].score, abs=1e-4)
    assert any(len(h[0].tokens) for h in batched)


def test_a_tiny_model_overfits_and_decodes_back_through_the_nat_path():
    """Joint training (CTC + AT + NAT); every CTC token masked (threshold > 1): the decoder's NAT passes alone write
    the transcripts (one token a pass, easy first); its AT pass still decodes them too."""
    m = nat_model(dropout=0.0, label_smoothing=0.0, nat_weight=1.0)
    g = torch.Generator().manual_seed(3)
    lengths, token_lens = (40, 36, 32, 28), (4, 3, 3, 2)
    feats = torch.randn(4, 40, FEAT, generator=g)
    tokens = torch.randint(5, VOCAB, (4, 4), generator=g)
    tokens = tokens.masked_fill(~lengths_to_mask(torch.tensor(token_lens), 4), -1)
    targets = [tokens[i, :n].tolist() for i, n in enumerate(token_lens)]
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for _ in range(250):
        opt.zero_grad()
        m(feats, torch.tensor(lengths), tokens, torch.tensor(token_lens))["loss"].backward()
        opt.step()
    m.eval()
    with torch.no_grad():
        for iterations in (4, 10):
            opts = DecodeConfig(mode="maskctc", maskctc_iterations=iterations, maskctc_threshold=1.1)
            assert [h[0].tokens for h in recognize(m, feats, torch.tensor(lengths), opts)] == targets
        at = recognize(m, feats, torch.tensor(lengths), DecodeConfig(mode="greedy"))
    assert [h[0].tokens for h in at] == targets
