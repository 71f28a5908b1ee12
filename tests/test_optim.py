"""The SGD rule every algorithm shares (`maths.optim.SGD`), against closed forms and steps
worked out by hand; and the run plan."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.config import RunConfig
from workbench.maths.optim import SGD, make_plan


def _run(steps, x0, grads, lrs, **kw):
    """`steps` updates of SGD(**kw) from x0 with the given gradient function and lrs (float64)."""
    x = np.array(x0, dtype=np.float64)
    opt = SGD(x.size, np, np.float64, **kw)
    for t in range(steps):
        opt.step(x, np.asarray(grads(t, x), dtype=np.float64), lrs[t] if isinstance(lrs, list) else lrs)
    return x


def test_plain_sgd_is_x_minus_lr_g():
    x = _run(3, [1.0, -2.0], lambda t, x: [0.5 * (t + 1), 1.0], 0.1, momentum=0.0)
    assert x.tolist() == pytest.approx([1.0 - 0.1 * (0.5 + 1.0 + 1.5), -2.0 - 0.3], abs=1e-15)


@pytest.mark.parametrize("mu", [0.5, 0.9])
@pytest.mark.parametrize("t", [1, 2, 7])
def test_heavy_ball_under_a_constant_gradient_follows_its_closed_form(mu, t):
    # v_k = g (1 - mu^k) / (1 - mu);  x_t = x0 - lr * sum_{k=1..t} v_k
    g, lr, x0 = 2.0, 0.05, 3.0
    expected = x0 - lr * g * (t - mu * (1 - mu**t) / (1 - mu)) / (1 - mu)
    x = _run(t, [x0], lambda k, x: [g], lr, momentum=mu)
    assert x[0] == pytest.approx(expected, rel=1e-13)


@pytest.mark.parametrize("t", [1, 3, 6])
def test_nesterov_under_a_constant_gradient_follows_its_closed_form(t):
    # the applied step is g + mu v_k = g (1 + mu (1 - mu^k) / (1 - mu))
    g, lr, x0, mu = 1.0, 0.1, 0.0, 0.9
    expected = x0 - lr * sum(g * (1 + mu * (1 - mu**k) / (1 - mu)) for k in range(1, t + 1))
    x = _run(t, [x0], lambda k, x: [g], lr, momentum=mu, nesterov=True)
    assert x[0] == pytest.approx(expected, rel=1e-13)
    plain = _run(t, [x0], lambda k, x: [g], lr, momentum=mu)
    if t > 1:
        assert x[0] < plain[0]          # Nesterov's look-ahead moves further under a steady gradient


def test_weight_decay_alone_shrinks_geometrically():
    # zero loss gradient: g = wd * x, so x_t = x0 (1 - lr wd)^t
    x = _run(5, [2.0, -1.0], lambda t, x: [0.0, 0.0], 0.5, momentum=0.0, weight_decay=0.1)
    assert x.tolist() == pytest.approx([2.0 * 0.95**5, -0.95**5], rel=1e-14)


def test_weight_decay_with_momentum_three_steps_by_hand():
    # x0 = 1, wd = 0.1, lr = 0.5, mu = 0.9, zero loss gradient:
    #   g = 0.1,     v = 0.1,     x = 1 - 0.05        = 0.95
    #   g = 0.095,   v = 0.185,   x = 0.95 - 0.0925   = 0.8575
    #   g = 0.08575, v = 0.25225, x = 0.8575 - 0.126125 = 0.731375
    for t, want in [(1, 0.95), (2, 0.8575), (3, 0.731375)]:
        x = _run(t, [1.0], lambda k, x: [0.0], 0.5, momentum=0.9, weight_decay=0.1)
        assert x[0] == pytest.approx(want, abs=1e-14)


def test_weight_decay_with_nesterov_two_steps_by_hand():
    #   g = 0.1,    v = 0.1,    step = g + 0.9 v = 0.19,    x = 1 - 0.095       = 0.905
    #   g = 0.0905, v = 0.1805, step = 0.0905 + 0.16245 = 0.25295, x = 0.905 - 0.126475 = 0.778525
    x = _run(2, [1.0], lambda k, x: [0.0], 0.5, momentum=0.9, nesterov=True, weight_decay=0.1)
    assert x[0] == pytest.approx(0.778525, abs=1e-14)


def test_momentum_accumulates_raw_gradients_not_lr_scaled_ones():
    # PyTorch's form v = mu v + g; x -= lr v. With a changing lr it differs from
    # v = mu v - lr g; x += v: step 2 moves by lr2 (mu g1 + g2), not mu lr1 g1 + lr2 g2.
    g1, g2, lr1, lr2, mu = 1.0, 3.0, 0.1, 0.4, 0.5
    x = _run(2, [0.0], lambda t, x: [g1 if t == 0 else g2], [lr1, lr2], momentum=mu)
    assert x[0] == pytest.approx(-lr1 * g1 - lr2 * (mu * g1 + g2), abs=1e-15)
    assert x[0] != pytest.approx(-lr1 * g1 - (mu * lr1 * g1 + lr2 * g2), abs=1e-6)


@pytest.mark.parametrize("kw", [dict(momentum=0.0), dict(momentum=0.9), dict(momentum=0.9, nesterov=True),
                                dict(momentum=0.9, weight_decay=0.01)])
def test_chunk_by_chunk_equals_the_whole_update_and_the_gradient_is_untouched(kw):
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(50).astype(np.float32)
    grads = [rng.standard_normal(50).astype(np.float32) for _ in range(3)]
    whole, chunked = x0.copy(), x0.copy()
    a, b = SGD(50, np, np.float32, **kw), SGD(50, np, np.float32, **kw)
    for g in grads:
        before = g.copy()
        a.step(whole, g, 0.1)
        for lo, hi in [(0, 7), (7, 30), (30, 50)]:
            b.step_chunk(chunked, g[lo:hi], 0.1, lo, hi)
        assert np.array_equal(g, before)
    assert np.array_equal(whole, chunked)
    assert whole.dtype == np.float32 and not np.array_equal(whole, x0)


def test_the_plan_counts_steps_warmup_and_evals():
    cfg = RunConfig(algorithm="sgd", batch_size=100, epochs=2.5, warmup="gradual", warmup_epochs=1,
                    lr=0.1, lr_scaling="linear", base_batch=50)
    plan = make_plan(cfg, n_train=1000)
    assert (plan.steps_per_epoch, plan.total_steps, plan.warmup_steps, plan.eval_every) == (10, 25, 10, 10)
    assert plan.schedule(0) == pytest.approx(0.1) and plan.schedule(10) == pytest.approx(0.2)
    assert [s for s in range(25) if plan.is_eval_step(s)] == [9, 19, 24]
    assert plan.epoch(15) == 1.5
