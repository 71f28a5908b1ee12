"""A researcher's own model: the gradient check the docs offer, and the refusals a model
of an unusual shape gets (a scalar tensor, a dict of arrays, an instance that cannot be
sent to a worker). No cluster: the checks run in this process."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import workbench as wb
from workbench.config import ConfigError
from workbench.maths.optim import segments
from workbench.maths.protocol import as_model, check_gradient, check_model


class LogReg:
    """Softmax regression with one shared scalar bias: layout W (d, k) and b of shape ()."""

    def __init__(self, n_features, n_classes):
        self.d, self.k = n_features, n_classes

    def layout(self):
        return [("W", (self.d, self.k)), ("b", ())]

    def init(self, seed):
        return np.random.default_rng(seed).standard_normal(self.d * self.k + 1) * 0.1   # float64, as users write

    def _logits(self, p, X):
        return X @ p[:-1].reshape(self.d, self.k) + p[-1]

    def loss_and_grad(self, p, X, y):
        z = self._logits(p, X)
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        B = len(y)
        loss = np.mean(np.log(s[:, 0]) - z[np.arange(B), y])
        d = e / s
        d[np.arange(B), y] -= 1
        d /= B
        g = np.empty_like(p)
        g[:-1] = (X.T @ d).ravel()
        g[-1] = d.sum()
        return loss, g

    def predict(self, p, X):
        return self._logits(p, X).argmax(axis=1)


class TripledGradient(LogReg):
    """A wrong gradient that still trains (as a 3x larger lr would): nothing else notices it."""

    def loss_and_grad(self, p, X, y):
        loss, g = super().loss_and_grad(p, X, y)
        return loss, 3 * g


def _data(n=40, d=5, k=3):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((n, d))
    return X, (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 1)


def test_check_gradient_passes_a_right_gradient_and_flags_a_wrong_one():
    X, y = _data()
    good = wb.check_gradient(LogReg, X, y)
    # the oracle is the central difference; in float64 at step 1e-5 its error is ~1e-10 of the slope
    assert good.ok and good.max_rel_error < 1e-7 and "agrees" in str(good)
    bad = check_gradient(TripledGradient, X, y)
    assert not bad.ok and "DISAGREES" in str(bad)
    # 3g against g: |3a - a| / |3a| = 2/3 in every direction, to the central difference's accuracy
    for d in bad.directions:
        assert d["rel_error"] == pytest.approx(2 / 3, abs=1e-6)
    # the run's own first-step check cannot tell: the wrong gradient passes it
    check_model(as_model(TripledGradient(5, 3)), X.astype(np.float32), y)


def test_check_gradient_takes_a_name_an_instance_and_the_builtins():
    X, y = _data()
    assert check_gradient(f"{__name__}:LogReg", X, y).ok
    assert check_gradient(LogReg(5, 3), X, y).ok
    assert check_gradient("workbench.maths.models:MLP", X, y, model_args={"hidden": [8]}).ok


def test_a_scalar_tensor_in_the_layout_is_one_number_not_a_refusal():
    m = as_model(LogReg(5, 3), "LogReg")
    X, y = _data()
    check_model(m, X.astype(np.float32), y)
    assert m.layout() == (("W", (5, 3)), ("b", ())) and m.n_params == 16
    assert m.views(np.arange(16, dtype=np.float32))["b"].shape == ()
    # LARS/LAMB: the matrix is a weight, the scalar a bias (no decay, no trust ratio)
    assert segments(m.layout()) == ((0, 15, True), (15, 16, False))


def test_a_layout_with_a_zero_size_is_still_refused():
    class Zero(LogReg):
        def layout(self):
            return [("W", (5, 0)), ("b", (16,))]
    with pytest.raises(ConfigError, match=r"^model: .*a shape of positive sizes, or \(\) for one number"):
        as_model(Zero(5, 3), "Zero").layout()


def test_a_dict_of_arrays_from_init_is_named_as_a_dict():
    class DictInit(LogReg):
        def init(self, seed):
            return {"W": np.zeros((5, 3)), "b": np.zeros(())}
    with pytest.raises(ConfigError, match=r"^model: .*returns one 1-D array, its tensors concatenated.*returns a dict"):
        as_model(DictInit(5, 3), "DictInit").init(0)


def test_an_instance_that_does_not_pickle_is_refused_naming_the_model_field():
    class Locked(LogReg):
        def __init__(self, n_features, n_classes):
            super().__init__(n_features, n_classes)
            self.lock = threading.Lock()
    with pytest.raises(ConfigError) as err:
        wb.RunConfig(model=Locked(5, 3))
    text = str(err.value)
    assert text.startswith("model: an instance that pickles") and "cannot pickle" in text and "its class" in text
    assert wb.RunConfig(model=Locked).model.endswith(":test_an_instance_that_does_not_pickle_is_refused_naming_the_model_field.<locals>.Locked")


def test_dataset_is_reachable_from_the_package():
    from workbench.data import Dataset
    assert wb.Dataset is Dataset and callable(wb.Dataset.from_arrays)


class AtMost64Rows(LogReg):
    """A model written for small batches: the run's batches fit, the simulator's timing did not."""

    def loss_and_grad(self, p, X, y):
        if len(X) > 64:
            raise ValueError(f"this model takes at most 64 rows, got {len(X)}")
        return super().loss_and_grad(p, X, y)


def test_a_model_that_raises_while_the_simulator_times_it_is_named_with_the_batch():
    # a simulated run without flops_per_sample times the model on this core at batch sizes
    # doubling up to the data's rows (or 1,024): 128 rows here, though the run's batch is 16
    from workbench.sim.calibration import local_device
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((300, 5)).astype(np.float32), rng.integers(0, 3, 300)
    m = as_model(AtMost64Rows(5, 3), "AtMost64Rows")
    with pytest.raises(ConfigError) as err:
        local_device(m, X, y, m.init(0))
    text = str(err.value)
    assert text.startswith("model: a model whose loss_and_grad runs on the batches this machine's core is timed at")
    assert "raised ValueError at 128 rows: this model takes at most 64 rows, got 128" in text
    assert "flops_per_sample" in text and "timing_model" in text and "\n" not in text
