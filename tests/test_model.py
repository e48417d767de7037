"""The Transformer model: masks, padding invariance, incremental decoding, losses, a tiny overfit."""

import dataclasses

import pytest
import torch

from asr_transformer.config import PRESETS, ModelConfig
from asr_transformer.frames import subsampled_length
from asr_transformer.model.asr import ASRModel
from asr_transformer.model.attention import MultiHeadAttention
from asr_transformer.model.mask import causal_mask, lengths_to_mask
from asr_transformer.model.subsampling import Conv2dSubsampling
from asr_transformer.tokens import EOS, SOS

torch.set_num_threads(1)
VOCAB, FEAT = 16, 20


def tiny(**changes) -> ModelConfig:
    cfg = ModelConfig(input_dim=FEAT, vocab_size=VOCAB, **PRESETS["tiny"])
    return dataclasses.replace(cfg, **changes)


def model(seed=0, **changes) -> ASRModel:
    torch.manual_seed(seed)
    return ASRModel(tiny(**changes))


def batch(lengths=(50, 37), token_lens=(4, 3), seed=1):
    g = torch.Generator().manual_seed(seed)
    B, T, L = len(lengths), max(lengths), max(token_lens)
    feats = torch.randn(B, T, FEAT, generator=g)
    tokens = torch.randint(5, VOCAB, (B, L), generator=g)
    tokens = tokens.masked_fill(~lengths_to_mask(torch.tensor(token_lens), L), -1)
    return feats, torch.tensor(lengths), tokens, torch.tensor(token_lens)


def test_masks():
    assert lengths_to_mask(torch.tensor([2, 0, 3]), 4).tolist() == [
        [True, True, False, False], [False] * 4, [True, True, True, False]]
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_decoder_is_causal():
    m = model().eval()
    feats, lens, _, _ = batch()
    enc, enc_lens = m.encode(feats, lens)
    enc_mask = lengths_to_mask(enc_lens, enc.size(1))
    tokens = torch.randint(5, VOCAB, (2, 6))
    full = m.decoder(enc, enc_mask, tokens, torch.tensor([6, 6]))
    for t in range(5):
        changed = tokens.clone()
        changed[:, t + 1:] = torch.randint(5, VOCAB, (2, 5 - t))
        out = m.decoder(enc, enc_mask, changed, torch.tensor([6, 6]))
        torch.testing.assert_close(out[:, : t + 1], full[:, : t + 1])
    # without the causal mask (Mask-CTC), later tokens do matter
    a = m.decoder(enc, enc_mask, tokens, torch.tensor([6, 6]), causal=False)
    b = m.decoder(enc, enc_mask, changed, torch.tensor([6, 6]), causal=False)
    assert not torch.allclose(a[:, 0], b[:, 0])


@pytest.mark.parametrize("changes", [dict(pre_norm=True), dict(pre_norm=False), dict(block="conformer", conv_kernel=7),
                                     dict(utterance_cmn=True),
                                     dict(interctc_weight=0.3, interctc_condition=True, block="conformer", conv_kernel=7)])
def test_padding_invariance(changes):
    m = model(**changes).eval()
    feats, lens, tokens, token_lens = batch(lengths=(61, 33), token_lens=(5, 2))
    with torch.no_grad():
        enc, enc_lens = m.encode(feats, lens)
        batch_loss = m(feats, lens, tokens, token_lens)
        n = int(enc_lens[1])
        alone = [m(feats[i:i + 1, : lens[i]], lens[i:i + 1], tokens[i:i + 1, : token_lens[i]], token_lens[i:i + 1])
                 for i in range(2)]
        enc1, enc1_lens = m.encode(feats[1:, :33], lens[1:])
    assert enc1_lens.item() == n == enc1.size(1)
    torch.testing.assert_close(enc[1:, :n], enc1, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m.ctc_log_probs(enc)[1:, :n], m.ctc_log_probs(enc1), atol=1e-5, rtol=1e-5)
    for key in ("loss", "loss_ctc", "loss_att"):  # batch losses are sums divided by the batch size
        torch.testing.assert_close(2 * batch_loss[key], alone[0][key] + alone[1][key], atol=1e-4, rtol=1e-5)


def test_utterance_cmn_removes_a_per_utterance_offset():
    """A channel gain (a constant added to every log-mel frame of one utterance) changes nothing."""
    m = model(utterance_cmn=True).eval()
    feats, lens, _, _ = batch(lengths=(61, 33))
    shifted = feats.clone()
    shifted[0] += 3.0
    shifted[1, :33] -= 2.0  # padding keeps its values: only real frames enter the mean
    with torch.no_grad():
        torch.testing.assert_close(m.encode(shifted, lens)[0], m.encode(feats, lens)[0], atol=1e-4, rtol=1e-4)
        plain = model(utterance_cmn=False).eval()
        assert not torch.allclose(plain.encode(shifted, lens)[0], plain.encode(feats, lens)[0], atol=1e-3)


def test_speaker_cmn_removes_the_speakers_offset_and_keeps_the_utterances_own_level():
    """A channel (a constant on every frame of every utterance of a speaker, so on its mean too) changes nothing;
    one utterance louder than its speaker's mean stays so (per-utterance CMN would erase that)."""
    m = model(speaker_cmn=True).eval()
    feats, lens, _, _ = batch(lengths=(61, 33))
    mean = torch.stack([feats[0, :61].mean(0), feats[1, :33].mean(0)]) + torch.randn(2, FEAT)
    with torch.no_grad():
        enc = m.encode(feats, lens, mean)[0]
        torch.testing.assert_close(m.encode(feats + 3.0, lens, mean + 3.0)[0], enc, atol=1e-4, rtol=1e-4)
        louder = feats.clone()
        louder[0] += 3.0
        assert not torch.allclose(m.encode(louder, lens, mean)[0][0], enc[0], atol=1e-3)
        # no speaker mean given (one file alone): the utterance's own mean, as utterance_cmn
        alone = model(utterance_cmn=True).eval()
        torch.testing.assert_close(m.encode(feats, lens)[0], alone.encode(feats, lens)[0])
        own = torch.stack([feats[0, :61].mean(0), feats[1, :33].mean(0)])
        torch.testing.assert_close(m.encode(feats, lens, own)[0], alone.encode(feats, lens)[0], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="choose one"):
        model(speaker_cmn=True, utterance_cmn=True)


def test_incremental_step_equals_full_pass():
    m = model(decoder_layers=2).eval()
    feats, lens, _, _ = batch()
    with torch.no_grad():
        enc, enc_lens = m.encode(feats, lens)
        enc_mask = lengths_to_mask(enc_lens, enc.size(1))
        tokens = torch.cat([torch.full((2, 1), SOS), torch.randint(5, VOCAB, (2, 6))], 1)
        full = m.decoder(enc, enc_mask, tokens, torch.tensor([7, 7])).log_softmax(-1)
        cache = None
        for t in range(1, 8):
            step, cache = m.decoder_step(enc, enc_mask, tokens[:, :t], cache)
            torch.testing.assert_close(step, full[:, t - 1], atol=1e-5, rtol=1e-5)
        assert len(cache) == 4 and cache[0].shape == (2, 7, 2 * 64) and cache[2].shape == (2, enc.size(1), 128)
        # a whole prefix at once, then reordering hypotheses as beam search does
        _, cache = m.decoder_step(enc, enc_mask, tokens[:, :4])
        idx = torch.tensor([1, 1, 0])
        step, _ = m.decoder_step(enc[idx], enc_mask[idx], tokens[idx, :5], [c[idx] for c in cache])
        torch.testing.assert_close(step, full[idx, 4], atol=1e-5, rtol=1e-5)
        # the longest utterance alone has no padded frame: the step then skips the memory mask
        assert enc_mask[:1].all()
        cache = None
        for t in range(1, 8):
            step, cache = m.decoder_step(enc[:1], enc_mask[:1], tokens[:1, :t], cache)
            torch.testing.assert_close(step, full[:1, t - 1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("changes", [dict(), dict(interctc_weight=0.3, interctc_condition=True)])
def test_bf16_encoder_is_close_to_fp32_and_hands_on_fp32(changes):
    m = model(**changes).eval()
    feats, lens, _, _ = batch()
    with torch.no_grad():
        ref, ref_lens = m.encode(feats, lens)
        m.set_encoder_dtype(torch.bfloat16)
        enc, enc_lens = m.encode(feats, lens)
    assert m.encoder_dtype == torch.bfloat16 and m.cmvn_mean.dtype == m.decoder.output.weight.dtype == torch.float32
    assert enc.dtype == torch.float32 and torch.equal(enc_lens, ref_lens)
    assert 0 < (enc - ref).abs().max() < 0.1 * ref.abs().max()  # bf16 rounding, not a different function


@pytest.mark.parametrize("factor", [4, 6, 8])
def test_subsampling_lengths(factor):
    sub = Conv2dSubsampling(FEAT, 8, factor)
    for T in range(1, 60):
        x, out_lens = sub(torch.randn(1, T, FEAT), torch.tensor([T]))
        expected = {4: ((T - 1) // 2 - 1) // 2, 6: ((T - 1) // 2 - 2) // 3,
                    8: (((T - 1) // 2 - 1) // 2 - 1) // 2}[factor]
        assert out_lens.item() == max(expected, 0) == subsampled_length(T, factor)
        if T >= sub.receptive_field:
            assert x.size(1) == expected
        assert not x[:, out_lens.item():].any()  # beyond the length: zeros


def test_attention_weights_path_equals_fused():
    torch.manual_seed(0)
    att = MultiHeadAttention(32, 4).eval()
    q, kv = torch.randn(3, 5, 32), torch.randn(3, 7, 32)
    mask = lengths_to_mask(torch.tensor([7, 3, 0]), 7).unsqueeze(1)  # the last row has no valid key
    fused, none, _ = att(q, kv, kv, mask)
    explicit, w, _ = att(q, kv, kv, mask, need_weights=True)
    assert none is None and w.shape == (3, 4, 5, 7)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(w[:2].sum(-1), torch.ones(2, 4, 5))
    assert not w[1, ..., 3:].any() and not w[2].any()


@pytest.mark.parametrize("changes", [dict(pre_norm=False), dict(pre_norm=True, tie_embeddings=True),
                                     dict(ctc_weight=1.0), dict(ctc_weight=0.0), dict(subsampling=6),
                                     dict(subsampling=8), dict(block="conformer", conv_kernel=15),
                                     dict(subsampling_channels=16)])
def test_variants_train(changes):
    m = model(**changes).train()
    out = m(*batch())
    assert torch.isfinite(out["loss"])
    assert ("loss_ctc" in out) == (m.cfg.ctc_weight > 0) and ("loss_att" in out) == (m.cfg.ctc_weight < 1)
    out["loss"].backward()
    if m.cfg.tie_embeddings:
        assert m.decoder.output.weight is m.decoder.embed.weight
        assert m.count_parameters() == model().count_parameters() - VOCAB * 64


@pytest.mark.parametrize("changes,kwargs", [(dict(nat_weight=0.5), {}), ({}, dict(sampling_prob=0.5))])
def test_nat_loss_and_scheduled_sampling(changes, kwargs):
    m = model(**changes).train()
    out = m(*batch(), **kwargs)
    assert torch.isfinite(out["loss"]) and torch.isfinite(out["loss_att"])
    assert ("loss_nat" in out) == bool(changes)
    out["loss"].backward()
    grads = [p.grad for p in m.decoder.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_cmvn_is_applied():
    m = model().eval()
    feats, lens, _, _ = batch()
    enc, _ = m.encode(feats, lens)
    m.set_cmvn(torch.full((FEAT,), 2.0), torch.full((FEAT,), 3.0))
    shifted, _ = m.encode(feats * 3 + 2, lens)
    torch.testing.assert_close(enc, shifted, atol=1e-4, rtol=1e-4)


def greedy_decode(m, enc, enc_lens, max_len=10):
    enc_mask = lengths_to_mask(enc_lens, enc.size(1))
    hyps = []
    for i in range(enc.size(0)):
        tokens, cache = torch.tensor([[SOS]]), None
        for _ in range(max_len):
            log_probs, cache = m.decoder_step(enc[i:i + 1], enc_mask[i:i + 1], tokens, cache)
            best = log_probs.argmax(-1, keepdim=True)
            if best.item() == EOS:
                break
            tokens = torch.cat([tokens, best], 1)
        hyps.append(tokens[0, 1:].tolist())
    return hyps


def test_tiny_model_overfits():
    m = model(dropout=0.0, label_smoothing=0.0)
    feats, lens, tokens, token_lens = batch(lengths=(40, 36, 32, 28), token_lens=(4, 3, 3, 2), seed=3)
    targets = [tokens[i, : token_lens[i]].tolist() for i in range(4)]
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for _ in range(150):
        opt.zero_grad()
        m(feats, lens, tokens, token_lens)["loss"].backward()
        opt.step()
    m.eval()
    with torch.no_grad():
        enc, enc_lens = m.encode(feats, lens)
        assert greedy_decode(m, enc, enc_lens) == targets
        assert m.ctc_greedy(enc, enc_lens) == targets



@pytest.mark.parametrize("p", [0.1, 0.3])
def test_dropout_keeps_the_expectation_and_routes_gradients_through_kept_elements(p):
    from asr_transformer.model.dropout import Dropout

    torch.manual_seed(0)
    layer = Dropout(p)
    x = torch.full((1000, 1000), 2.0, requires_grad=True)
    y = layer(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 3e-3
    assert abs(y.mean().item() - 2.0) < 0.02  # kept values scaled by 1 / (1 - p)
    assert torch.allclose(y[kept], torch.tensor(2.0 / (1 - p)))
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)
    assert torch.allclose(x.grad[kept], torch.tensor(1.0 / (1 - p)))
    rows = kept[:500].float().mean(1)  # masks of different rows are independent, not repeated
    assert rows.std() > 0 and not torch.equal(kept[0], kept[1])
    layer.eval()
    assert layer(x) is x
    torch.manual_seed(0)
    again = Dropout(p)(x)
    assert torch.equal(again, y)  # the seed decides the mask


def test_dropout_edges():
    from asr_transformer.model.dropout import Dropout

    torch.manual_seed(0)  # F.dropout at p = 1 - 1e-7 keeps an element once in 10⁷: fixed draws
    x = torch.ones(64, 64)
    assert torch.equal(Dropout(1.0)(x), torch.zeros_like(x))
    assert torch.equal(Dropout(1 - 1e-7)(x), torch.zeros_like(x))  # rounds to "keep nothing", no 1/0
    assert torch.equal(Dropout(1e-7)(x), x)  # rounds to "keep everything"
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)


def test_conformer_depthwise_conv_equals_conv1d():
    """The conv2d-on-a-view depthwise convolution is the module's Conv1d, values and gradients."""
    from asr_transformer.model.conformer import ConvModule

    torch.manual_seed(0)
    module = ConvModule(d_model=12, kernel=5)
    module.pointwise_in = torch.nn.Identity()  # feed the depthwise conv directly (GLU halves 2D → D)
    x = torch.randn(3, 9, 24, requires_grad=True)
    valid = torch.ones(3, 9, 1, dtype=torch.bool)
    got, _ = module(x, valid)
    h = torch.nn.functional.glu(x, dim=-1)
    h = module.depthwise(h.transpose(1, 2)).transpose(1, 2)  # the plain Conv1d formulation
    want = module.pointwise_out(torch.nn.functional.silu(module.norm(h)))
    torch.testing.assert_close(got, want)
    weight_grads = [torch.autograd.grad(out.square().sum(), (x, module.depthwise.weight, module.depthwise.bias))
                    for out in (got, want)]
    for a, b in zip(*weight_grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("changes", [dict(), dict(block="conformer", conv_kernel=7)])
def test_interctc_loss_is_the_intermediate_blocks_ctc(changes):
    """With model.interctc_weight = v the CTC part is (1 − v)·CTC(final) + v·CTC(norm(block k output)),
    k the middle block; v = 0 leaves the loss as it was; the intermediate loss trains the lower blocks."""
    m = model(encoder_layers=4, ctc_weight=0.4, interctc_weight=0.25, **changes).eval()
    feats, lens, tokens, token_lens = batch()
    out = m(feats, lens, tokens, token_lens)
    with torch.no_grad():  # the intermediate output by hand: blocks 1..2 of 4, then the final LayerNorm
        x, enc_lens = m.encoder.subsampling(m.normalize(feats, lens), lens)
        x = m.encoder.pos(x)
        mask = lengths_to_mask(enc_lens, x.size(1)).unsqueeze(1)
        for block in m.encoder.layers[:2]:
            x = block(x, mask, mask.transpose(1, 2))
        inter = m.ctc.loss(m.encoder.norm(x), enc_lens, tokens, token_lens)
    torch.testing.assert_close(out["loss_interctc"], inter)
    expected = 0.4 * (0.75 * out["loss_ctc"] + 0.25 * inter) + 0.6 * out["loss_att"]
    torch.testing.assert_close(out["loss"], expected)
    plain = ASRModel(dataclasses.replace(m.cfg, interctc_weight=0.0)).eval()
    plain.load_state_dict(m.state_dict())
    same = plain(feats, lens, tokens, token_lens)
    assert "loss_interctc" not in same
    torch.testing.assert_close(same["loss"], 0.4 * out["loss_ctc"] + 0.6 * out["loss_att"])
    out["loss_interctc"].backward()  # reaches the lower blocks, not the upper ones
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in m.encoder.layers[0].parameters())
    assert all(p.grad is None for p in m.encoder.layers[3].parameters())
    with pytest.raises(ValueError, match="interctc_layer=4"):
        model(encoder_layers=4, interctc_weight=0.3, interctc_layer=4)


def test_self_conditioned_ctc_feeds_the_intermediate_posteriors_back():
    """model.interctc_condition: after the InterCTC block, x + condition(softmax(ctc(norm(x)))) goes on to the
    next block, in `encode` (decoding) as in training; a zero conditioning layer gives plain InterCTC."""
    cfg = dict(encoder_layers=4, ctc_weight=0.4, interctc_weight=0.25)
    m = model(interctc_condition=True, **cfg).eval()
    feats, lens, tokens, token_lens = batch()
    with torch.no_grad():  # by hand: blocks 1..2, the conditioning, blocks 3..4, the final LayerNorm
        x, enc_lens = m.encoder.subsampling(m.normalize(feats, lens), lens)
        x = m.encoder.pos(x)
        mask = lengths_to_mask(enc_lens, x.size(1)).unsqueeze(1)
        for block in m.encoder.layers[:2]:
            x = block(x, mask, mask.transpose(1, 2))
        inter = m.encoder.norm(x)
        x = x + m.condition(m.ctc.proj(inter).softmax(-1))
        for block in m.encoder.layers[2:]:
            x = block(x, mask, mask.transpose(1, 2))
        want = m.encoder.norm(x)
        enc, _ = m.encode(feats, lens)
        out = m(feats, lens, tokens, token_lens)
    valid = lengths_to_mask(enc_lens, enc.size(1))
    torch.testing.assert_close(enc[valid], want[valid])
    torch.testing.assert_close(out["loss_ctc"], m.ctc.loss(want, enc_lens, tokens, token_lens))
    torch.testing.assert_close(out["loss_interctc"], m.ctc.loss(inter, enc_lens, tokens, token_lens))

    plain = model(**cfg).eval()
    plain.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("condition.")})
    with torch.no_grad():
        assert not torch.allclose(plain.encode(feats, lens)[0], enc)  # the conditioning does change the output
        m.condition.weight.zero_()
        m.condition.bias.zero_()
        torch.testing.assert_close(m.encode(feats, lens)[0], plain.encode(feats, lens)[0])

    old_names = {("encoder." + k if k.startswith("condition.") else k): v for k, v in m.state_dict().items()}
    before = model(seed=5, interctc_condition=True, **cfg).eval()
    before.load_state_dict(old_names)  # a package of old: the conditioning layer was the encoder's
    with torch.no_grad():
        torch.testing.assert_close(before.encode(feats, lens)[0], m.encode(feats, lens)[0])

    m.train()
    m(feats, lens, tokens, token_lens)["loss"].backward()
    assert m.condition.weight.grad.abs().sum() > 0  # the final CTC and decoder losses train it
    with pytest.raises(ValueError, match="interctc_condition needs InterCTC"):
        model(interctc_condition=True)


def test_the_block_type_is_one_of_the_encoders():
    with pytest.raises(ValueError, match="model.block='lstm': must be one of transformer, conformer"):
        model(block="lstm")
