"""Evaluation of a parameter vector: train loss on a fixed subset, test loss and accuracy."""
from __future__ import annotations

from typing import Any

import numpy as np

EVAL_TRAIN_SUBSET = 4096  # training examples scored per evaluation (a fixed, seed-free subset)
EVAL_CHUNK = 2048         # examples per forward pass, to bound memory on big test sets


class Evaluator:
    """Scores parameters on one dataset; holds device copies of the arrays it needs."""

    def __init__(self, model: Any, dataset: Any, xp: Any = np):
        self.model, self.xp = model, xp
        n = dataset.n_train
        # Every k-th example: a fixed subset that does not depend on the run's seed.
        stride = max(1, n // EVAL_TRAIN_SUBSET)
        self.X_train = xp.asarray(dataset.X_train[::stride][:EVAL_TRAIN_SUBSET])
        self.y_train = xp.asarray(dataset.y_train[::stride][:EVAL_TRAIN_SUBSET])
        self.X_test = xp.asarray(dataset.X_test)
        self.y_test = xp.asarray(dataset.y_test)

    def __call__(self, params: Any) -> dict[str, float]:
        """`train_loss`, `test_loss`, `test_accuracy` of `params` (not modified)."""
        train_loss, _ = self._score(params, self.X_train, self.y_train)
        test_loss, test_acc = self._score(params, self.X_test, self.y_test)
        return {"train_loss": train_loss, "test_loss": test_loss, "test_accuracy": test_acc}

    def partial(self, params: Any, rank: int, size: int) -> np.ndarray:
        """This rank's share of an evaluation that `size` ranks holding the same `params`
        split between them: (train loss sum, train n, test loss sum, test correct, test n)
        over rows rank*n//size : (rank+1)*n//size of each set. Summed over the ranks,
        `from_partials` turns them into what `__call__` returns.

        >>> from workbench.maths.models import make_model
        >>> from workbench.data import load_dataset
        >>> d = load_dataset("digits"); m = make_model("mlp", d.n_features, d.n_classes)
        >>> ev = Evaluator(m, d); p = m.init(0)
        >>> whole, split = ev(p), Evaluator.from_partials(ev.partial(p, 0, 2) + ev.partial(p, 1, 2))
        >>> all(abs(whole[k] - split[k]) < 1e-6 * max(1.0, abs(whole[k])) for k in whole)   # float32 sums
        True
        """
        out = np.zeros(5)
        for i, (X, y) in enumerate(((self.X_train, self.y_train), (self.X_test, self.y_test))):
            n = X.shape[0]
            lo, hi = rank * n // size, (rank + 1) * n // size
            mean_loss, acc = self._score(params, X[lo:hi], y[lo:hi]) if hi > lo else (0.0, 0.0)
            if i == 0:
                out[0:2] = mean_loss * (hi - lo), hi - lo
            else:
                out[2:5] = mean_loss * (hi - lo), round(acc * (hi - lo)), hi - lo
        return out

    @staticmethod
    def from_partials(total: Any) -> dict[str, float]:
        """`train_loss`, `test_loss`, `test_accuracy` from the summed `partial`s."""
        t = [float(v) for v in total]
        return {"train_loss": t[0] / t[1], "test_loss": t[2] / t[4], "test_accuracy": t[3] / t[4]}

    def accuracy(self, params: Any, X: Any, y: Any) -> float:
        """Accuracy of `params` on (X, y): LTFB's tournament score."""
        return self._score(params, X, y)[1]

    def _score(self, params: Any, X: Any, y: Any) -> tuple[float, float]:
        total_loss, correct, n = 0.0, 0, X.shape[0]
        for lo in range(0, n, EVAL_CHUNK):   # the model's summed loss and right answers, chunk by chunk
            loss_sum, right = self.model.score(params, X[lo:lo + EVAL_CHUNK], y[lo:lo + EVAL_CHUNK])
            total_loss += loss_sum
            correct += right
        return total_loss / n, correct / n
