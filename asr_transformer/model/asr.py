"""The whole model: CMVN → encoder → (CTC head, attention decoder); the training losses (the decoder's
autoregressive one and, with model.nat_weight, its non-autoregressive one); the pieces the decoders need (encode,
CTC log-probs, one decoder step; the decoder's other passes: `ASRModel.decoder`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from asr_transformer.config import ModelConfig
from asr_transformer.errors import UserError
from asr_transformer.model import cmvn
from asr_transformer.model.ctc import CTC
from asr_transformer.model.decoder import Decoder
from asr_transformer.model.encoder import Encoder
from asr_transformer.model.mask import lengths_to_mask
from asr_transformer.tokens import EOS, IGNORE_ID, MASK, NUM_SPECIAL, PAD, SOS


def label_smoothed_ce(logits: torch.Tensor, targets: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Label-smoothed cross-entropy over the non-ignored targets (IGNORE_ID = -1), summed and divided
    by the batch size (WeNet's normalize_length=False: long utterances weigh more).

    logits (B, L, V), targets (B, L). The smoothing mass is spread over all V classes (torch's
    convention), so a perfect prediction has a small positive loss.
    """
    loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_ID,
                           label_smoothing=smoothing, reduction="sum")
    return loss / logits.size(0)


def token_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Fraction of non-ignored targets predicted by the argmax (a 0-dim tensor, no sync)."""
    valid = targets != IGNORE_ID
    return ((logits.argmax(-1) == targets) & valid).sum() / valid.sum().clamp(min=1)


def _after_sos(tokens: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The decoder's input in training: tokens (B, L) with `valid` (B, L) → `<sos> y1 … yn` (B, L+1), PAD-padded."""
    return torch.cat([tokens.new_full((tokens.size(0), 1), SOS), tokens.masked_fill(~valid, PAD)], 1)


def pooled(enc: torch.Tensor, enc_lens: torch.Tensor) -> torch.Tensor:
    """enc (B, T', D), enc_lens (B,) → (B, D): each window's encoder output averaged over its frames (0 for none)."""
    mask = lengths_to_mask(enc_lens.to(enc.device), enc.size(1)).unsqueeze(-1)
    return (enc * mask).sum(1) / mask.sum(1).clamp(min=1)


class NoCTCError(UserError, ValueError):
    """A decoding mode that needs the CTC head, asked of a model without one."""


class ASRModel(nn.Module):
    """Transformer encoder-decoder with a joint CTC head (Watanabe et al. 2017; WeNet/ESPnet style).

    Token ids are fixed (asr_transformer.tokens): BLANK = PAD = 0, UNK = 1, SOS = 2, EOS = 3, MASK = 4.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.vocab_size <= NUM_SPECIAL:
            raise ValueError(f"model.vocab_size={cfg.vocab_size}: set it from the tokenizer "
                             f"(it includes the {NUM_SPECIAL} special tokens)")
        if not 0.0 <= cfg.interctc_weight < 1.0:
            raise ValueError(f"model.interctc_weight={cfg.interctc_weight}: must be in [0, 1)")
        if not 0 <= cfg.interctc_layer < cfg.encoder_layers:
            raise ValueError(f"model.interctc_layer={cfg.interctc_layer}: must be a block below the last "
                             f"(1..{cfg.encoder_layers - 1}), or 0 for the middle one")
        if cfg.utterance_cmn and cfg.speaker_cmn:
            raise ValueError("model.utterance_cmn and model.speaker_cmn: choose one (speaker_cmn already falls back "
                             "to the utterance's own mean where no speaker is known)")
        if cfg.nat_weight > 0 and not cfg.ctc:
            raise ValueError("model.nat_weight needs the CTC head (model.ctc): CTC gives the NAT decoding its output "
                             "length and first guess")
        if cfg.interctc_condition and not (cfg.interctc_weight > 0 and cfg.ctc_weight > 0):
            raise ValueError("model.interctc_condition needs InterCTC (model.interctc_weight > 0, model.ctc_weight > 0): "
                             "the posteriors it feeds back are the intermediate CTC's")
        self.cfg = cfg
        self.register_buffer("cmvn_mean", torch.zeros(cfg.input_dim))
        self.register_buffer("cmvn_istd", torch.ones(cfg.input_dim))
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.ctc = CTC(cfg.d_model, cfg.vocab_size) if cfg.ctc else None
        self.no_speech = nn.Linear(cfg.d_model, 1) if cfg.no_speech_head else None  # `no_speech_prob`
        self.inter_layer = cfg.interctc_layer or (cfg.encoder_layers + 1) // 2  # InterCTC's block (1-based)
        # self-conditioned CTC: that block's CTC posteriors (vocab) → d_model, added to its output
        self.condition = nn.Linear(cfg.vocab_size, cfg.d_model) if cfg.interctc_condition else None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in ("weight", "bias"):  # packages of old kept the self-conditioning layer in the encoder
            old = f"{prefix}encoder.condition.{name}"
            if old in state_dict:
                state_dict[f"{prefix}condition.{name}"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def set_cmvn(self, mean, std) -> None:
        """Global CMVN statistics, (input_dim,) each; features become (x - mean) / std (model/cmvn.py)."""
        self.cmvn_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.cmvn_istd.copy_(cmvn.inverse_std(std))

    def count_parameters(self) -> int:
        """Trainable parameters (a tied embedding counts once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # ---- inference pieces -------------------------------------------------------------------------

    def normalize(self, feats: torch.Tensor, feat_lens: torch.Tensor,
                  speaker_mean: torch.Tensor | None = None) -> torch.Tensor:
        """CMVN: raw log-mel (B, T, input_dim) → normalised, same shape. With model.speaker_cmn, `speaker_mean`
        (B, input_dim), each utterance's speaker's mean log-mel (`data.features.speaker_means`), replaces the
        global mean; without it (or with model.utterance_cmn) each utterance's own mean does."""
        return cmvn.normalize(feats, feat_lens, self.cmvn_mean, self.cmvn_istd,
                              per_utterance=self.cfg.utterance_cmn or self.cfg.speaker_cmn,
                              speaker_mean=speaker_mean if self.cfg.speaker_cmn else None)

    def encode(self, feats: torch.Tensor, feat_lens: torch.Tensor, speaker_mean: torch.Tensor | None = None,
               chunk: int = 0, left_chunks: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
        """feats (B, T, input_dim) raw log-mel, feat_lens (B,) [, speaker_mean (B, input_dim): `normalize`]
        → enc (B, T', D), enc_lens (B,). chunk > 0: the encoder attends in chunks of that many frames, each
        seeing `left_chunks` chunks before it (all when < 0): what streaming gives (`encode_chunk`)."""
        feats = self.normalize(feats, feat_lens, speaker_mean)
        enc, enc_lens = self.encoder(feats.to(self.encoder_dtype), feat_lens, chunk, left_chunks, self._interctc())
        return enc.float(), enc_lens

    def encode_chunk(self, feats: torch.Tensor, state) -> torch.Tensor:
        """Streaming: the next chunk's encoder output (B, T', D) float32 from its raw log-mel input frames
        (B, T, input_dim); `state` is the encoder's `EncoderState` (`encoder.start_stream`), updated."""
        if self.cfg.utterance_cmn or self.cfg.speaker_cmn:
            raise ValueError("a model that subtracts each utterance's mean cannot stream")
        feats = (feats - self.cmvn_mean) * self.cmvn_istd
        return self.encoder.forward_chunk(feats.to(self.encoder_dtype), state, self._interctc()).float()

    def _interctc(self, kept: list | None = None):
        """What follows block `inter_layer` (an `after_block` of the encoder), or None where nothing does: its
        output through the encoder's final LayerNorm is appended to `kept` (InterCTC's loss reads it), and with
        self-conditioning x + condition(softmax(ctc(that))) goes on to the next block."""
        if kept is None and self.condition is None:
            return None

        def after_block(i: int, x: torch.Tensor) -> torch.Tensor:
            if i != self.inter_layer:
                return x
            inter = self.encoder.norm(x)
            if kept is not None:
                kept.append(inter)
            if self.condition is None:
                return x
            logits = self.ctc.proj(inter.to(self.ctc.proj.weight.dtype))  # the head stays float32 under bf16
            return x + self.condition(logits.softmax(-1)).to(x.dtype)
        return after_block

    @property
    def encoder_dtype(self) -> torch.dtype:
        """The floating-point type the encoder computes in (float32 unless `set_encoder_dtype` changed it)."""
        return next(self.encoder.parameters()).dtype

    def set_encoder_dtype(self, dtype: torch.dtype) -> "ASRModel":
        """Run the encoder in `dtype`, for inference (bfloat16: faster on CPUs with AMX, and on GPUs).
        The CMVN statistics, CTC head and decoder stay float32 (`encode` returns float32): the decoder's
        incremental steps are matrix-vector products, which bfloat16 makes slower on CPU, not faster."""
        self.encoder.to(dtype)
        return self

    def ctc_log_probs(self, enc: torch.Tensor) -> torch.Tensor:
        """enc (B, T', D) → (B, T', vocab) float32 log-probabilities."""
        return self._ctc_head().log_probs(enc)

    def no_speech_prob(self, enc: torch.Tensor, enc_lens: torch.Tensor) -> torch.Tensor:
        """enc (B, T', D), enc_lens (B,) → (B,) the no-speech head's probability that each window holds no speech,
        from its encoder output averaged over its frames (model.no_speech_head; a window of no frame averages 0)."""
        if self.no_speech is None:
            raise ValueError("this model has no no-speech head (model.no_speech_head): `asr no-speech` trains one")
        return torch.sigmoid(self.no_speech(pooled(enc, enc_lens)).squeeze(-1))

    def ctc_greedy(self, enc: torch.Tensor, enc_lens: torch.Tensor) -> list[list[int]]:
        return self._ctc_head().greedy(enc, enc_lens)

    def _ctc_head(self) -> CTC:
        if self.ctc is None:
            raise NoCTCError("this model has no CTC head (model.ctc: false, e.g. an imported Whisper): decode with "
                             "mode beam or greedy, or import it with a CTC head and fine-tune that")
        return self.ctc

    def decoder_step(self, enc: torch.Tensor, enc_mask: torch.Tensor, tokens: torch.Tensor,
                     cache: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One incremental decoder step; see Decoder.step for shapes and the cache format."""
        return self.decoder.step(enc, enc_mask, tokens, cache)

    # ---- training ---------------------------------------------------------------------------------

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor, tokens: torch.Tensor,
                token_lens: torch.Tensor, sampling_prob: float = 0.0,
                speaker_mean: torch.Tensor | None = None) -> dict:
        """Training losses.

        Args:
            feats (B, T, F), feat_lens (B,); tokens (B, L) int64 padded with -1, token_lens (B,).
            speaker_mean: (B, F), with model.speaker_cmn (see `normalize`).
            sampling_prob: scheduled sampling, the probability of feeding the decoder its own
                (previous-position) prediction instead of the reference token.
        Returns:
            dict with `loss` = ctc_weight·CTC + (1 - ctc_weight)·loss_att, and the parts that were
            computed: `loss_ctc` (absent when ctc_weight = 0); `loss_att` and `acc` (decoder token
            accuracy; absent when ctc_weight = 1). With model.nat_weight > 0, + nat_weight·loss_nat, the
            decoder's masked-token loss without the causal mask (`_masked_lm`), and `acc_nat`. With InterCTC
            (model.interctc_weight = v > 0) CTC = (1 − v)·loss_ctc + v·loss_interctc, the CTC loss of an
            intermediate block's output (with model.interctc_condition its posteriors also feed the blocks
            above, as in `encode`). All losses are sums over the batch divided by the batch size.
        """
        inter_weight = self.cfg.interctc_weight if self.cfg.ctc_weight > 0 else 0.0
        if inter_weight <= 0:
            enc, enc_lens = self.encode(feats, feat_lens, speaker_mean)
            return self.losses(enc, enc_lens, tokens, token_lens, sampling_prob)
        kept: list[torch.Tensor] = []
        enc, enc_lens = self.encoder(self.normalize(feats, feat_lens, speaker_mean), feat_lens,
                                     after_block=self._interctc(kept))
        return self.losses(enc, enc_lens, tokens, token_lens, sampling_prob, kept[0])

    def losses(self, enc: torch.Tensor, enc_lens: torch.Tensor, tokens: torch.Tensor, token_lens: torch.Tensor,
               sampling_prob: float = 0.0, intermediate: torch.Tensor | None = None) -> dict:
        """The losses of `forward` from an encoder output (B, T', D) already computed (and, for InterCTC,
        an intermediate block's output, (B, T', D))."""
        w, out = self.cfg.ctc_weight, {}
        loss = enc.new_zeros(())
        if w > 0:
            out["loss_ctc"] = ctc = self.ctc.loss(enc, enc_lens, tokens, token_lens)
            if intermediate is not None:
                v = self.cfg.interctc_weight
                out["loss_interctc"] = self.ctc.loss(intermediate, enc_lens, tokens, token_lens)
                ctc = (1 - v) * ctc + v * out["loss_interctc"]
            loss = loss + w * ctc
        enc_mask = lengths_to_mask(enc_lens, enc.size(1))
        if w < 1:
            logits, targets = self._teacher_forcing(enc, enc_mask, tokens, token_lens, sampling_prob)
            out["loss_att"] = label_smoothed_ce(logits, targets, self.cfg.label_smoothing)
            out["acc"] = token_accuracy(logits.detach(), targets)
            loss = loss + (1 - w) * out["loss_att"]
        if self.cfg.nat_weight > 0:
            logits, targets = self._masked_lm(enc, enc_mask, tokens, token_lens)
            out["loss_nat"] = label_smoothed_ce(logits, targets, self.cfg.label_smoothing)
            out["acc_nat"] = token_accuracy(logits.detach(), targets)
            loss = loss + self.cfg.nat_weight * out["loss_nat"]
        out["loss"] = loss
        return out

    def _teacher_forcing(self, enc, enc_mask, tokens, token_lens, sampling_prob):
        """Decoder reads `<sos> y1 … yn`, predicts `y1 … yn <eos>`. → logits (B, L+1, V), targets (B, L+1)."""
        B, L = tokens.shape
        valid = lengths_to_mask(token_lens, L)
        ys_in = _after_sos(tokens, valid)
        ys_out = torch.cat([tokens.masked_fill(~valid, IGNORE_ID), tokens.new_full((B, 1), IGNORE_ID)], 1)
        ys_out = ys_out.scatter(1, token_lens.unsqueeze(1), EOS)
        in_lens = token_lens + 1
        if sampling_prob > 0:  # scheduled sampling (Bengio et al. 2015), one extra no-grad pass
            with torch.no_grad():
                pred = self.decoder(enc, enc_mask, ys_in, in_lens).argmax(-1)  # pred[:, i] guesses ys_in[:, i+1]
            swap = torch.rand(B, L, device=tokens.device) < sampling_prob
            ys_in = torch.cat([ys_in[:, :1], torch.where(swap, pred[:, :-1], ys_in[:, 1:])], 1)
        return self.decoder(enc, enc_mask, ys_in, in_lens), ys_out

    def _masked_lm(self, enc, enc_mask, tokens, token_lens):
        """The NAT objective (Mask-CTC's, Higuchi et al. 2020, in teacher forcing's layout): a uniformly drawn number
        (1…n) of random tokens of `y1 … yn` become MASK; the decoder reads `<sos> y1 … yn` so masked, without the
        causal mask, and position i predicts token i + 1 where that one is masked (loss only there).
        → logits (B, L+1, V), targets (B, L+1)."""
        B, L = tokens.shape
        valid = lengths_to_mask(token_lens, L)
        count = (torch.rand(B, device=tokens.device) * token_lens).long() + 1  # (B,) in 1 … n
        rank = torch.rand(B, L, device=tokens.device).masked_fill(~valid, 2.0).argsort(1).argsort(1)
        masked = (rank < count.unsqueeze(1)) & valid
        ys_in = _after_sos(tokens.masked_fill(masked, MASK), valid)
        ys_out = torch.cat([tokens.masked_fill(~masked, IGNORE_ID), tokens.new_full((B, 1), IGNORE_ID)], 1)
        return self.decoder(enc, enc_mask, ys_in, token_lens + 1, causal=False), ys_out
