import math

import numpy as np
import pytest
import torch
import torchaudio.compliance.kaldi as kaldi

from asr_transformer.config import AugmentConfig, FeatureConfig
from asr_transformer.data.features import (CMVNAccumulator, fbank, load_cmvn, num_frames, random_equalizer, save_cmvn,
                                           speaker_means, spec_augment, speed_perturb)


@pytest.mark.parametrize("samples", [400, 401, 559, 560, 16000, 23456])
@pytest.mark.parametrize("bins", [40, 80])
def test_fbank_matches_torchaudio_kaldi(samples, bins):
    g = torch.Generator().manual_seed(samples)
    wave = 0.1 * torch.randn(samples, generator=g) + 0.05 * torch.sin(torch.arange(samples) * 0.3)
    cfg = FeatureConfig(num_mel_bins=bins)
    ours = fbank(wave, cfg)
    ref = kaldi.fbank((wave * 32768).unsqueeze(0), num_mel_bins=bins, frame_length=25.0, frame_shift=10.0,
                      dither=0.0, energy_floor=0.0, sample_frequency=16000)
    assert ours.shape == ref.shape == (num_frames(samples, cfg), bins)
    torch.testing.assert_close(ours, ref, atol=2e-3, rtol=1e-4)


def test_fbank_of_8k_config_matches():
    wave = 0.1 * torch.randn(8000, generator=torch.Generator().manual_seed(0))
    cfg = FeatureConfig(sample_rate=8000, num_mel_bins=23)
    ref = kaldi.fbank((wave * 32768).unsqueeze(0), num_mel_bins=23, sample_frequency=8000, dither=0.0)
    torch.testing.assert_close(fbank(wave, cfg), ref, atol=2e-3, rtol=1e-4)


@pytest.mark.parametrize("warp", [0.9, 0.95, 1.05, 1.1])
def test_warped_fbank_matches_torchaudio_kaldi_vtln(warp):
    """Vocal tract length perturbation warps the filterbank exactly as Kaldi's VTLN does, and changes it."""
    wave = 0.1 * torch.randn(16000, generator=torch.Generator().manual_seed(1)) + 0.1 * torch.sin(torch.arange(16000) * 0.2)
    ours = fbank(wave, FeatureConfig(), warp=warp)
    ref = kaldi.fbank((wave * 32768).unsqueeze(0), num_mel_bins=80, dither=0.0, energy_floor=0.0, vtln_warp=warp)
    torch.testing.assert_close(ours, ref, atol=2e-3, rtol=1e-4)
    assert (ours - fbank(wave, FeatureConfig())).abs().max() > 0.1


def test_random_equalizer_adds_one_smooth_bounded_curve_to_every_frame():
    feats = torch.randn(30, 80, generator=torch.Generator().manual_seed(0))
    out = random_equalizer(feats, 6.0, torch.Generator().manual_seed(1))
    curve = out - feats
    torch.testing.assert_close(curve, curve[:1].expand_as(curve))  # a filter: the same gain in every frame
    assert 0.1 < curve.abs().max() <= 6.0 * math.log(10) / 10 + 1e-6  # ±6 dB of power, in natural log
    bends = (curve[0, 2:] - 2 * curve[0, 1:-1] + curve[0, :-2]).abs() > 1e-5
    assert int(bends.sum()) <= 2 * 4  # straight between the 6 points (a bend at each of the 4 inner ones)
    torch.testing.assert_close(random_equalizer(feats, 6.0, torch.Generator().manual_seed(1)), out)


def test_too_short_gives_no_frames():
    assert fbank(torch.zeros(100)).shape == (0, 80)


def test_cmvn_equals_direct_computation(tmp_path):
    rng = np.random.default_rng(0)
    chunks = [torch.from_numpy(rng.normal(5.0, 3.0, size=(n, 80)).astype(np.float32)) for n in (10, 250, 37)]
    acc = CMVNAccumulator(80)
    for c in chunks:
        acc.add(c)
    mean, std = acc.stats()
    direct = torch.cat(chunks).double()
    np.testing.assert_allclose(mean, direct.mean(0).numpy(), rtol=1e-10)
    np.testing.assert_allclose(std, direct.std(0, unbiased=False).numpy(), rtol=1e-8)
    save_cmvn(tmp_path / "cmvn.json", mean, std, acc.frames)
    m2, s2 = load_cmvn(tmp_path / "cmvn.json")
    np.testing.assert_allclose(m2, mean)
    np.testing.assert_allclose(s2, std)


def test_speaker_means_pool_all_frames_of_a_speaker():
    rng = np.random.default_rng(1)
    feats = [torch.from_numpy(rng.normal(i, 1.0, size=(n, 4)).astype(np.float32)) for i, n in enumerate((10, 30, 7, 5, 9))]
    speakers = ["ann", "bob", "ann", "unknown", "unknown"]
    means = speaker_means(speakers, lambda i: feats[i])
    ann = torch.cat([feats[0], feats[2]]).mean(0)  # frame-weighted: the 10-frame clip counts 10/17
    for i, expected in enumerate([ann, feats[1].mean(0), ann, feats[3].mean(0), feats[4].mean(0)]):
        torch.testing.assert_close(means[i], expected)  # "unknown": each utterance its own speaker
    assert not torch.allclose(means[0], (feats[0].mean(0) + feats[2].mean(0)) / 2)


def test_spec_augment_masks_and_is_seeded():
    feats = torch.randn(200, 80) + 10
    cfg = AugmentConfig(freq_masks=2, freq_mask_width=10, time_masks=2, time_mask_width=20, time_mask_ratio=0.2,
                        time_warp=5)
    a = spec_augment(feats, cfg, torch.Generator().manual_seed(3))
    b = spec_augment(feats, cfg, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == feats.shape
    zero_cols = (a == 0).all(0).sum()
    zero_rows = (a == 0).all(1).sum()
    assert 0 < zero_cols <= 20 and zero_rows <= 40
    assert not torch.equal(a, feats)
    none = AugmentConfig(freq_masks=0, time_masks=0, time_warp=0)
    assert torch.equal(spec_augment(feats, none, torch.Generator()), feats)


@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_speed_perturb_changes_length_and_pitch(factor):
    t = torch.arange(16000) / 16000
    wave = torch.sin(2 * torch.pi * 500 * t)
    out = speed_perturb(wave, factor)
    assert abs(len(out) - 16000 / factor) < 2
    peak = torch.fft.rfft(out).abs().argmax().item() * 16000 / len(out)
    assert abs(peak - 500 * factor) < 5
