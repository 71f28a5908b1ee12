"""Text data for language models: the generated language's entropy against sampling oracles,
text files' windows and split, every bad file in one line, token-level evaluation."""
from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from workbench.data import DataError
from workbench.data import text as text_module
from workbench.data.text import LANGUAGE, decode, markov_text, max_context, read_text, text_dataset, text_shape
from workbench.maths import metrics
from workbench.maths.metrics import Evaluator, language_metrics

# --- the generated language ----------------------------------------------------------------

def test_language_is_a_proper_stationary_chain():
    A = len(LANGUAGE.alphabet)
    assert LANGUAGE.probs.shape == (A, A, A) and A == 16
    np.testing.assert_allclose(LANGUAGE.probs.sum(axis=2), 1.0, atol=1e-12)
    successors = (LANGUAGE.probs > 0).sum(axis=2)
    assert successors.min() >= 1 and successors.max() <= 4
    pi = LANGUAGE.pair_probs
    assert abs(pi.sum() - 1) < 1e-12 and pi.min() >= 0
    np.testing.assert_allclose(np.einsum("ab,abc->bc", pi, LANGUAGE.probs), pi, atol=1e-13)   # invariant


def test_entropy_rate_matches_a_plug_in_estimate_from_a_long_sample():
    # the oracle: count trigrams in 600k sampled characters and take the empirical
    # conditional entropy H(X_t | X_{t-2}, X_{t-1}); its bias and noise are ~1e-3 here
    seqs = LANGUAGE.sample(3000, 200, np.random.default_rng(11))
    A = len(LANGUAGE.alphabet)
    counts = np.zeros((A, A, A))
    np.add.at(counts, (seqs[:, :-2].ravel(), seqs[:, 1:-1].ravel(), seqs[:, 2:].ravel()), 1)
    ctx = counts.sum(axis=2, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.nansum(counts * np.log(counts / ctx)) / counts.sum()
    assert abs(h - LANGUAGE.entropy_rate) < 0.01
    assert 0.3 < LANGUAGE.entropy_rate < LANGUAGE.first_entropy < math.log(A)


def test_best_loss_is_what_the_true_model_scores():
    # the Bayes-optimal predictor (the chain itself) scores best_loss on sampled windows,
    # up to sampling noise (~0.01 for 2000 windows of 16 tokens)
    T = 16
    d = markov_text(n_samples=2500, context=T, seed=3)
    X, y = d.X_train.astype(np.int64), d.y_train
    single = LANGUAGE.pair_probs.sum(axis=1)
    first = LANGUAGE.pair_probs / single[:, None]                     # P(X1 | X0)
    nll = -np.log(first[X[:, 0], y[:, 0]]).sum() - np.log(LANGUAGE.probs[X[:, :-1], X[:, 1:], y[:, 1:]]).sum()
    assert abs(nll / y.size - LANGUAGE.best_loss(T)) < 0.02
    assert d.best_loss == LANGUAGE.best_loss(T)


def test_markov_text_split_seed_and_shapes():
    d = markov_text(n_samples=100, context=12, seed=0)
    assert (d.n_train, d.n_test, d.n_features, d.n_classes) == (80, 20, 12, 16)
    assert d.X_train.dtype == np.float32 and d.y_train.dtype == np.int64 and d.y_train.shape == (80, 12)
    assert np.array_equal(d.y_test[:, :-1], d.X_test[:, 1:])
    assert not d.X_train.flags.writeable
    again, other = markov_text(n_samples=100, context=12, seed=0), markov_text(n_samples=100, context=12, seed=1)
    assert np.array_equal(again.X_train, d.X_train) and not np.array_equal(other.X_train, d.X_train)
    assert decode(d.vocab, d.X_train[0]) in " ".join(decode(d.vocab, row) for row in d.X_train)


# --- text files ------------------------------------------------------------------------------

def write(tmp_path, data: bytes | str, name: str = "t.txt"):
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return p


def test_text_file_windows_vocab_and_held_out_end(tmp_path):
    body = "the quick brown fox jumps over the lazy dog. " * 20 + "ENDING é"
    p = write(tmp_path, body)
    d = text_dataset(p, context=10, test_fraction=0.2)
    assert d.vocab == "".join(sorted(set(body)))
    n = (len(body) - 1) // 10
    assert d.n_train + d.n_test == n and d.n_test == round(0.2 * n)
    # every window is the text, in order; the test set is the end of the text
    rebuilt = decode(d.vocab, d.X_train[0]) + "".join(decode(d.vocab, r[-1:]) for r in d.y_train)
    assert body.startswith(rebuilt[:11]) and decode(d.vocab, d.X_train[1]) == body[10:20]
    last = d.y_test[-1]
    assert body[:(n * 10) + 1].endswith(decode(d.vocab, last))
    assert "ENDING" not in "".join(decode(d.vocab, r) for r in d.X_train)
    assert text_shape(p, 10, 0.2) == (d.n_train, d.n_test, d.n_classes)


@pytest.mark.parametrize("data, message", [
    (b"", r"^dataset: a non-empty text file \(this one has 0 bytes\), got '.*t.txt'$"),
    (b"abc\x00def", r"^dataset: a text file, not binary \(a NUL byte at offset 3\), got '.*'$"),
    (b"ab\xff\xfecd", r"^dataset: UTF-8 text \(byte 2 is not\), got '.*'$"),
    (b"zzzzzzzz", r"^dataset: a text with at least 2 distinct characters \(a vocabulary of one, 'z', "
                  r"predicts nothing\), got '.*'$"),
])
def test_bad_text_files_one_line(tmp_path, data, message):
    p = write(tmp_path, data)
    with pytest.raises(DataError, match=message):
        text_dataset(p, context=4)
    with pytest.raises(DataError, match=message):
        text_shape(p, 4)


def test_context_longer_than_the_text(tmp_path):
    p = write(tmp_path, "abcdefghijk")                     # 11 characters: context at most 5
    assert max_context(11) == 5
    assert text_dataset(p, context=5).n_train == 1
    with pytest.raises(DataError, match=r"^context: at most 5 for '.*t.txt' \(its 11 characters make one training "
                                        r"and one test sequence .*\), got 6$"):
        text_dataset(p, context=6)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(DataError, match=r"^dataset: a readable .txt file \(No such file or directory\), got"):
        read_text(tmp_path / "nope.txt")
    with pytest.raises(DataError, match=r"^dataset: a regular .txt file"):
        read_text(tmp_path)


# --- token-level evaluation -----------------------------------------------------------------

def test_evaluator_scores_every_token_and_splits_by_ranks():
    from workbench.maths.gpt import GPT
    d = markov_text(n_samples=60, context=8, seed=0)
    model = GPT(context=8, vocab=16, n_layers=1, d_model=16, n_heads=2)
    p = model.init(0)
    ev = Evaluator(model, d)
    got = ev(p)
    logits = model.logits(p, d.X_test)                                  # the oracle: every token at once
    z = logits.reshape(-1, 16).astype(np.float64)
    y = d.y_test.reshape(-1)
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    assert abs(got["test_loss"] - float(np.mean(lse - z[np.arange(len(y)), y]))) < 1e-5
    assert got["test_accuracy"] == float(np.mean(z.argmax(1) == y))
    assert abs(got["test_loss"] - model.loss(p, d.X_test, d.y_test)) < 1e-5
    split = Evaluator.from_partials(sum(ev.partial(p, r, 3) for r in range(3)))
    assert all(abs(split[k] - got[k]) < 1e-5 for k in got)
    assert ev.X_train.shape[0] == metrics.EVAL_TRAIN_SUBSET // 8 or ev.X_train.shape[0] == d.n_train


def test_language_metrics():
    m = language_metrics(math.log(4.0), 0.25, best_loss=0.5)
    assert abs(m["perplexity"] - 4.0) < 1e-12 and abs(m["bits_per_token"] - 2.0) < 1e-12
    assert abs(m["gap_to_best"] - (math.log(4.0) - 0.5)) < 1e-12 and m["next_token_accuracy"] == 0.25
    assert language_metrics(1.0)["gap_to_best"] is None


def test_doctests():
    assert doctest.testmod(text_module, optionflags=doctest.ELLIPSIS).failed == 0
    assert doctest.testmod(metrics).failed == 0
