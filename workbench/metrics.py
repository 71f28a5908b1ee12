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

    def accuracy(self, params: Any, X: Any, y: Any) -> float:
        """Accuracy of `params` on (X, y): LTFB's tournament score."""
        return self._score(params, X, y)[1]

    def _score(self, params: Any, X: Any, y: Any) -> tuple[float, float]:
        total_loss, correct, n = 0.0, 0, X.shape[0]
        for lo in range(0, n, EVAL_CHUNK):
            Xc, yc = X[lo:lo + EVAL_CHUNK], y[lo:lo + EVAL_CHUNK]
            logits = self.model.logits(params, Xc)                       # (b, classes)
            m = logits.max(axis=1, keepdims=True)
            lse = self.xp.log(self.xp.exp(logits - m).sum(axis=1)) + m[:, 0]
            total_loss += float((lse - logits[self.xp.arange(len(yc)), yc]).sum())
            correct += int((logits.argmax(axis=1) == yc).sum())
        return total_loss / n, correct / n
