"""The update rules every algorithm shares (`maths.optim`): SGD against closed forms and
steps worked out by hand; adamw, lars and lamb against per-layer references written from
the papers' algorithm boxes, torch.optim.AdamW (when torch is installed) and closed-form
first steps; chunked against whole updates; every algorithm against single-process
training with the same rule; the knobs' bad values; and the run plan."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.api import RunWarning
from workbench.config import ConfigError, RunConfig
from workbench.maths.models import make_model
from workbench.maths.optim import (
    LAMB,
    SGD,
    AdamW,
    OptimizerSettings,
    layout_of,
    make_optimizer,
    make_plan,
    update_passes,
)


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


# ====================================================================== adamw, lars, lamb
# The oracles below are written from the papers' algorithm boxes, one layer at a time
# through the model's named views (no flat-vector tricks), in float64.

MODEL = make_model("mlp", 6, 3, hidden=(5, 4))     # fc1.W (6,5), fc1.b, fc2.W (5,4), fc2.b, fc3.W (4,3), fc3.b


def _params_and_grads(steps, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x0 = MODEL.init(seed).astype(dtype)
    x0[layout_of(MODEL)[1][0]:layout_of(MODEL)[1][1]] = rng.standard_normal(5)   # non-zero biases: decay shows
    return x0, [rng.standard_normal(MODEL.n_params).astype(dtype) for _ in range(steps)]


def _ours(name, x0, grads, lrs, dtype=np.float64, **knobs):
    opt = make_optimizer(OptimizerSettings(name, **knobs), layout_of(MODEL), np, dtype)
    x = x0.copy()
    for g, lr in zip(grads, lrs):
        opt.step(x, g, lr)
    return x


def _lars_reference(x0, grads, lrs, momentum, weight_decay, eta, eps):
    """You, Gitman, Ginsburg 2017, Algorithm 1, per layer: lam = eta ||w|| / (||g|| + beta ||w||);
    v = m v + gamma lam (g + beta w); w -= v. Biases: lam = 1, no decay."""
    x = x0.copy()
    W, vel = MODEL.views(x), {k: np.zeros_like(a) for k, a in MODEL.views(x).items()}
    for g_flat, lr in zip(grads, lrs):
        G = MODEL.views(g_flat)
        for name in W:
            w, g = W[name], G[name]
            if name.endswith(".W"):
                wn, gn = np.linalg.norm(w), np.linalg.norm(g)
                lam = eta * wn / (gn + weight_decay * wn + eps) if wn > 0 and gn > 0 else 1.0
                step = g + weight_decay * w
            else:
                lam, step = 1.0, g
            vel[name] = momentum * vel[name] + lr * lam * step
            w -= vel[name]
    return x


def _lamb_reference(x0, grads, lrs, beta1, beta2, eps, weight_decay, trust=True):
    """You et al. 2019, Algorithm 2 (with bias correction), per layer: m, v; r = m^ / (sqrt(v^) + eps);
    w -= lr phi(||w||) / ||r + lambda w|| (r + lambda w), phi = identity. Biases: plain Adam step."""
    x = x0.copy()
    W = MODEL.views(x)
    m = {k: np.zeros_like(a) for k, a in W.items()}
    v = {k: np.zeros_like(a) for k, a in W.items()}
    for t, (g_flat, lr) in enumerate(zip(grads, lrs), start=1):
        G = MODEL.views(g_flat)
        for name in W:
            w, g = W[name], G[name]
            m[name] = beta1 * m[name] + (1 - beta1) * g
            v[name] = beta2 * v[name] + (1 - beta2) * g * g
            r = (m[name] / (1 - beta1**t)) / (np.sqrt(v[name] / (1 - beta2**t)) + eps)
            if name.endswith(".W"):
                u = r + weight_decay * w
                wn, un = np.linalg.norm(w), np.linalg.norm(u)
                ratio = wn / un if (trust and wn > 0 and un > 0) else 1.0
            else:
                u, ratio = r, 1.0
            w -= lr * ratio * u
    return x


LRS = [0.5, 1.5, 1.0, 0.25, 2.0, 1.0]          # a changing lr: lars's lr sits inside its velocity


@pytest.mark.parametrize("momentum, weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.9, 5e-4), (0.5, 0.1)])
def test_lars_matches_the_papers_algorithm_box_layer_by_layer(momentum, weight_decay):
    x0, grads = _params_and_grads(len(LRS))
    got = _ours("lars", x0, grads, LRS, momentum=momentum, weight_decay=weight_decay, trust_coefficient=0.01)
    want = _lars_reference(x0, grads, LRS, momentum, weight_decay, eta=0.01, eps=1e-8)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert not np.allclose(got, x0)


@pytest.mark.parametrize("beta1, beta2, eps, weight_decay", [(0.9, 0.999, 1e-8, 0.0), (0.9, 0.999, 1e-6, 0.01),
                                                             (0.5, 0.9, 1e-3, 0.1)])
def test_lamb_matches_the_papers_algorithm_box_layer_by_layer(beta1, beta2, eps, weight_decay):
    x0, grads = _params_and_grads(len(LRS))
    lrs = [lr * 0.01 for lr in LRS]
    got = _ours("lamb", x0, grads, lrs, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay)
    want = _lamb_reference(x0, grads, lrs, beta1, beta2, eps, weight_decay)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_lamb_with_its_trust_ratio_fixed_at_one_is_adamw():
    class LAMB1(LAMB):
        def trust_ratio(self, w_norm, u_norm):
            return 1.0
    x0, grads = _params_and_grads(5)
    s = OptimizerSettings("lamb", weight_decay=0.05)
    lamb1, adamw = LAMB1(s, layout_of(MODEL), np, np.float64), AdamW(s, layout_of(MODEL), np, np.float64)
    a, b = x0.copy(), x0.copy()
    for g in grads:
        lamb1.step(a, g, 0.01)
        adamw.step(b, g, 0.01)
    # x - lr (r + wd x) against (x (1 - lr wd)) - lr r: the same sum in another order
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    assert np.allclose(_lamb_reference(x0, grads, [0.01] * 5, 0.9, 0.999, 1e-8, 0.05, trust=False), a,
                       rtol=1e-12, atol=1e-14)


def test_adams_first_step_is_lr_times_the_sign_of_the_gradient():
    # m^ = g, v^ = g^2 at t = 1: the step is lr g / (|g| + eps) = lr sign(g) up to eps
    x0, (g,) = _params_and_grads(1)
    x = _ours("adamw", x0, [g], [0.01])
    np.testing.assert_allclose(x0 - x, 0.01 * g / (np.abs(g) + 1e-8), rtol=1e-12)
    assert np.all(np.abs((x0 - x) - 0.01 * np.sign(g)) <= 0.01 * 1e-8 / np.abs(g) + 1e-15)   # + rounding of x0 - x


def test_lars_and_lambs_first_steps_have_their_closed_form_lengths():
    # LARS, no decay, any momentum: layer l moves lr * eta * ||w_l|| (along -g_l);
    # LAMB, no decay: layer l moves lr * ||w_l|| (along -sign(g_l)); biases by lr * lam * g and lr * sign(g)
    x0, (g,) = _params_and_grads(1)
    lars = _ours("lars", x0, [g], [2.0], momentum=0.9, trust_coefficient=0.001)
    lamb = _ours("lamb", x0, [g], [0.1])
    for a, b, weight in layout_of(MODEL):
        w = np.linalg.norm(x0[a:b])
        if weight:
            assert np.linalg.norm(x0[a:b] - lars[a:b]) == pytest.approx(2.0 * 0.001 * w, rel=1e-6)
            assert np.linalg.norm(x0[a:b] - lamb[a:b]) == pytest.approx(0.1 * w, rel=1e-6)
            np.testing.assert_allclose((x0 - lars)[a:b] / g[a:b], (x0 - lars)[a] / g[a], rtol=1e-9)  # along g
        else:
            np.testing.assert_allclose(x0[a:b] - lars[a:b], 2.0 * g[a:b], rtol=1e-12)
            np.testing.assert_allclose(x0[a:b] - lamb[a:b], 0.1 * np.sign(g[a:b]), rtol=1e-6)


def test_biases_take_no_weight_decay_under_the_adaptive_rules():
    x0, _ = _params_and_grads(1)
    zero = [np.zeros_like(x0)]
    for name in ("adamw", "lars", "lamb"):
        x = _ours(name, x0, zero, [0.5], weight_decay=0.2)
        for a, b, weight in layout_of(MODEL):
            if weight and name == "adamw":
                np.testing.assert_allclose(x[a:b], x0[a:b] * (1 - 0.5 * 0.2), rtol=1e-14)   # decoupled decay
            if not weight:
                np.testing.assert_array_equal(x[a:b], x0[a:b])


def test_adamw_matches_torch():
    torch = pytest.importorskip("torch")
    x0, grads = _params_and_grads(6, dtype=np.float32)
    lrs = [1e-3, 3e-3, 2e-3, 1e-3, 5e-4, 1e-3]
    got = _ours("adamw", x0, grads, lrs, dtype=np.float32, beta1=0.8, beta2=0.99, eps=1e-7, weight_decay=0.05)
    layers = layout_of(MODEL)
    tensors = [torch.tensor(x0[a:b].copy()) for a, b, _ in layers]
    for t in tensors:
        t.requires_grad_(True)
    groups = [{"params": [t for t, (_, _, w) in zip(tensors, layers) if w], "weight_decay": 0.05},
              {"params": [t for t, (_, _, w) in zip(tensors, layers) if not w], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lrs[0], betas=(0.8, 0.99), eps=1e-7)
    for g, lr in zip(grads, lrs):
        for t, (a, b, _) in zip(tensors, layers):
            t.grad = torch.tensor(g[a:b].copy())
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    want = np.concatenate([t.detach().numpy() for t in tensors])
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)   # float32, six steps


@pytest.mark.parametrize("name", ["sgd", "adamw", "lars", "lamb"])
def test_layer_group_chunks_update_exactly_as_the_whole(name):
    # cgdp's chunks are groups of whole layers (W and b), last layers first
    from workbench.comm.roles import chunk_bounds
    x0, grads = _params_and_grads(4, dtype=np.float32)
    whole, chunked = x0.copy(), x0.copy()
    knobs = dict(weight_decay=0.01, momentum=0.9 if name in ("sgd", "lars") else 0.0)
    a = make_optimizer(OptimizerSettings(name, **knobs), layout_of(MODEL), np, np.float32)
    b = make_optimizer(OptimizerSettings(name, **knobs), layout_of(MODEL), np, np.float32)
    for k, g in enumerate(grads):
        before = g.copy()
        a.step(whole, g, 0.1)
        for lo, hi in chunk_bounds(MODEL.layer_groups(), 1 + k % 2):
            b.step_chunk(chunked, g[lo:hi], 0.1, lo, hi)
        assert np.array_equal(g, before)
    assert np.array_equal(whole, chunked)


@pytest.mark.parametrize("name", ["adamw", "lars", "lamb"])
def test_a_chunk_that_cuts_a_layer_is_refused_and_blocks_cut_at_layer_bounds(name):
    opt = make_optimizer(OptimizerSettings(name), layout_of(MODEL), np, np.float32)
    x = np.ones(MODEL.n_params, np.float32)
    with pytest.raises(ValueError, match="whole layers"):
        opt.step_chunk(x, x[3:20], 0.1, 3, 20)
    bounds = {a for a, _, _ in layout_of(MODEL)} | {MODEL.n_params}
    for parts in (2, 3, 5):
        blocks = opt.blocks(0, MODEL.n_params, parts)
        assert blocks[0][0] == 0 and blocks[-1][1] == MODEL.n_params and len(blocks) == parts
        assert all(lo in bounds and hi in bounds and lo <= hi for lo, hi in blocks)
        assert all(blocks[i][1] == blocks[i + 1][0] for i in range(parts - 1))
    sgd = make_optimizer(OptimizerSettings("sgd"), layout_of(MODEL), np, np.float32)
    assert sgd.blocks(0, 10, 3) == [(0, 3), (3, 6), (6, 10)]        # elementwise: even cuts, as before


def test_chunk_master_with_lamb_equals_the_whole_update_on_the_summed_gradient():
    from workbench.comm.roles import ChunkMaster, chunk_bounds
    x0, grads = _params_and_grads(6, dtype=np.float32)
    s = OptimizerSettings("lamb", weight_decay=0.01)
    master = ChunkMaster(x0, 2, MODEL.layer_groups(), 1, optimizer=s, layout=layout_of(MODEL))
    whole, opt = x0.copy(), make_optimizer(s, layout_of(MODEL), np, np.float32)
    for step in range(3):
        g0, g1 = grads[2 * step], grads[2 * step + 1]
        for lo, hi in chunk_bounds(MODEL.layer_groups(), 1):
            master.add(step, 0, lo, hi, g0[lo:hi], 0.01)
            master.add(step, 1, lo, hi, g1[lo:hi], 0.01)
        total = g0.copy()
        total += g1                                            # rank order, as the master sums
        opt.step(whole, total, 0.01)
    np.testing.assert_array_equal(master.result()[0], whole)


def test_shm_server_keeps_lambs_moments_in_the_segment(tmp_path):
    import uuid

    from workbench.comm.roles import ParameterServer, role_state_spec
    from workbench.comm.shm import ShmServer, create_server_segment, unlink_segment
    n, s, layout = MODEL.n_params, OptimizerSettings("lamb", weight_decay=0.01), layout_of(MODEL)
    x0, grads = _params_and_grads(4, dtype=np.float32)
    name = create_server_segment(f"wbt{uuid.uuid4().hex[:10]}", x0, role_state_spec(n, optimizer=s, layout=layout))
    try:
        lock = str(tmp_path / "server.lock")
        open(lock, "x").close()     # made by the run's creator (util.private.create_lock); the workers open it
        a, b = (ShmServer(name, lock, n, 2, optimizer=s, layout=layout) for _ in range(2))
        core = ParameterServer(x0, size=2, optimizer=s, layout=layout)
        for k, g in enumerate(grads):          # two clients of one server: the moments must be shared
            got = (a if k % 2 else b).push(g, 0.01, k)
            want = core.push(g, 0.01, k)
            np.testing.assert_array_equal(got[1], want[1])
        a.close(), b.close()
    finally:
        unlink_segment(name)


def test_shm_chunk_master_final_chunk_is_split_at_layer_bounds(tmp_path):
    """Two workers (threads) share a shared-memory master under lars: the final chunk's
    blocks hold whole layers, and the result equals the in-process master."""
    import threading
    import uuid

    from workbench.comm.roles import ChunkMaster, chunk_bounds, role_state_spec
    from workbench.comm.shm import ShmChunkMaster, create_master_segment, unlink_segment
    n, groups, layout = MODEL.n_params, MODEL.layer_groups(), layout_of(MODEL)
    s = OptimizerSettings("lars", momentum=0.9, weight_decay=1e-3, trust_coefficient=0.01)
    x0, grads = _params_and_grads(8, dtype=np.float32)
    seg = create_master_segment(f"wbt{uuid.uuid4().hex[:10]}", x0, 2, len(groups),
                                role_state_spec(n, optimizer=s, layout=layout))
    lock, got = str(tmp_path / "m.lock"), {}
    open(lock, "x").close()         # made by the run's creator; the workers open it

    def worker(rank):
        m = ShmChunkMaster(seg, lock, rank, 2, groups, 2, n, optimizer=s, layout=layout)
        for step in range(4):
            g = grads[2 * step + rank]
            for lo, hi in chunk_bounds(groups, 2):
                m.push(step, rank, lo, hi, g[lo:hi], 0.5, 0.0, False, 0.0 if lo == 0 else None)
            got[rank] = m.fetch(step)[0].copy()
        m.close()
    try:
        threads = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        unlink_segment(seg)
    oracle = ChunkMaster(x0, 2, groups, 2, optimizer=s, layout=layout)
    for step in range(4):
        for lo, hi in chunk_bounds(groups, 2):
            for r in range(2):
                oracle.add(step, r, lo, hi, grads[2 * step + r][lo:hi], 0.5)
    np.testing.assert_allclose(got[0], oracle.result()[0], rtol=0, atol=0)
    np.testing.assert_array_equal(got[1], got[0])


def test_update_passes_grow_with_the_rule():
    assert update_passes("sgd") == 3 < update_passes("lars") <= update_passes("adamw") < update_passes("lamb")


@pytest.mark.parametrize("changes, field", [
    ({"optimizer": "adam"}, "optimizer"),
    ({"optimizer": "adamw", "beta1": 1.0}, "beta1"),
    ({"optimizer": "lamb", "beta2": -0.1}, "beta2"),
    ({"optimizer": "adamw", "eps": 0}, "eps"),
    ({"optimizer": "lars", "eps": float("nan")}, "eps"),
    ({"optimizer": "lars", "trust_coefficient": -1}, "trust_coefficient"),
    ({"optimizer": "lars", "trust_coefficient": float("inf")}, "trust_coefficient"),
    ({"optimizer": "lars", "trust_coefficient": True}, "trust_coefficient"),
    ({"optimizer": "sgd", "beta1": 0.8}, "beta1"),                 # a knob of another rule
    ({"optimizer": "lars", "beta2": 0.99}, "beta2"),
    ({"optimizer": "adamw", "trust_coefficient": 0.01}, "trust_coefficient"),
    ({"optimizer": "adamw", "momentum": 0.5}, "momentum"),
    ({"optimizer": "lamb", "nesterov": True}, "nesterov"),
    ({"optimizer": "sgd", "eps": 1e-6}, "eps"),
    ({"momentum": 0.0, "nesterov": True}, "nesterov"),               # torch refuses it too
    ({"algorithm": "hogwild_sgd", "optimizer": "lamb"}, "optimizer"),
    ({"algorithm": "async_measgd", "optimizer": "adamw"}, "optimizer"),
])
def test_bad_optimizer_knobs_are_refused_naming_the_field(changes, field):
    with pytest.raises(ConfigError) as err:
        RunConfig(**{"algorithm": "sync_sgd", "cpus": 2, **changes})
    assert err.value.field == field and str(err.value).startswith(f"{field}: ")


def test_bad_optimizer_knob_on_the_cli_is_one_line_and_exit_2():
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "workbench", "run", "--algorithm", "sync_sgd", "--optimizer", "lars",
                           "--beta1", "0.5"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: beta1: only with optimizer adamw or lamb (optimizer is lars; leave it at 0.9), got 0.5"]


# ---------------------------------------------------------------- every algorithm uses the rule
ALGO_BASE = dict(dataset="digits", model="mlp", batch_size=64, seed=3, steps=15)
RULE_KNOBS = {"adamw": dict(lr=0.003, weight_decay=0.01), "lars": dict(lr=2.0, weight_decay=5e-4),
              "lamb": dict(lr=0.01, weight_decay=0.01)}


@pytest.mark.parametrize("algorithm, cpus, optimizer, extra", [
    ("sync_sgd", 2, "adamw", {}), ("sync_sgd", 2, "lars", {}), ("sync_sgd", 2, "lamb", {}),
    ("cgdp", 2, "lars", {"chunk_layers": 1}), ("cgdp", 2, "lamb", {"chunk_layers": 1}),
    ("async_msgd", 1, "adamw", {}), ("async_sgd", 1, "lars", {"momentum": 0.0}),
])
def test_parallel_algorithms_follow_single_process_training_with_the_same_rule(algorithm, cpus, optimizer, extra):
    from workbench.execution.engine import run_threads
    cfg = RunConfig(algorithm=algorithm, cpus=cpus, optimizer=optimizer, **ALGO_BASE, **RULE_KNOBS[optimizer],
                    **extra)
    ref = run_threads(cfg.replace(algorithm="sgd", chunk_layers="auto"))
    plain = run_threads(cfg.replace(algorithm="sgd", chunk_layers="auto", optimizer="sgd", weight_decay=0.0,
                                        lr=0.1))
    got = run_threads(cfg)
    assert got.status == "completed"
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=2e-5)
    assert np.abs(ref.params - plain.params).max() > 1e-2          # the rule really changed the run


def test_elastic_local_steps_use_the_rule_without_momentum():
    from workbench.data import global_batch
    from workbench.execution.engine import run_threads
    from workbench.problem import Problem
    cfg = RunConfig(algorithm="async_easgd", cpus=1, optimizer="lamb", tau=3, **ALGO_BASE, **RULE_KNOBS["lamb"])
    got = run_threads(cfg)
    problem = Problem.from_config(cfg)
    data, model, plan = problem.data, problem.new_model(), problem.plan
    x, xc = model.init(cfg.seed), model.init(cfg.seed)
    opt = make_optimizer(cfg, model.layout(), np, x.dtype, momentum=0.0)
    for t in range(plan.total_steps):
        idx = global_batch(data.n_train, plan.batch_size, cfg.seed, t)
        _, g = model.loss_and_grad(x, data.X_train[idx], data.y_train[idx])
        opt.step(x, g, plan.schedule(t))
        if (t + 1) % cfg.tau == 0:
            d = 0.9 * (x - xc)
            x, xc = x - d, xc + d
    np.testing.assert_allclose(got.params, xc, rtol=0, atol=1e-5)


def test_ltfb_trainers_of_two_workers_follow_trainers_of_one_with_adams_state_travelling():
    from workbench.execution.engine import run_threads
    kw = dict(algorithm="ltfb", dataset="digits", model="mlp", batch_size=64, seed=1, trainers=2, steps=30,
              round_size=10, exchange_state=True, trainer_lrs=[0.0003, 0.01], optimizer="adamw")
    one, two = run_threads(RunConfig(cpus=2, **kw)), run_threads(RunConfig(cpus=4, **kw))
    key = ["round", "trainer"]
    a, b = one.tournaments.sort_values(key), two.tournaments.sort_values(key)
    assert a["adopted"].any()
    assert a["adopted"].tolist() == b["adopted"].tolist()
    np.testing.assert_allclose(one.params, two.params, rtol=0, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("name, clip", [("adamw", 0.0), ("lars", 0.0), ("lamb", 0.0), ("sgd", 1.5), ("adamw", 1.5)])
def test_cupy_updates_equal_numpy_updates(name, clip):
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception:
        pytest.skip("no GPU")
    x0, grads = _params_and_grads(4, dtype=np.float32)
    s = OptimizerSettings(name, weight_decay=0.01, momentum=0.9 if name in ("lars", "sgd") else 0.0, grad_clip=clip)
    a, b = make_optimizer(s, layout_of(MODEL), np, np.float32), make_optimizer(s, layout_of(MODEL), cp, np.float32)
    x, y = x0.copy(), cp.asarray(x0)
    for g in grads:
        a.step(x, g, 0.01)
        b.step(y, cp.asarray(g), 0.01)
    np.testing.assert_allclose(cp.asnumpy(y), x, rtol=1e-5, atol=1e-7)   # float32, different reduction orders
    if clip:                                # (the gradients' norms are 8-10: every one clipped, on both)
        assert cp.asnumpy(b.state["clip"]).tolist() == a.state["clip"].tolist() == [4, 4]


# ---------------------------------------------------------------- what the costlier rules cost
def test_the_simulator_charges_each_rule_its_update_passes():
    from workbench.sim.costs import make_costs
    model = make_model("mlp", 64, 10, hidden=(128,))
    base = RunConfig(algorithm="sync_sgd", simulate=True, cpus=0, gpus=2, device="v100")
    costs = {name: make_costs(base.replace(**({"optimizer": name} if name != "sgd" else {})), model, ["gpu"] * 2)
             for name in ("sgd", "adamw", "lars", "lamb")}
    sgd = costs["sgd"]
    for name, c in costs.items():
        extra = c.compute(0, 32) - sgd.compute(0, 32)
        assert extra == pytest.approx((update_passes(name) - 3) * sgd.vector_bytes / sgd.devices[0].mem_bw, rel=1e-9)
    assert costs["lamb"].compute(0, 32) > costs["adamw"].compute(0, 32) > sgd.compute(0, 32)


def test_a_simulated_parameter_server_takes_longer_to_apply_lamb_than_sgd():
    from workbench.sim.run import run_simulated
    kw = dict(algorithm="async_msgd", simulate=True, cpus=0, gpus=8, device="v100", network="10GbE",
              timing_model="alexnet", steps=4, batch_size=64)
    sgd, lamb = (run_simulated(RunConfig(**kw, **extra)) for extra in ({}, {"optimizer": "lamb", "lr": 0.001}))
    # AlexNet's 61M parameters through one server: 8 more passes of 244 MB at host memory speed per push
    assert lamb.summary["wall_time_s"] > sgd.summary["wall_time_s"] * 1.05


def test_the_cost_model_charges_each_rule_its_update_passes():
    from workbench.analysis.costmodel import HOST_MEMORY_BYTES_PER_S, Calibration, step_prediction
    cal = Calibration(compute={"cpu": (1e-4, 2e-6)}, alpha=2e-5, beta=1e-9, n_params=100_000)
    for algorithm in ("sync_sgd", "async_sgd", "cgdp"):
        sgd = step_prediction(cal, algorithm, 4, 256)
        lamb = step_prediction(cal, algorithm, 4, 256, optimizer="lamb")
        assert lamb["samples_per_s"] < sgd["samples_per_s"], algorithm
    one_sgd = step_prediction(cal, "sgd", 1, 256)["step_time_s"]
    one_lamb = step_prediction(cal, "sgd", 1, 256, optimizer="lamb")["step_time_s"]
    assert one_lamb - one_sgd == pytest.approx(8 * cal.n_bytes / HOST_MEMORY_BYTES_PER_S, rel=1e-9)


def test_the_sgd_curvature_warning_is_not_raised_for_the_normalised_rules(recwarn):
    import workbench as wb
    wb.run(RunConfig(algorithm="sgd", optimizer="lars", lr=4.0, lr_scaling="linear", batch_size=1024, steps=3))
    assert not [w for w in recwarn if issubclass(w.category, RunWarning)]
    with pytest.warns(RunWarning, match="stability bound"):   # the same lr under sgd does warn
        wb.run(RunConfig(algorithm="sgd", lr=4.0, lr_scaling="linear", batch_size=1024, steps=3))


# ---------------------------------------------------------------- on a real Dask cluster
@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.parametrize("algorithm, optimizer", [("cgdp", "lamb"), ("async_msgd", "adamw")])
def test_dask_shared_memory_and_actor_roles_keep_the_rules_state(client, algorithm, optimizer):
    # the role's moments live in the shared segment (shm) or the actor: both follow the reference
    from workbench.execution.engine import run, run_threads
    cpus = 2 if algorithm == "cgdp" else 1
    chunks = 1 if algorithm == "cgdp" else "auto"
    cfg = RunConfig(algorithm=algorithm, cpus=cpus, optimizer=optimizer, chunk_layers=chunks, **ALGO_BASE,
                    **RULE_KNOBS[optimizer])
    ref = run_threads(cfg.replace(algorithm="sgd", chunk_layers="auto"))
    shm, actor = run(cfg, cluster=client), run(cfg.replace(comm="dask"), cluster=client)
    assert shm.status == actor.status == "completed", (shm.summary.get("errors"), actor.summary.get("errors"))
    assert (shm.summary["server"], actor.summary["server"]) == ("shm", "actor")
    np.testing.assert_allclose(shm.params, ref.params, rtol=0, atol=2e-5)
    np.testing.assert_allclose(actor.params, ref.params, rtol=0, atol=2e-5)


def test_the_dashboard_shows_each_optimiser_knob_only_for_its_rule():
    pytest.importorskip("ipywidgets")
    from workbench.ui.controls import CONTROLS
    applies = {c.field: c.applies for c in CONTROLS}
    shown = {name: {n for n in ("momentum", "nesterov", "beta1", "beta2", "eps", "trust_coefficient")
                    if applies[n](RunConfig(algorithm="sync_sgd", cpus=2, optimizer=name))}
             for name in ("sgd", "adamw", "lars", "lamb")}
    assert shown == {"sgd": {"momentum", "nesterov"}, "adamw": {"beta1", "beta2", "eps"},
                     "lars": {"momentum", "eps", "trust_coefficient"}, "lamb": {"beta1", "beta2", "eps"}}
    assert applies["optimizer"](RunConfig(algorithm="sync_sgd", cpus=2))
    assert not applies["optimizer"](RunConfig(algorithm="hogwild_sgd", cpus=2))   # its update is its own
    assert applies["momentum"](RunConfig(algorithm="async_measgd", cpus=2))       # its delta
    assert applies["weight_decay"] is None                                          # every rule's
