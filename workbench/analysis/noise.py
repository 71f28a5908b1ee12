"""The gradient noise scale: how large a batch a model at given parameters can use.

McCandlish, Kaplan, Amodei et al., "An Empirical Model of Large-Batch Training" (2018),
give the "simple" noise scale B_simple = tr(Sigma) / |G|^2, where G is the true gradient
(the mean over the training examples) and Sigma the covariance of one example's gradient.
A batch of B examples has gradient noise of variance tr(Sigma) / B against a signal of |G|^2,
so below B_simple a larger batch mostly removes noise (twice the batch, about half the
steps: linear lr scaling's regime), and well above it a larger batch takes about as many
steps as a smaller one: the extra examples are wasted. Their Figure 4 and 7 find the
critical batch of the training runs they study near this B_simple, and growing as the
loss falls (so a run's noise scale is measured at its parameters: early, and trained).

`gradient_noise_scale` estimates it from per-example gradients of `rows` training examples
drawn at random: the mean gradient g_bar and the per-example squared norms give unbiased
estimates tr(Sigma) = (sum |g_i|^2 - n |g_bar|^2) / (n - 1) and |G|^2 = |g_bar|^2 - tr(Sigma) / n,
and how sure the ratio is comes from the jackknife over `groups` groups of the rows (a
band of one standard error: 16th to 84th percentile for a normal spread). A |G|^2 whose
estimate is not clearly positive (the examples' gradients do not agree on a direction that
these rows can see) gives no finite estimate, and says so.

An example is a row of the dataset (a language model's: a sequence of `context` tokens,
its loss the mean over them), the unit `batch_size` counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["NoiseScale", "gradient_noise_scale", "noise_of_examples"]


@dataclass(frozen=True)
class NoiseScale:
    """B_simple and what it was measured from."""

    b_simple: float          # tr(Sigma) / |G|^2 in examples (inf: |G|^2 not measurably > 0)
    low: float               # one jackknife standard error below (the 16th percentile of a normal spread)
    high: float              # one above (the 84th)
    grad_norm: float         # |G|, the estimated true gradient's norm
    trace_cov: float         # tr(Sigma), one example's gradient variance summed over the parameters
    rows: int                # examples whose gradients were taken
    groups: int              # jackknife groups
    at: str                  # which parameters: "initial", "final", "best", or "given"

    def text(self) -> str:
        """One line: the estimate, its band, what it was measured from, and what it means."""
        if not math.isfinite(self.b_simple):
            return (f"gradient noise scale at the {self.at} parameters: not measurable from {self.rows:,} examples "
                    f"(the mean gradient, |G| about {self.grad_norm:.3g}, is within its noise: more rows)")
        if not math.isfinite(self.high):
            return (f"gradient noise scale at the {self.at} parameters: B_simple = tr(Sigma) / |G|^2 about "
                    f"{_n(self.b_simple)} examples, not resolved: without one of {self.groups} groups of the "
                    f"{self.rows:,} examples the mean gradient (|G| {self.grad_norm:.3g}) is within its noise "
                    f"(tr(Sigma) {self.trace_cov:.3g}); near a minimum |G| falls and B_simple grows without bound")
        return (f"gradient noise scale at the {self.at} parameters: B_simple = tr(Sigma) / |G|^2 = "
                f"{_n(self.b_simple)} examples ({_n(self.low)}-{_n(self.high)}, one jackknife standard error "
                f"over {self.groups} groups of {self.rows:,} examples; |G| {self.grad_norm:.3g}, tr(Sigma) "
                f"{self.trace_cov:.3g}): batches well beyond it take about as many steps as one of its size")


def _n(v: float) -> str:
    """An example count as the text gives it: three significant digits below 100, else whole."""
    return f"{v:.3g}" if v < 100 else f"{v:,.0f}"


def _estimate(s: np.ndarray, q: float, n: int) -> tuple[float, float, float]:
    """(B_simple, |G|^2, tr Sigma) from the sum of n per-example gradients and of their squared norms."""
    mean = s / n
    m2 = float(mean @ mean)
    trace = (q - n * m2) / (n - 1)
    g2 = m2 - trace / n
    return (trace / g2 if g2 > 0 else math.inf), g2, trace


def gradient_noise_scale(config: Any, params: Any = None, rows: int = 2048, groups: int = 16, seed: int = 0,
                         at: str = "given") -> NoiseScale:
    """B_simple of `config`'s model and training data at `params` (default: its initial
    parameters), from the per-example gradients of `rows` training examples drawn with
    `seed` (all of them if the set is smaller). See the module.

    Raises:
        ConfigError: `rows` below 2 per group, or `groups` below 2.
    """
    from ..config import ConfigError
    from ..problem import Problem
    if isinstance(groups, bool) or int(groups) < 2:
        raise ConfigError("groups", "a whole number >= 2 (the jackknife leaves one out)", groups)
    problem = Problem.from_config(config)
    data, model = problem.data, problem.new_model()
    n = min(int(rows), int(data.n_train))
    if isinstance(rows, bool) or n < 2 * int(groups):
        raise ConfigError("rows", f"at least 2 per group ({2 * int(groups)}), and the training set has "
                                  f"{data.n_train:,}", rows)
    if params is None:
        params, at = problem.initial_params(), "initial"
    params = np.ascontiguousarray(np.asarray(params, dtype=np.float32))
    if params.shape != (model.n_params,):
        raise ConfigError("params", f"a vector of the model's {model.n_params:,} parameters",
                          f"shape {tuple(params.shape)}")
    pick = np.sort(np.random.default_rng([seed, 7919]).choice(int(data.n_train), n, replace=False))
    return noise_of_examples(model, data.X_train[pick], data.y_train[pick], params, groups=int(groups), at=at)


def noise_of_examples(model: Any, X: Any, y: Any, params: Any, groups: int = 16, at: str = "given") -> NoiseScale:
    """B_simple from the gradients of each example (row) of X, y at `params`, the rows dealt
    round-robin into `groups` groups for the jackknife (the model protocol's `loss_and_grad`)."""
    K, n = int(groups), int(len(X))
    sums = np.zeros((K, int(params.shape[0])))
    squares = np.zeros(K)
    counts = np.zeros(K, dtype=np.int64)
    g = np.empty(params.shape, dtype=params.dtype)
    for i in range(n):
        model.loss_and_grad(params, X[i:i + 1], y[i:i + 1], grad_out=g)
        k = i % K
        g64 = g.astype(np.float64)
        sums[k] += g64
        squares[k] += float(g64 @ g64)
        counts[k] += 1
    s_all, q_all = sums.sum(axis=0), float(squares.sum())
    b, g2, trace = _estimate(s_all, q_all, n)
    se = math.inf
    if math.isfinite(b):
        leave = np.array([_estimate(s_all - sums[k], q_all - squares[k], n - int(counts[k]))[0] for k in range(K)])
        if np.all(np.isfinite(leave)):
            se = math.sqrt((K - 1) / K * float(np.sum((leave - leave.mean()) ** 2)))
    return NoiseScale(b_simple=b, low=max(b - se, 0.0) if math.isfinite(se) else math.nan, high=b + se,
                      grad_norm=math.sqrt(max(g2, 0.0)), trace_cov=trace, rows=n, groups=K, at=at)
