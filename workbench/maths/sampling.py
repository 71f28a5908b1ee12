"""Text from a trained language model: one token at a time, each drawn from the model's
next-token distribution given the tokens before it (at most `context` of them).

A language model of the protocol whose `logits(params, X)` gives (B, T, V) next-token
scores (the built-in GPT, or a model of yours with that method) is sampled by `sample`:
the scores at the last position, divided by the temperature, through a softmax, and one
draw from the run's generator; temperature 0 takes the most likely token (the model's own
`predict` at that position). A seed gives the same text every time.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def next_token_probs(scores: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(scores / temperature) in float64 (temperature > 0).

    >>> next_token_probs(np.log(np.array([0.5, 0.25, 0.25])), 0.5).round(4).tolist()   # p^2, renormalised
    [0.6667, 0.1667, 0.1667]
    """
    z = np.asarray(scores, dtype=np.float64) / float(temperature)
    z = np.exp(z - z.max())
    return z / z.sum()


def sample(model: Any, params: Any, prompt: np.ndarray, length: int, context: int, temperature: float = 1.0,
           rng: np.random.Generator | None = None) -> np.ndarray:
    """`length` new token ids after `prompt` (a 1-D array of ids, at least one).

    Each step runs the model over the last `context` tokens (the prompt and what it has
    written) and takes the next token from its scores at the last position: the most likely
    at temperature 0, else a draw from softmax(scores / temperature) by `rng`.
    """
    if temperature < 0:
        raise ValueError(f"temperature: 0 (the most likely token) or more, got {temperature}")
    rng = rng if rng is not None else np.random.default_rng(0)
    ids = [int(t) for t in np.asarray(prompt).reshape(-1)]
    if not ids:
        raise ValueError("prompt: at least one token, got none")
    params = np.asarray(params)
    for _ in range(int(length)):
        window = np.asarray(ids[-context:], dtype=np.float32)[None, :]
        scores = np.asarray(model.logits(params, window))[0, -1]
        if temperature == 0:
            ids.append(int(np.argmax(scores)))
        else:
            p = next_token_probs(scores, temperature)
            ids.append(int(rng.choice(len(p), p=p)))
    return np.asarray(ids[-int(length):] if length else [], dtype=np.int64)
