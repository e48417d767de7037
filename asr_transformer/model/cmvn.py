"""CMVN, the first box of the model: raw log-mel features → (x − mean) · (1 / std), per feature dimension.

The global statistics are ASRModel's buffers `cmvn_mean` and `cmvn_istd` (so saved weights keep those names);
these functions compute and apply them. The statistics are accumulated by data/features.py: CMVNAccumulator.
"""

from __future__ import annotations

import torch

from asr_transformer.model.mask import lengths_to_mask


def inverse_std(std) -> torch.Tensor:
    """std (F,) → 1 / std as float32, a std below 1e-5 counting as 1e-5."""
    return 1.0 / torch.as_tensor(std, dtype=torch.float32).clamp(min=1e-5)


def normalize(feats: torch.Tensor, feat_lens: torch.Tensor, mean: torch.Tensor, istd: torch.Tensor,
              per_utterance: bool = False, speaker_mean: torch.Tensor | None = None) -> torch.Tensor:
    """feats (B, T, F) raw log-mel, feat_lens (B,) → (feats − m) · istd, same shape, where m is

    - `speaker_mean` (B, F), each utterance's speaker's mean log-mel, when given;
    - else with `per_utterance`, each utterance's own mean over its valid frames;
    - else the global `mean` (F,).

    The global `istd` (F,) scales in every case.
    """
    if speaker_mean is not None:
        return (feats - speaker_mean.to(feats.dtype).unsqueeze(1)) * istd
    if per_utterance:  # each utterance's mean over its own frames
        valid = lengths_to_mask(feat_lens, feats.size(1)).unsqueeze(-1)
        utterance_mean = (feats * valid).sum(1, keepdim=True) / feat_lens.clamp(min=1).view(-1, 1, 1)
        return (feats - utterance_mean) * istd
    return (feats - mean) * istd
