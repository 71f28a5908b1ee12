"""The gradient noise scale B_simple = tr(Sigma) / |G|^2 (`analysis.noise`, `wb.noise_scale`,
`python -m workbench noise-scale`). Oracles: a model whose per-example gradient is known in
closed form (so B_simple follows from the labels' frequencies alone), McCandlish et al.'s
other estimator (the squared norms of small-batch and full-batch gradients, Appendix A),
and a run's parameters read back from its directory."""
from __future__ import annotations

import math

import numpy as np
import pytest

import workbench as wb
from workbench.analysis.noise import gradient_noise_scale, noise_of_examples
from workbench.config import ConfigError, RunConfig
from workbench.maths.protocol import as_model


class OneHot:
    """loss = |p - onehot(y)|^2 (mean over rows): one example's gradient is 2 (p - e_y)."""

    def init(self, seed):
        return np.random.default_rng(seed).standard_normal(4).astype(np.float32)

    def loss_and_grad(self, p, X, y):
        d = p[None, :] - np.eye(4, dtype=p.dtype)[y]
        return float(np.mean(np.sum(d * d, axis=1))), 2 * d.mean(axis=0)

    def predict(self, p, X):
        return np.full(len(X), int(np.argmax(p)))


def test_b_simple_is_the_closed_form_of_a_model_whose_example_gradients_are_known():
    # g_i = 2 (p - e_{y_i}): the mean is 2 (p - f) for the labels' frequencies f, and the
    # unbiased trace of the covariance 4 n (1 - sum f_c^2) / (n - 1)
    model = as_model(OneHot(), "OneHot")
    rng = np.random.default_rng(3)
    y = rng.choice(4, size=600, p=[0.4, 0.3, 0.2, 0.1])
    X = np.zeros((600, 1), np.float32)
    p = np.array([0.3, 0.3, 0.2, 0.2], np.float64)
    got = noise_of_examples(model, X, y, p, groups=10)
    n, f = 600, np.bincount(y, minlength=4) / 600
    trace = 4 * n * (1 - np.sum(f ** 2)) / (n - 1)
    g2 = float(np.sum((2 * (p - f)) ** 2)) - trace / n
    assert got.trace_cov == pytest.approx(trace, rel=1e-12)
    assert got.grad_norm == pytest.approx(math.sqrt(g2), rel=1e-12)
    assert got.b_simple == pytest.approx(trace / g2, rel=1e-12)
    assert got.low < got.b_simple < got.high and got.rows == 600
    at_mean = noise_of_examples(model, X, y, f.copy(), groups=10)      # at the minimum: no signal left
    assert math.isinf(at_mean.b_simple) and "not measurable" in at_mean.text()


def test_the_small_and_full_batch_estimator_agrees():
    # McCandlish et al.'s Appendix A: the squared norms of many batches' gradients, b = 8 rows
    # drawn without replacement, against the whole training set's (G itself, for this finite set):
    # E|G_b|^2 = |G|^2 + (tr Sigma / b) (n - b) / n, so tr Sigma = (E|G_b|^2 - |G|^2) b n / (n - b);
    # 3000 batches leave a sampling error of a few percent: agreement within 10%
    cfg = RunConfig(algorithm="sgd", dataset="digits", model="mlp", hidden=[32], seed=1)
    got = gradient_noise_scale(cfg, rows=10**6)                            # every training row
    from workbench.problem import Problem
    problem = Problem.from_config(cfg)
    model, data, params = problem.new_model(), problem.data, problem.initial_params()
    n, b = data.n_train, 8
    full = model.loss_and_grad(params, data.X_train, data.y_train)[1].astype(np.float64)
    rng = np.random.default_rng(0)
    small = []
    for _ in range(3000):
        idx = rng.choice(n, b, replace=False)
        g = model.loss_and_grad(params, data.X_train[idx], data.y_train[idx])[1].astype(np.float64)
        small.append(float(g @ g))
    g2 = float(full @ full)
    trace = (np.mean(small) - g2) * b * n / (n - b)
    assert got.rows == n
    assert trace / g2 == pytest.approx(got.b_simple, rel=0.1)
    assert got.grad_norm ** 2 == pytest.approx(g2 - got.trace_cov / n, rel=1e-6)


def test_a_run_grows_its_noise_scale_as_it_trains_and_the_cli_says_it(tmp_path, capsys):
    from workbench.apps.cli import main
    r = wb.run(RunConfig(algorithm="sync_sgd", cpus=2, steps=200, eval_every=100, out=str(tmp_path / "run")),
               cluster="threads", progress=False)
    start, end = wb.noise_scale(r, at="initial"), wb.noise_scale(tmp_path / "run")
    assert start.at == "initial" and end.at == "final" and 0 < start.b_simple < end.b_simple
    assert np.isfinite(start.high) and start.low < start.b_simple < start.high
    assert main(["noise-scale", str(tmp_path / "run"), "--at", "initial"]) == 0
    line = capsys.readouterr().out.strip()
    assert line == start.text() and line.startswith("gradient noise scale at the initial parameters: B_simple = ")
    assert wb.noise_scale(r.summary["config"] | {"out": None}, at="initial").b_simple == start.b_simple


def test_bad_input_is_refused_naming_the_field():
    cfg = RunConfig(algorithm="sgd")
    with pytest.raises(ConfigError, match=r"^rows: at least 2 per group \(32\)"):
        gradient_noise_scale(cfg, rows=10)
    with pytest.raises(ConfigError, match=r"^groups: a whole number >= 2"):
        gradient_noise_scale(cfg, groups=1)
    with pytest.raises(ConfigError, match=r"^params: a vector of the model's"):
        gradient_noise_scale(cfg, params=np.zeros(3))
    with pytest.raises(ConfigError, match=r'^at: "initial" for a config'):
        wb.noise_scale(cfg, at="final")
    with pytest.raises(ConfigError, match=r'^at: "final", "best" or "initial"'):
        wb.noise_scale(cfg, at="last")
