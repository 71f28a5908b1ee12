"""The simulator's ComputePool: its stacked passes against the plain per-call maths.

The pool stacks the operands of the calls it computes together into buffers kept between
passes (grown by doubling; fresh arrays where they would be big). Whatever the buffers held
from an earlier, larger pass, every call gets bitwise what `loss_and_grad` alone gives."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.maths.models import MLP
from workbench.sim.transport import ComputePool, _Call


def _calls(model, rng, K, B, shared, x_dtype=np.float32, given=True):
    base = model.init(1)
    params = [base if shared else base + rng.standard_normal(model.n_params).astype(np.float32) for _ in range(K)]
    calls = []
    for p in params:
        X = rng.standard_normal((B, model.n_features)).astype(x_dtype)
        y = rng.integers(0, model.n_classes, B)
        calls.append(_Call(model, p, X, y, np.empty(model.n_params, np.float32) if given else None))
    return calls


def _plain(model, call):
    grad = np.empty(model.n_params, np.float32)
    loss, _ = model.loss_and_grad(call.params, call.X, call.y, grad_out=grad)
    return loss, grad


@pytest.mark.parametrize("keep", [True, False], ids=["kept-buffers", "fresh-arrays"])
def test_stacked_passes_are_bitwise_the_plain_calls_whatever_the_buffers_held(keep, monkeypatch):
    model = MLP(12, 5, hidden=(7,))
    rng = np.random.default_rng(0)
    pool = ComputePool(None)
    if not keep:
        monkeypatch.setattr(ComputePool, "KEEP_ELEMENTS", 0)
    # K grows past the first capacity (8), then shrinks: rows past K hold an earlier pass's operands;
    # the same K again reuses the same views of the buffers (and the model its views of those)
    for K, B, shared, x_dtype, given in [(3, 4, False, np.float32, True), (11, 4, False, np.float64, False),
                                         (2, 4, True, np.float32, True), (5, 6, False, np.float32, True),
                                         (4, 4, False, np.float32, True), (3, 4, False, np.float32, True),
                                         (3, 4, False, np.float32, False)]:   # the first pass's views again
        calls = _calls(model, rng, K, B, shared, x_dtype, given)
        pool._stacked(calls, calls[0].params if shared else None)
        for c in calls:
            loss, grad = _plain(model, c)
            got_loss, got_grad = c.result
            assert c.error is None
            assert got_loss == loss and isinstance(got_loss, float)
            assert got_grad.tobytes() == grad.tobytes()
            if c.grad_out is not None:
                assert got_grad is c.grad_out
    assert bool(pool.buffers) == keep
    if keep:
        assert sorted(b[0] for b in pool.buffers.values()) == [8, 16]   # 4 rows: 8 grown to 16 (11 calls); 6 rows: 8


def test_a_bad_call_in_a_stacked_pass_gets_its_own_error_and_the_others_their_results():
    model = MLP(12, 5, hidden=(7,))
    rng = np.random.default_rng(1)
    pool = ComputePool(None)
    calls = _calls(model, rng, 4, 4, False)
    calls[2].y = calls[2].y + 100                   # labels out of range
    pool._stacked(calls, None)
    assert calls[2].error is not None and calls[2].result is None
    for k in (0, 1, 3):
        assert calls[k].error is None
        assert calls[k].result[1].tobytes() == _plain(model, calls[k])[1].tobytes()

