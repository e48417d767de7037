"""Searches over the CTC output alone, and the CTC prefix scorer that joint decoding uses.

- `ctc_greedy`: best path (argmax per frame, merge repeats, drop blanks), with per-token confidence.
- `CTCPrefixScorer`: the CTC prefix probability ψ(g·c) of N hypotheses g × K candidate tokens c at once
  (Watanabe et al. 2017, "Hybrid CTC/attention", Algorithm 2; ESPnet's CTCPrefixScoreTH), for
  label-synchronous joint CTC/attention beam search.
- `ctc_prefix_beam_search`: frame-synchronous CTC prefix beam search (Graves 2012; Hannun et al. 2014),
  vectorized over utterances × beams × the top tokens of each frame.

Notation (0-based frames t < T_b, the utterance's length; y_t(c) the CTC posterior of c at frame t):
    r^n_t(g), r^b_t(g): probability of the first t+1 frames giving exactly g, the last frame being
    (n) a non-blank of g's last token or (b) a blank. For the empty prefix, r^n = 0 and r^b_t = Π y_τ(blank).
    φ_t(g, c) = r^b_t(g) + (r^n_t(g) if c ≠ last(g) else 0)   — paths ready to emit a new c at t+1
    r^n_t(g·c) = (r^n_{t-1}(g·c) + φ_{t-1}) · y_t(c)
    r^b_t(g·c) = (r^b_{t-1}(g·c) + r^n_{t-1}(g·c)) · y_t(blank)
    ψ(g·c) = Σ_t φ_{t-1} · y_t(c)   = P(the output starts with g·c)
    ψ(g·<eos>) = r^n_{T_b-1}(g) + r^b_{T_b-1}(g)   = P(the output is exactly g)
with φ_{-1} = 1 for the empty g (0 otherwise). The two recursions are linear, first-order, so they have
closed forms, computed here for all frames at once with cumulative sums in log space (float64), rather than a
Python loop over frames:
    r^n_t = C_t + logcumsumexp_τ≤t(φ_{τ-1} − C_{τ-1}),   C_t = Σ_{τ≤t} log y_τ(c)
    r^b_t = B_t + logcumsumexp_τ≤t(r^n_{τ-1} − B_{τ-1}), B_t = Σ_{τ≤t} log y_τ(blank)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from asr_transformer.decode import Hypothesis
from asr_transformer.decode.context import ContextGraph
from asr_transformer.model.mask import lengths_to_mask
from asr_transformer.tokens import BLANK, EOS

NEG_INF = float("-inf")
LOG_FLOOR = -1e4  # log-probabilities are clamped here (e^-10000 is 0 anyway): keeps every sum finite
_CHUNK = 1 << 23  # elements of one (N, K, T) block when scoring many candidates (≈ 64 MB of float64)


# --------------------------------------------------------------------------------------------- greedy


@dataclass
class CTCGreedy:
    """Best-path CTC output of a batch: padded tokens (B, L), lengths (B,), per-token confidence (B, L) —
    the highest posterior over the frames of the token, as Mask-CTC uses — and the path log-probability (B,)."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    confidence: torch.Tensor
    score: torch.Tensor

    def hypotheses(self) -> list[list[Hypothesis]]:
        tokens, lengths, score = self.tokens.cpu(), self.lengths.tolist(), self.score.tolist()
        return [[Hypothesis(tokens[b, :n].tolist(), score[b], {"ctc": score[b]})] for b, n in enumerate(lengths)]


def ctc_greedy(log_probs: torch.Tensor, lengths: torch.Tensor, blank: int = BLANK) -> CTCGreedy:
    """Best path: argmax per frame, merge repeats, drop blanks. log_probs (B, T, V), lengths (B,).

    Vectorized: no loop over frames or utterances.
    """
    B, T, _ = log_probs.shape
    if T == 0:
        empty = log_probs.new_zeros(B, 0)
        return CTCGreedy(empty.long(), empty.new_zeros(B, dtype=torch.long), empty, log_probs.new_zeros(B))
    best_lp, best = log_probs.max(-1)  # (B, T)
    valid = lengths_to_mask(lengths, T)
    prev = torch.cat([best.new_full((B, 1), -1), best[:, :-1]], 1)
    in_token = valid & (best != blank)
    starts = in_token & (best != prev)  # first frame of each emitted token
    token_lens = starts.sum(1)
    L = int(token_lens.max()) if B else 0
    index = (starts.cumsum(1) - 1).masked_fill(~in_token, L)  # token index of each frame; L = a dump column
    tokens = best.new_zeros(B, L + 1).scatter_(1, index.masked_fill(~starts, L), best)[:, :L]
    confidence = best_lp.new_zeros(B, L + 1).scatter_reduce_(1, index, best_lp.exp(), "amax")[:, :L]
    score = (best_lp * valid).sum(1)
    return CTCGreedy(tokens, token_lens, confidence, score)


# --------------------------------------------------------------------------------------------- prefix scorer


@dataclass
class CTCPrefixState:
    """Prefix state of N hypotheses (all tensors have the hypotheses on dim 0)."""

    r_n: torch.Tensor  # (N, T) float64: log r^n_t(g)
    r_b: torch.Tensor  # (N, T) float64: log r^b_t(g)
    score: torch.Tensor  # (N,) float64: log ψ(g), the prefix score of g itself
    last: torch.Tensor  # (N,) int64: last token of g, -1 for the empty prefix
    length: torch.Tensor  # (N,) int64: tokens in g
    utt: torch.Tensor  # (N,) int64: the utterance (row of the scorer's log-probs) each hypothesis belongs to

    def index(self, rows: torch.Tensor) -> "CTCPrefixState":
        """Keep / reorder / repeat hypotheses: rows (M,) → a state of M hypotheses."""
        return CTCPrefixState(self.r_n[rows], self.r_b[rows], self.score[rows], self.last[rows],
                              self.length[rows], self.utt[rows])


class CTCPrefixScorer:
    """Vectorized CTC prefix scoring over a batch of utterances.

    Args:
        log_probs: (B, T, V) CTC log-posteriors; frames beyond `lengths` are ignored.
        lengths: (B,) valid frames per utterance.
        window: > 0: ψ(g·c) sums only the frames where φ(g) is within `window` (natural log) of its largest
            (`frames`); each frame left out would add at most e^-window of that largest term. 0: every frame.

    Use: `state = scorer.initial_state(utt)`; `psi = scorer.score(state, tokens)` for candidate tokens
    (N, K) → (N, K) log ψ(g·c) (c = EOS gives log P(g)); `state = scorer.advance(state, rows, tokens)` for the
    extensions kept (hypothesis rows (M,) extended by tokens (M,)). `terms` counts the (candidate, frame) terms
    `score` has summed: its work.
    """

    def __init__(self, log_probs: torch.Tensor, lengths: torch.Tensor, blank: int = BLANK, eos: int = EOS,
                 window: float = 0.0):
        B, T, V = log_probs.shape
        self.T, self.blank, self.eos, self.window, self.terms = T, blank, eos, float(window), 0
        x = log_probs.detach()
        x = x if x.dtype == torch.float64 else x.float()  # kept in float32 (float64 input stays float64)
        self.xt = x.clamp(min=LOG_FLOOR).transpose(1, 2).contiguous()  # (B, V, T)
        self.cum_blank = self.xt[:, blank].double().cumsum(-1)  # (B, T): B_t
        self.lengths = lengths.to(log_probs.device)
        self.valid = lengths_to_mask(self.lengths, T)  # (B, T)

    def initial_state(self, utt: torch.Tensor) -> CTCPrefixState:
        """The empty prefix (after <sos>) for hypotheses of utterances `utt` (N,)."""
        N = utt.numel()
        r_n = self.cum_blank.new_full((N, self.T), NEG_INF)
        zeros = torch.zeros(N, dtype=torch.long, device=utt.device)
        return CTCPrefixState(r_n, self.cum_blank[utt], self.cum_blank.new_zeros(N), zeros - 1, zeros, utt)

    def _phi_shift(self, state: CTCPrefixState, tokens: torch.Tensor) -> torch.Tensor:
        """φ_{t-1}(g, c) for t = 0 … T-1 (N, K, T); at t = 0 it is 1 for the empty g, else 0."""
        N, K = tokens.shape
        r_sum = torch.logaddexp(state.r_n, state.r_b)  # (N, T)
        same = (tokens == state.last.unsqueeze(1)).unsqueeze(-1)  # (N, K, 1)
        phi = torch.where(same, state.r_b[:, None, :-1], r_sum[:, None, :-1])  # (N, K, T-1)
        first = torch.where(state.length == 0, 0.0, NEG_INF).to(phi.dtype).view(N, 1, 1).expand(N, K, 1)
        return torch.cat([first, phi], -1)

    def _full_sequence(self, state: CTCPrefixState) -> torch.Tensor:
        """log P(g) = log(r^n + r^b) at the utterance's last valid frame. → (N,)"""
        length = self.lengths[state.utt]
        r_sum = torch.logaddexp(state.r_n, state.r_b)
        end = r_sum.gather(1, (length - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        empty = torch.where(state.length == 0, 0.0, NEG_INF).to(end.dtype)  # no frames at all
        return torch.where(length > 0, end, empty)

    def score(self, state: CTCPrefixState, tokens: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """Prefix scores log ψ(g·c) for tokens (N, K) → (N, K) float64; EOS gives log P(g).
        keep: (N, K) bool, the candidates to score (default: all); the others get -inf and cost nothing."""
        N, K = tokens.shape
        keep = torch.ones_like(tokens, dtype=torch.bool) if keep is None else keep
        rows, cols = (keep & (tokens != self.eos)).nonzero(as_tuple=True)  # the (hypothesis, token) pairs
        psi = torch.full((N, K), NEG_INF, dtype=torch.float64, device=tokens.device)
        if rows.numel():
            psi[rows, cols] = self._pair_scores(state, rows, tokens[rows, cols])
        return torch.where(keep & (tokens == self.eos), self._full_sequence(state).unsqueeze(1), psi)

    def frames(self, state: CTCPrefixState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(φ_{t-1}(g, c) for c ≠ last(g), (N, T); the first and one past the last frame of each hypothesis' window,
        (N,) each): the frames where φ_{t-1} is within `window` of its largest (every frame without a window)."""
        N, T = state.r_n.shape
        phi = self._shifted(state, torch.logaddexp(state.r_n, state.r_b))
        start, end = torch.zeros(N, dtype=torch.long, device=phi.device), torch.full_like(state.length, T)
        if self.window > 0 and T:
            valid = phi.masked_fill(~self.valid[state.utt], NEG_INF)
            near = valid >= valid.max(1, keepdim=True).values - self.window  # all True for a row of -inf
            start, end = near.int().argmax(1), T - near.flip(1).int().argmax(1)
        return phi, start, end

    def _shifted(self, state: CTCPrefixState, r: torch.Tensor) -> torch.Tensor:
        """r (N, T) one frame later, (N, T): r_{t-1} at t, and at t = 0 log 1 for the empty g, else log 0."""
        first = torch.where(state.length == 0, 0.0, NEG_INF).to(r.dtype).unsqueeze(1)
        return torch.cat([first, r[:, :-1]], 1)

    def _pair_scores(self, state: CTCPrefixState, rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """log ψ(g·c) = logsumexp_t φ_{t-1}(g, c) + log y_t(c) over each hypothesis' window, for P pairs of
        hypothesis `rows` (P,) and token (P,) → (P,) float64."""
        phi_any, start, end = self.frames(state)
        width = int((end - start)[rows].max())
        t = start.unsqueeze(1) + torch.arange(width, device=start.device)  # (N, w) the frames of each window
        inside = (t < end.unsqueeze(1)) & (t < self.T)
        t = t.clamp(max=max(self.T - 1, 0))
        inside &= self.valid[state.utt].gather(1, t)
        phi_any, phi_same = phi_any.gather(1, t), self._shifted(state, state.r_b).gather(1, t)  # (N, w)
        chunk, out = max(1, _CHUNK // max(1, width)), []
        for i in range(0, rows.numel(), chunk):
            r, c = rows[i:i + chunk], tokens[i:i + chunk]
            phi = torch.where((c == state.last[r]).unsqueeze(1), phi_same[r], phi_any[r])  # (p, w)
            x = self.xt[state.utt[r].unsqueeze(1), c.unsqueeze(1), t[r]].double()  # (p, w): log y_t(c)
            out.append(torch.logsumexp((phi + x).masked_fill(~inside[r], NEG_INF), -1))
        self.terms += rows.numel() * width
        return torch.cat(out)

    def advance(self, state: CTCPrefixState, rows: torch.Tensor, tokens: torch.Tensor) -> CTCPrefixState:
        """The states of hypotheses `rows` (M,) extended by `tokens` (M,) (not EOS) → a state of M hypotheses."""
        s = state.index(rows)
        c = tokens.unsqueeze(1)  # (M, 1)
        x = self.xt[s.utt.unsqueeze(1), c].double()  # (M, 1, T)
        phi_shift = self._phi_shift(s, c)
        valid = self.valid[s.utt].unsqueeze(1)
        psi = torch.logsumexp((phi_shift + x).masked_fill(~valid, NEG_INF), -1).squeeze(1)
        C = x.cumsum(-1)
        C_prev = torch.cat([torch.zeros_like(C[..., :1]), C[..., :-1]], -1)
        r_n = C + torch.logcumsumexp(phi_shift - C_prev, -1)  # (M, 1, T)
        Bc = self.cum_blank[s.utt].unsqueeze(1)  # (M, 1, T)
        Bc_prev = torch.cat([torch.zeros_like(Bc[..., :1]), Bc[..., :-1]], -1)
        rn_prev = torch.cat([torch.full_like(r_n[..., :1], NEG_INF), r_n[..., :-1]], -1)
        r_b = Bc + torch.logcumsumexp(rn_prev - Bc_prev, -1)
        return CTCPrefixState(r_n.squeeze(1), r_b.squeeze(1), psi, tokens, s.length + 1, s.utt)


# --------------------------------------------------------------------------------------------- prefix beam search

_HASH_MUL = 1_000_003  # prefix hash h·c = h·_HASH_MUL + c + 1 (int64, wrapping); with length and last token


def ctc_prefix_beam_search(log_probs: torch.Tensor, lengths: torch.Tensor, beam: int,
                           token_beam: int | None = None, blank: int = BLANK,
                           context: ContextGraph | None = None) -> list[list[Hypothesis]]:
    """Frame-synchronous CTC prefix beam search, batched over utterances (`CTCPrefixBeams` over all frames).

    Args:
        log_probs (B, T, V), lengths (B,). context: hotwords (decode/context.py). Returns per utterance up to
        `beam` hypotheses, best first, score = log P(prefix) over all its alignments (+ its hotword bonus).
    """
    search = CTCPrefixBeams(log_probs.size(0), beam, log_probs.size(-1), log_probs.device, token_beam, blank,
                            context)
    search.advance(log_probs, lengths)
    return search.nbest()


class CTCPrefixBeams:
    """CTC prefix beam search (Graves 2012; Hannun et al. 2014) that can be fed frames as they come (streaming).

    At every frame each of the `beam` prefixes either stays (blank, or a repeat of its last token) or is
    extended by one of the `token_beam` (default: `beam`) most probable non-blank tokens of that frame;
    extensions equal to a prefix already in the beam are merged into it (probabilities add), and the `beam`
    most probable prefixes survive. Prefixes are identified by a 64-bit rolling hash plus length and last
    token. Everything is vectorized over (utterances, beams, tokens); the loop runs over frames.
    Feeding a whole utterance at once or in pieces gives the same hypotheses, scores and emission frames.

    With a context graph (hotwords), prefixes are ranked by log P(prefix) + their hotword bonus B(prefix), and the
    `token_beam` tokens of a frame are chosen by log-probability + the bonus each would earn. B is a function of
    the prefix alone, so merging prefixes keeps it; the bonus of an unfinished phrase is given back at the end.
    """

    def __init__(self, batch: int, beam: int, vocab: int, device: torch.device | str = "cpu",
                 token_beam: int | None = None, blank: int = BLANK, context: ContextGraph | None = None):
        B, W = batch, beam
        self.W, self.K, self.blank, self.device = W, max(1, min(token_beam or W, vocab - 1)), blank, device
        self.pb = torch.full((B, W), NEG_INF, device=device)  # log P(prefix, last frame blank)
        self.pb[:, 0] = 0.0
        self.pnb = torch.full((B, W), NEG_INF, device=device)  # log P(prefix, last frame its last token)
        self.last = torch.full((B, W), -1, dtype=torch.long, device=device)
        self.length = torch.zeros(B, W, dtype=torch.long, device=device)
        self.hsh = torch.zeros(B, W, dtype=torch.long, device=device)
        self.context = context.to(device) if context is not None else None
        self.ctx_state = torch.zeros(B, W, dtype=torch.long, device=device)  # each prefix's context graph state
        self.ctx_total = torch.zeros(B, W, device=device)  # and its hotword bonus B(prefix)
        self.parents: list[torch.Tensor] = []  # per frame (B, W): the beam each prefix came from
        self.emits: list[torch.Tensor] = []  # per frame (B, W): the token it emitted there, or -1

    @property
    def frames(self) -> int:
        return len(self.parents)

    def advance(self, log_probs: torch.Tensor, lengths: torch.Tensor | None = None) -> None:
        """Feed the next frames: log_probs (B, T, V); `lengths` (B,) valid frames of each (default: all T).
        Frames past an utterance's length count as blank with probability 1 (they change nothing)."""
        B, T, _ = log_probs.shape
        dev, blank = self.device, self.blank
        x = log_probs.detach().float().to(dev)
        if lengths is not None:
            valid = lengths_to_mask(lengths.to(dev), T)
            x = x.masked_fill(~valid.unsqueeze(-1), NEG_INF)
            x[..., blank] = x[..., blank].masked_fill(~valid, 0.0)
        blank_lp = x[..., blank]  # (B, T)
        non_blank = x.index_fill(-1, torch.tensor([blank], device=dev), NEG_INF)
        if self.context is not None:  # the tokens of each frame are chosen per prefix, with their bonus
            for t in range(T):
                _, tok = self._with_bonus(non_blank[:, t]).topk(self.K, -1)  # (B, W, K)
                lp = non_blank[:, t].unsqueeze(1).expand(-1, self.W, -1).gather(2, tok)
                self._step(x[:, t], blank_lp[:, t:t + 1], tok, lp)
            return
        top_lp, top_tok = non_blank.topk(self.K, -1)  # (B, T, K)
        for t in range(T):
            self._step(x[:, t], blank_lp[:, t:t + 1], top_tok[:, t], top_lp[:, t])

    def _with_bonus(self, x: torch.Tensor) -> torch.Tensor:
        """A frame's log-probabilities x (B, V) plus the hotword bonus each token would earn each prefix
        → (B, W, V)."""
        B, V = x.shape
        tokens = torch.arange(V, device=x.device).expand(B, self.W, V)
        return x.unsqueeze(1) + self.context.step(self.ctx_state, tokens)[1]

    def _step(self, x: torch.Tensor, blank_lp: torch.Tensor, ck: torch.Tensor, lk: torch.Tensor) -> None:
        """One frame: x (B, V) log-probs, blank_lp (B, 1), the non-blank tokens to extend by, ck, and their
        log-probs lk: (B, K) for every prefix alike, or (B, W, K) a set per prefix (with hotwords)."""
        W, K = self.W, self.K
        pb, pnb, last, length, hsh = self.pb, self.pnb, self.last, self.length, self.hsh
        ck, lk = (ck, lk) if ck.dim() == 3 else (ck.unsqueeze(1).expand(-1, W, -1), lk.unsqueeze(1).expand(-1, W, -1))
        total = torch.logaddexp(pb, pnb)  # (B, W)
        y_last = x.gather(1, last.clamp(min=0)).masked_fill(last < 0, NEG_INF)
        stay_b = total + blank_lp
        stay_nb = pnb + y_last
        same = ck == last.unsqueeze(2)  # (B, W, K)
        ext = (torch.where(same, pb.unsqueeze(2), total.unsqueeze(2)) + lk).flatten(1)  # (B, W·K)
        ext_hash = (hsh.unsqueeze(2) * _HASH_MUL + ck + 1).flatten(1)
        ext_len = (length + 1).repeat_interleave(K, 1)
        ext_last = ck.flatten(1)
        # an extension equal to an (alive) prefix in the beam is merged into it
        match = ((hsh.unsqueeze(2) == ext_hash.unsqueeze(1)) & (length.unsqueeze(2) == ext_len.unsqueeze(1))
                 & (last.unsqueeze(2) == ext_last.unsqueeze(1)) & (total > NEG_INF).unsqueeze(2))  # (B, W, W·K)
        stay_nb = torch.logaddexp(stay_nb, ext.unsqueeze(1).masked_fill(~match, NEG_INF).logsumexp(-1))
        ext = ext.masked_fill(match.any(1), NEG_INF)
        rank = torch.cat([torch.logaddexp(stay_b, stay_nb), ext], 1)
        if self.context is not None:
            ext_state, bonus = self.context.step(self.ctx_state, ck)  # (B, W, K)
            ext_state, ext_ctx = ext_state.flatten(1), (self.ctx_total.unsqueeze(2) + bonus).flatten(1)
            rank = rank + torch.cat([self.ctx_total, ext_ctx], 1)
        _, idx = rank.topk(W, 1)
        is_stay = idx < W
        e = (idx - W).clamp(min=0)  # index into the extensions
        src = torch.where(is_stay, idx, e // K)  # parent beam
        token = torch.where(is_stay, -1, ext_last.gather(1, e))
        self.pb = torch.where(is_stay, stay_b.gather(1, src), NEG_INF)
        self.pnb = torch.where(is_stay, stay_nb.gather(1, src), ext.gather(1, e))
        self.last = torch.where(is_stay, last.gather(1, src), token)
        self.length = torch.where(is_stay, length.gather(1, src), ext_len.gather(1, e))
        self.hsh = torch.where(is_stay, hsh.gather(1, src), ext_hash.gather(1, e))
        if self.context is not None:
            self.ctx_state = torch.where(is_stay, self.ctx_state.gather(1, src), ext_state.gather(1, e))
            self.ctx_total = torch.where(is_stay, self.ctx_total.gather(1, src), ext_ctx.gather(1, e))
        self.parents.append(src)
        self.emits.append(token)

    def _bonus(self) -> torch.Tensor:
        """(B, W) each prefix's hotword bonus as a finished hypothesis (0 without hotwords)."""
        if self.context is None:
            return torch.zeros_like(self.pb)
        return self.ctx_total + self.context.finish(self.ctx_state)

    def paths(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every utterance's prefixes, best first: scores (B, W) (log P(prefix), + the hotword bonus of it as a
        finished hypothesis), and per frame the token each emitted there or -1, (B, W, T) — backtracked through
        the parents."""
        scores = torch.logaddexp(self.pb, self.pnb) + self._bonus()
        order = scores.argsort(1, descending=True)  # (B, W) (sorted by rank after a topk, but T may be 0)
        scores = scores.gather(1, order).cpu()
        self._order = order
        B, W, T = scores.size(0), self.W, self.frames
        if not T:
            return scores, torch.full((B, W, 0), -1, dtype=torch.long)
        parents_t, emits_t = torch.stack(self.parents).cpu(), torch.stack(self.emits).cpu()  # (T, B, W)
        idx, seq = order.cpu(), []
        for t in range(T - 1, -1, -1):
            seq.append(emits_t[t].gather(1, idx))
            idx = parents_t[t].gather(1, idx)
        return scores, torch.stack(seq[::-1], -1)

    def nbest(self, paths: tuple[torch.Tensor, torch.Tensor] | None = None) -> list[list[Hypothesis]]:
        """Per utterance up to `beam` hypotheses, best first, score = log P(prefix) over all its alignments.
        paths: `paths()`'s result when the caller has it already (the backtracking is then not done twice)."""
        scores, seq = paths if paths is not None else self.paths()
        bonus = self._bonus().gather(1, self._order).cpu()
        out = []
        for b in range(scores.size(0)):
            hyps = []
            for w in range(self.W):
                s = float(scores[b, w])
                if s == NEG_INF:
                    continue
                toks = [int(v) for v in seq[b, w] if v >= 0]
                parts = {"ctc": s} if self.context is None else {"ctc": s - float(bonus[b, w]),
                                                                  "context": float(bonus[b, w])}
                hyps.append(Hypothesis(toks, s, parts))
            out.append(hyps)
        return out
