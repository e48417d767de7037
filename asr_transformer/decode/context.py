"""Hotwords: a context graph that biases every search toward listed phrases (contextual biasing).

The phrases, as token sequences, form an Aho-Corasick automaton (a trie with failure links, as WeNet's and
icefall's context graphs). A hypothesis y carries the state of the automaton after its tokens: the longest suffix
of y that starts some phrase. Its context bonus is

    B(y) = Σ over the phrases' occurrences in y (overlapping ones too) of score(p)·len(p)  +  partial(state),

where partial(state) is the bonus of the phrase that y has started and not finished (score per token × tokens
matched, beyond the last phrase it completed on that branch). A search adds B's increase at each token
(`step`: the bonus of a matched token, or the partial bonus given back when the match fails) and, when a
hypothesis ends, gives the unfinished part back (`finish`). So the bonus of a finished hypothesis is exactly that
of the phrases it contains, whatever it started and left: nothing is gained by starting a hotword and leaving it.

Everything is a lookup in two (states × phrase tokens) tables, so a step biases a whole batch of hypotheses ×
candidate tokens at once: numpy arrays in, numpy arrays out (the exported recognizer, without PyTorch), or torch
tensors on any device (the tables are copied to it once).

    graph = ContextGraph([([12, 40, 7], 2.0), ([99], 3.0)], vocab_size=500)
    state = graph.start(4)                        # (4,) hypotheses at the root
    nxt, bonus = graph.step(state, tokens)        # tokens (4, K) → next states and bonuses (4, K)
    end_bonus = graph.finish(state)               # (4,) when the hypotheses end
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass
class _Node:
    depth: float = 0.0  # the largest partial bonus of a phrase through here: score per token × tokens so far
    end: float = 0.0  # score(p)·len(p) of the phrase ending here (0: none)
    fail: int = 0  # the node of the longest proper suffix that is in the trie
    out: float = 0.0  # the bonus of every phrase that ends here or at a suffix (`end` along the fail chain)
    banked: float = 0.0  # the depth of the last node on the path from the root that ends a phrase (self included)


class ContextGraph:
    """An Aho-Corasick automaton over token sequences, each with its bonus per token.

    sequences: [(token ids, score per token)]; a sequence listed twice keeps its highest score.
    vocab_size: the model's vocabulary (candidate tokens are < vocab_size).
    """

    def __init__(self, sequences: list[tuple[list[int], float]], vocab_size: int):
        best: dict[tuple[int, ...], float] = {}
        for tokens, score in sequences:
            if tokens:
                key = tuple(int(t) for t in tokens)
                best[key] = max(score, best.get(key, float("-inf")))
        self.vocab_size = vocab_size
        self.nodes, children = [_Node()], [{}]
        for tokens, score in best.items():
            node = 0
            for i, token in enumerate(tokens):
                if token not in children[node]:
                    children[node][token] = len(self.nodes)
                    self.nodes.append(_Node())
                    children.append({})
                node = children[node][token]
                self.nodes[node].depth = max(self.nodes[node].depth, score * (i + 1))
            self.nodes[node].end = max(self.nodes[node].end, score * len(tokens))
        self._link(children)
        self._tables(children)

    def _link(self, children: list[dict[int, int]]) -> None:
        """Failure links, output bonuses and the banked depth of every node, breadth first from the root."""
        queue = deque()
        for child in children[0].values():
            self._settle(child, 0, 0)
            queue.append(child)
        while queue:
            node = queue.popleft()
            for token, child in children[node].items():
                fail = self.nodes[node].fail
                while fail and token not in children[fail]:
                    fail = self.nodes[fail].fail
                self._settle(child, node, children[fail].get(token, 0))
                queue.append(child)

    def _settle(self, node: int, parent: int, fail: int) -> None:
        n = self.nodes[node]
        n.fail = fail
        n.out = n.end + self.nodes[fail].out
        n.banked = n.depth if n.end else self.nodes[parent].banked

    def partial(self, node: int) -> float:
        """The bonus a hypothesis in `node` holds for a phrase it has started and not finished."""
        n = self.nodes[node]
        return max(0.0, n.depth - n.banked)

    def _tables(self, children: list[dict[int, int]]) -> None:
        """next_state and step_bonus (S, C + 1) over the C tokens of the phrases (column C: any other token)."""
        tokens = sorted({t for kids in children for t in kids})
        column = {t: i for i, t in enumerate(tokens)}
        S, C = len(self.nodes), len(tokens)
        nxt = [[0] * (C + 1) for _ in range(S)]
        for node in range(S):  # the full transition function: a goto, else the fail chain's (`_goto`)
            for token in tokens:
                nxt[node][column[token]] = self._goto(node, token, children)
        partial = [self.partial(i) for i in range(S)]
        bonus = [[self.nodes[to].out + partial[to] - partial[node] for to in row] for node, row in enumerate(nxt)]
        for node in range(S):
            bonus[node][C] = -partial[node]  # any other token: back to the root
        columns = np.full(self.vocab_size, C, np.int64)
        columns[tokens] = np.arange(C)
        self.tables = {"numpy": (columns, np.array(nxt, np.int64).reshape(S, C + 1),
                                 np.array(bonus, np.float32).reshape(S, C + 1), -np.array(partial, np.float32))}

    def _goto(self, node: int, token: int, children: list[dict[int, int]]) -> int:
        while node and token not in children[node]:
            node = self.nodes[node].fail
        return children[node].get(token, 0)

    def _tables_like(self, x) -> tuple:
        """(columns, next_state, step_bonus, end_bonus) as numpy arrays for a numpy `x`, else as torch tensors on
        x's device (copied there once)."""
        if isinstance(x, np.ndarray):
            return self.tables["numpy"]
        return self.to(x.device).tables[str(x.device)]

    def to(self, device) -> "ContextGraph":
        """Copy the tables to a torch `device` once, ahead of the searches that read them there; returns self."""
        if str(device) not in self.tables:
            import torch

            self.tables[str(device)] = tuple(torch.from_numpy(t).to(device) for t in self.tables["numpy"])
        return self

    def start(self, n: int) -> np.ndarray:
        """(n,) states at the root, for n new hypotheses."""
        return np.zeros(n, np.int64)

    def step(self, states, tokens):
        """states (...,) and tokens (..., K), numpy arrays or torch tensors → (next states, bonuses), both (..., K)."""
        columns, next_state, step_bonus, _ = self._tables_like(states)
        cols = columns[tokens.clip(0, self.vocab_size - 1)]
        rows = states[..., None]
        return next_state[rows, cols], step_bonus[rows, cols]

    def finish(self, states):
        """The bonus a hypothesis in each state gets when it ends (≤ 0: the unfinished phrase's part back)."""
        return self._tables_like(states)[3][states]

    def score(self, tokens: list[int]) -> float:
        """The bonus of a whole hypothesis: its phrases' bonuses (`step` over its tokens, then `finish`)."""
        state, total = self.start(1), 0.0
        for token in tokens:
            state, bonus = self.step(state, np.array([[token]]))
            state, total = state[:, 0], total + bonus.item()
        return total + self.finish(state).item()
