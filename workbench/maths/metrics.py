"""Evaluation of a parameter vector: train loss on a fixed subset, test loss and accuracy.

A label is one class per row, or for a language model (y of shape (N, T)) one next token
per position: the loss is then in nats per token and the accuracy is next-token accuracy,
averaged over every token; `language_metrics` adds perplexity and the gap to the best
possible loss where the data know it.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

EVAL_TRAIN_SUBSET = 4096  # training labels scored per evaluation (a fixed, seed-free subset of rows)
EVAL_CHUNK = 2048         # labels per forward pass, to bound memory on big test sets


class EvaluationError(ValueError):
    """The model raised while the evaluation scored it: says so, with the rows it was called
    on and the most any evaluation of the run calls it on. `params` (the parameters being
    scored, not copied) and `steps` (the steps they had run, where the caller knows them)
    let the worker keep what it trained (`WorkerContext.kept_on_failure`). Raised with the
    message alone, so it pickles back to a Dask client."""

    params: Any = None
    steps: int | None = None
    why: str = ""        # in a few words: "the evaluation raised <its error> on <rows> rows"
    cause: str = ""      # the model's error: "it raised <its type>: <its message>"



class Evaluator:
    """Scores parameters on one dataset; holds device copies of the arrays it needs."""

    def __init__(self, model: Any, dataset: Any, xp: Any = np):
        self.model, self.xp = model, xp
        n = dataset.n_train
        per_row = _labels_per_row(dataset.y_train)
        rows = max(1, EVAL_TRAIN_SUBSET // per_row)
        # Every k-th example: a fixed subset that does not depend on the run's seed.
        stride = max(1, n // rows)
        self.X_train = xp.asarray(dataset.X_train[::stride][:rows])
        self.y_train = xp.asarray(dataset.y_train[::stride][:rows])
        self.X_test = xp.asarray(dataset.X_test)
        self.y_test = xp.asarray(dataset.y_test)
        val = getattr(dataset, "X_val", None) is not None      # a validation set held out of the training rows
        self.X_val = xp.asarray(dataset.X_val) if val else None
        self.y_val = xp.asarray(dataset.y_val) if val else None

    def largest_call(self) -> tuple[Any, Any]:
        """(X, y) of the largest call this evaluator makes to the model: the first chunk of
        its largest set (`EVAL_CHUNK` labels, fewer rows when a set is smaller). What
        `execution.preflight` scores once before any worker starts.

        >>> from workbench.maths.models import make_model
        >>> from workbench.data import load_dataset
        >>> d = load_dataset("digits"); ev = Evaluator(make_model("mlp", d.n_features, d.n_classes), d)
        >>> ev.largest_call()[0].shape[0] == min(EVAL_CHUNK, max(d.n_test, ev.X_train.shape[0]))
        True
        """
        X, y = max(self._sets(), key=lambda s: s[0].shape[0])
        chunk = max(1, EVAL_CHUNK // _labels_per_row(y))
        return X[:chunk], y[:chunk]

    def check(self, params: Any) -> None:
        """Score `params` once on `largest_call`; `EvaluationError` if the model raises."""
        X, y = self.largest_call()
        self._score(params, X, y)

    def _failed(self, exc: Exception, rows: int, params: Any) -> EvaluationError:
        """`EvaluationError` for the model's `exc` on a call of `rows` rows."""
        most = self.largest_call()[0].shape[0]
        err = EvaluationError(
            f"the evaluation called the model's predict and loss on {rows:,} rows at once and it raised "
            f"{type(exc).__name__}: {str(exc).strip()[:200]} (a model must take up to {most:,} rows there: the "
            f"evaluation scores {EVAL_CHUNK:,} labels a call, maths.metrics.EVAL_CHUNK; a model written for "
            "fewer can split X into smaller pieces inside predict and loss)")
        err.params = params
        err.why = f"the evaluation raised {type(exc).__name__} on {rows:,} rows"
        err.cause = f"it raised {type(exc).__name__}: {str(exc).strip()[:200]}"
        return err

    def _sets(self) -> list[tuple[Any, Any]]:
        """The scored sets, in `partial`'s order: the training subset, the test set, the validation set."""
        return [(self.X_train, self.y_train), (self.X_test, self.y_test)] + \
            ([(self.X_val, self.y_val)] if self.X_val is not None else [])

    def __call__(self, params: Any) -> dict[str, float]:
        """`train_loss`, `test_loss`, `test_accuracy` of `params` (not modified), and
        `val_loss`, `val_accuracy` with a validation set."""
        train_loss, _ = self._score(params, self.X_train, self.y_train)
        test_loss, test_acc = self._score(params, self.X_test, self.y_test)
        scores = {"train_loss": train_loss, "test_loss": test_loss, "test_accuracy": test_acc}
        if self.X_val is not None:
            scores["val_loss"], scores["val_accuracy"] = self._score(params, self.X_val, self.y_val)
        return scores

    def partial(self, params: Any, rank: int, size: int) -> np.ndarray:
        """This rank's share of an evaluation that `size` ranks holding the same `params`
        split between them: (train loss sum, train n, test loss sum, test correct, test n)
        over rows rank*n//size : (rank+1)*n//size of each set (n counts labels: rows, or
        their tokens). Summed over the ranks,
        `from_partials` turns them into what `__call__` returns.

        >>> from workbench.maths.models import make_model
        >>> from workbench.data import load_dataset
        >>> d = load_dataset("digits"); m = make_model("mlp", d.n_features, d.n_classes)
        >>> ev = Evaluator(m, d); p = m.init(0)
        >>> whole, split = ev(p), Evaluator.from_partials(ev.partial(p, 0, 2) + ev.partial(p, 1, 2))
        >>> all(abs(whole[k] - split[k]) < 1e-6 * max(1.0, abs(whole[k])) for k in whole)   # float32 sums
        True
        """
        sets = self._sets()
        out = np.zeros(2 + 3 * (len(sets) - 1))
        for i, (X, y) in enumerate(sets):
            n = X.shape[0]
            lo, hi = rank * n // size, (rank + 1) * n // size
            mean_loss, acc = self._score(params, X[lo:hi], y[lo:hi]) if hi > lo else (0.0, 0.0)
            labels = (hi - lo) * _labels_per_row(y)                      # rows, or their tokens
            if i == 0:
                out[0:2] = mean_loss * labels, labels
            else:
                out[3 * i - 1:3 * i + 2] = mean_loss * labels, round(acc * labels), labels
        return out

    @staticmethod
    def from_partials(total: Any) -> dict[str, float]:
        """`train_loss`, `test_loss`, `test_accuracy` (and `val_loss`, `val_accuracy` when
        the partials carry a validation set) from the summed `partial`s."""
        t = [float(v) for v in total]
        scores = {"train_loss": t[0] / t[1], "test_loss": t[2] / t[4], "test_accuracy": t[3] / t[4]}
        if len(t) > 5:
            scores["val_loss"], scores["val_accuracy"] = t[5] / t[7], t[6] / t[7]
        return scores

    def accuracy(self, params: Any, X: Any, y: Any) -> float:
        """Accuracy of `params` on (X, y): LTFB's tournament score."""
        return self._score(params, X, y)[1]

    def per_class(self, params: Any, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
        """(right, rows) of each class on the test set, class by class, from the model's
        predictions (one label per row): where the accuracy comes from, since a data file's
        classes need not be balanced. Their sums are `test_accuracy`'s numerator and
        denominator.

        >>> from workbench.maths.models import make_model
        >>> from workbench.data import load_dataset
        >>> d = load_dataset("digits"); m = make_model("mlp", d.n_features, d.n_classes); p = m.init(0)
        >>> right, rows = Evaluator(m, d).per_class(p, d.n_classes)
        >>> int(rows.sum()) == d.n_test, bool(abs(right.sum() / rows.sum() - Evaluator(m, d)(p)["test_accuracy"]) < 1e-12)
        (True, True)
        """
        right, rows = np.zeros(n_classes, np.int64), np.zeros(n_classes, np.int64)
        for lo in range(0, self.X_test.shape[0], EVAL_CHUNK):
            y = np.asarray(self.y_test[lo:lo + EVAL_CHUNK]).reshape(-1)
            try:
                said = np.asarray(self.model.predict(params, self.X_test[lo:lo + EVAL_CHUNK])).reshape(-1)
            except Exception as exc:
                raise self._failed(exc, len(y), params) from exc
            rows += np.bincount(y, minlength=n_classes)[:n_classes]
            right += np.bincount(y[said == y], minlength=n_classes)[:n_classes]
        return right, rows

    def _score(self, params: Any, X: Any, y: Any) -> tuple[float, float]:
        """(mean loss, accuracy) over every label of (X, y): rows, or each row's tokens."""
        total_loss, correct, n = 0.0, 0, X.shape[0]
        chunk = max(1, EVAL_CHUNK // _labels_per_row(y))
        for lo in range(0, n, chunk):   # the model's summed loss and right answers, chunk by chunk
            try:
                loss_sum, right = self.model.score(params, X[lo:lo + chunk], y[lo:lo + chunk])
            except Exception as exc:
                raise self._failed(exc, min(chunk, n - lo), params) from exc
            total_loss += loss_sum
            correct += right
        labels = n * _labels_per_row(y)
        return total_loss / labels, correct / labels


def _labels_per_row(y: Any) -> int:
    """Labels in one row of y: 1 for classes (N,), T for next tokens (N, T)."""
    return int(math.prod(y.shape[1:]))


def language_metrics(loss: float, accuracy: float | None = None, best_loss: float | None = None) -> dict[str, Any]:
    """A language model's numbers from its mean loss per token (nats) and next-token accuracy.

    Args:
        loss: mean cross-entropy per token, nats.
        accuracy: next-token accuracy, or None.
        best_loss: the lowest loss any model can reach on the data (the generated
            language's entropy over its windows), or None where it is unknown (a text file).
    Returns:
        {"loss_nats_per_token", "perplexity" (exp of the loss), "bits_per_token",
        "next_token_accuracy", "best_loss", "gap_to_best" (loss - best_loss, nats)}.

    >>> language_metrics(1.0, 0.5, best_loss=0.75)["gap_to_best"], round(language_metrics(1.0)["perplexity"], 4)
    (0.25, 2.7183)
    """
    loss = float(loss)
    return {"loss_nats_per_token": loss,
            "perplexity": math.exp(loss) if loss < 700 else math.inf,
            "bits_per_token": loss / math.log(2),
            "next_token_accuracy": None if accuracy is None else float(accuracy),
            "best_loss": None if best_loss is None else float(best_loss),
            "gap_to_best": None if best_loss is None else loss - float(best_loss)}
