"""Text for language models: a character-level dataset from any UTF-8 file, and a generated
language whose entropy is known.

Both give a `Dataset` whose rows are sequences of `context` token ids (X, stored as
float32 like every dataset's features; they are whole numbers) and whose labels are the
same sequences shifted by one (y, (N, context) int64: y[n, t] is the token after
X[n, t]). The vocabulary (`Dataset.vocab`) maps ids back to characters.

- **A text file** (`text_dataset`): the vocabulary is the file's distinct characters,
  sorted; the text is cut into consecutive windows of context + 1 characters overlapping
  by one (so every character but the first is predicted once per epoch), and the LAST
  `test_fraction` of the windows is held out: the test set is the end of the text, not
  a random sample of it. Checked before any worker starts (`read_text`): a file that is
  empty, binary (a NUL byte) or not UTF-8, a vocabulary of one character, a context
  longer than the text allows, each one line.
- **`markov_text`** (`markov_text`): a fixed order-2 Markov chain over 16 characters (each
  pair of characters is followed by 1 to 4 possible next characters, with fixed random
  probabilities), every sequence started from the chain's stationary distribution. Its
  entropy rate is computed exactly from the chain (`LANGUAGE.entropy_rate`, nats per
  character), and so is the best loss any model can reach on its windows
  (`LANGUAGE.best_loss(context)`: the first prediction of a window sees one character,
  every later one sees the two that matter). So "how far from the best possible" is a
  number, as mnist1d's classes are for curves. Offline, and the same language for every
  run seed (the seed draws the sequences).

>>> d = markov_text(n_samples=50, context=16, seed=0)
>>> d.X_train.shape, d.y_train.shape, d.n_classes, len(d.vocab)
((40, 16), (40, 16), 16, 16)
>>> bool((d.y_train[:, :-1] == d.X_train[:, 1:]).all())      # y is X shifted by one
True
>>> round(LANGUAGE.entropy_rate, 4), round(LANGUAGE.best_loss(64), 4)
(0.6438, 0.6682)
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dataset import (
    TEXT_MAX_BYTES,
    Dataset,
    _check_context,
    _check_fraction,
    _check_int,
    _key,
    _n_test,
    make_dataset,
    max_context,
    read_text,
    text_shape,
)

MARKOV_ALPHABET = " aeinorstlhducmp"  # 16 symbols; the space makes samples read like words
MARKOV_ORDER = 2
_LANGUAGE_SEED = 2046                 # the language is the same for every run seed
_SUCCESSORS = (1, 4)                  # each context allows 1 to 4 next characters


# ------------------------------------------------------------------------------ text files
def encode(text: str) -> tuple[str, np.ndarray]:
    """(vocabulary, ids): the distinct characters sorted, and each character's index in it.

    >>> vocab, ids = encode("abba!")
    >>> vocab, ids.tolist()
    ('!ab', [1, 2, 2, 1, 0])
    """
    vocab = "".join(sorted(set(text)))
    if len(vocab) <= 256:
        # one byte per character: a lookup over the code points, no Python loop over the text
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        table = np.zeros(max(map(ord, vocab)) + 1, np.int64)
        table[[ord(c) for c in vocab]] = np.arange(len(vocab))
        return vocab, table[codes]
    index = {c: i for i, c in enumerate(vocab)}
    return vocab, np.fromiter((index[c] for c in text), np.int64, len(text))


def windows(ids: np.ndarray, context: int) -> np.ndarray:
    """Consecutive windows of context + 1 tokens, each starting where the last one's final
    token is: (n_windows, context + 1) with n_windows = (len(ids) - 1) // context (a view).

    >>> windows(np.arange(7), 3).tolist()
    [[0, 1, 2, 3], [3, 4, 5, 6]]
    """
    n = (len(ids) - 1) // context
    return np.lib.stride_tricks.as_strided(ids, (n, context + 1), (ids.strides[0] * context, ids.strides[0]),
                                           writeable=False)


def text_dataset(path: str | os.PathLike, context: int, test_fraction: float = 0.2) -> Dataset:
    """The character-level dataset of a text file (see the module docstring).

    Args:
        path: a UTF-8 text file.
        context: tokens per sequence, >= 1 and at most `max_context` of the text.
        test_fraction: share of the windows, from the end of the text, held out.
    Returns:
        A `Dataset` named by the path, X (N, context) float32 ids, y (N, context) int64,
        n_classes the vocabulary size, `vocab` the characters.
    """
    return _text_dataset(_key(path), os.fspath(path), _check_int("context", context, 1),
                         _check_fraction("test_fraction", test_fraction))


@functools.lru_cache(maxsize=4)
def _text_dataset(key: tuple[str, int, int], name: str, context: int, test_fraction: float) -> Dataset:
    """`text_dataset` once per version of the file (its path, size and mtime) and arguments."""
    text = read_text(key[0])
    context = _check_context(context, len(text), name)
    vocab, ids = encode(text)
    w = windows(ids, context)
    n_test = _n_test(len(w), test_fraction)
    n_train = len(w) - n_test
    return _lm_dataset(name, w[:n_train], w[n_train:], vocab)


def _lm_dataset(name: str, train: np.ndarray, test: np.ndarray, vocab: str, best_loss: float | None = None) -> Dataset:
    """A Dataset of windows of context + 1 tokens: X the first context, y the last."""
    return make_dataset(name, train[:, :-1], train[:, 1:], test[:, :-1], test[:, 1:], len(vocab),
                        vocab=vocab, best_loss=best_loss)


# ------------------------------------------------------------------------------ the generated language
@dataclass(frozen=True)
class Language:
    """An order-2 Markov chain over an alphabet: what `markov_text` samples.

    Attributes:
        alphabet: the characters; token i is alphabet[i].
        probs: (A, A, A) P(next = c | previous two = a, b), rows summing to 1.
        pair_probs: (A, A) the stationary distribution of consecutive pairs.
    """

    alphabet: str
    probs: np.ndarray
    pair_probs: np.ndarray

    @property
    def entropy_rate(self) -> float:
        """H(X_t | the whole past) in nats per character: the pair-weighted entropy of the
        next character, sum over (a, b) of pi(a, b) H(P(. | a, b))."""
        return float((self.pair_probs * _entropy(self.probs)).sum())

    @property
    def first_entropy(self) -> float:
        """H(X_1 | X_0) at stationarity, nats: the first prediction of a window sees one character."""
        single = self.pair_probs.sum(axis=1)
        return float(_entropy(self.pair_probs.reshape(-1)) - _entropy(single))

    def best_loss(self, context: int) -> float:
        """The lowest mean loss per token any model can reach on windows of `context`
        predictions started at stationarity: (H(X_1|X_0) + (context - 1) rate) / context.

        >>> round(LANGUAGE.best_loss(1), 4) == round(LANGUAGE.first_entropy, 4)
        True
        """
        context = _check_int("context", context, 1)
        return (self.first_entropy + (context - 1) * self.entropy_rate) / context

    def allowed(self, ids: Any) -> tuple[int, int]:
        """(allowed, transitions): of a token sequence's transitions after its first two (each
        character given the two before it), how many the language allows (a probability
        above 0). A sample of the language scores n of n; a model that learned nothing, about
        2.5 in 16 (each pair allows 1 to 4 next characters).

        >>> ids = LANGUAGE.sample(1, 50, np.random.default_rng(0))[0]
        >>> LANGUAGE.allowed(ids)
        (48, 48)
        """
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) < 3:
            return 0, 0
        ok = self.probs[ids[:-2], ids[1:-1], ids[2:]] > 0
        return int(ok.sum()), int(ok.size)

    def sample(self, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """(n, length) int64 token sequences, each started from the stationary pair distribution."""
        A = len(self.alphabet)
        out = np.empty((n, length), np.int64)
        first = rng.choice(A * A, size=n, p=self.pair_probs.reshape(-1))
        out[:, 0], out[:, 1] = np.divmod(first, A)
        cum = np.cumsum(self.probs, axis=2)
        cum[..., -1] = 1.0                      # rounding never leaves a draw past the last character
        for t in range(2, length):
            u = rng.random(n)[:, None]
            out[:, t] = (u >= cum[out[:, t - 2], out[:, t - 1]]).sum(axis=1)
        return out


def _entropy(p: np.ndarray) -> np.ndarray:
    """Entropy in nats along the last axis (0 log 0 = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log(p), 0.0).sum(axis=-1)


def make_language(alphabet: str = MARKOV_ALPHABET, seed: int = _LANGUAGE_SEED) -> Language:
    """The order-2 chain `markov_text` samples: each pair (a, b) allows 1 to 4 next characters
    (drawn at random) with Dirichlet(1) probabilities; its stationary pair distribution by
    power iteration. Refused (RuntimeError) if the chain's recurrent part is not one
    aperiodic class, which would make the stationary distribution depend on the start."""
    A = len(alphabet)
    rng = np.random.default_rng(seed)
    probs = np.zeros((A, A, A))
    for a in range(A):
        for b in range(A):
            k = int(rng.integers(_SUCCESSORS[0], _SUCCESSORS[1] + 1))
            nexts = rng.choice(A, size=k, replace=False)
            probs[a, b, nexts] = rng.dirichlet(np.ones(k))
    # pair (a, b) -> pair (b, c) with probability probs[a, b, c]
    pi = np.full((A, A), 1.0 / (A * A))
    for _ in range(10_000):
        new = np.einsum("ab,abc->bc", pi, probs)
        if np.abs(new - pi).max() < 1e-15:
            break
        pi = new
    else:
        raise RuntimeError("make_language: the pair chain did not converge (periodic?)")
    start = np.zeros((A, A))
    start.reshape(-1)[int(np.argmax(pi))] = 1.0
    other = start
    for _ in range(10_000):                                  # from a point mass: the same limit?
        other = np.einsum("ab,abc->bc", other, probs)
    if np.abs(other - pi).max() > 1e-9:
        raise RuntimeError("make_language: the chain has more than one recurrent class")
    return Language(alphabet, probs, new)


LANGUAGE = make_language()


@functools.lru_cache(maxsize=4)
def markov_text(n_samples: int, context: int, seed: int, test_fraction: float = 0.2) -> Dataset:
    """`n_samples` sequences of `LANGUAGE` (the last `test_fraction` held out), `context`
    predictions each: X (n, context) float32, y (n, context) int64, `best_loss` the floor.

    Args:
        n_samples: sequences, train + test, >= 10.
        context: tokens per sequence, >= 1.
        seed: >= 0; draws the sequences (the language is fixed).
        test_fraction: share held out, in (0, 1).
    """
    n_samples = _check_int("n_samples", n_samples, 10)
    context = _check_int("context", context, 1)
    seed = _check_int("seed", seed, 0)
    test_fraction = _check_fraction("test_fraction", test_fraction)
    seqs = LANGUAGE.sample(n_samples, context + 1, np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0x7E47,))))
    n_train = n_samples - _n_test(n_samples, test_fraction)
    return _lm_dataset("markov_text", seqs[:n_train], seqs[n_train:], LANGUAGE.alphabet, LANGUAGE.best_loss(context))


def allowed_note(text: str) -> str | None:
    """How many of a text's transitions (after its first two characters) `LANGUAGE` allows,
    in words beside what its own text and characters drawn at random score; None for a text
    with a character outside the language or too short to have a transition.

    >>> allowed_note("the ")   # 'e' after 'th' (not allowed), then ' ' after 'he' (allowed)
    "of its 2 transitions after the first two, 1 are ones the language allows (0.50; the language's own text: 1.00, characters drawn at random: 0.16)"
    """
    if any(c not in LANGUAGE.alphabet for c in text):
        return None
    ok, n = LANGUAGE.allowed(np.array([LANGUAGE.alphabet.index(c) for c in text], dtype=np.int64))
    if not n:
        return None
    chance = float((LANGUAGE.probs > 0).mean())   # uniform draws: the share of allowed next characters
    return (f"of its {n} transitions after the first two, {ok} are ones the language allows ({ok / n:.2f}; "
            f"the language's own text: 1.00, characters drawn at random: {chance:.2f})")


def decode(vocab: str, ids: np.ndarray) -> str:
    """The characters of token ids.

    >>> decode("!ab", np.array([1, 2, 0]))
    'ab!'
    """
    return "".join(vocab[int(i)] for i in np.asarray(ids).reshape(-1))


__all__ = ["LANGUAGE", "TEXT_MAX_BYTES", "Language", "decode", "encode", "make_language", "markov_text", "max_context",
           "read_text", "text_dataset", "text_shape", "windows"]
