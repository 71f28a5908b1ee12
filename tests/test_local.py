"""local_sgd, post_local_sgd and diloco: against sync_sgd, the inner optimiser and plain
NumPy loops of their equations (the oracles), on threads and on the simulated cluster."""
import numpy as np
import pytest

from workbench.algorithms.local import switch_step
from workbench.config import ConfigError, RunConfig
from workbench.data import global_batch, split_batch
from workbench.execution.engine import run_threads
from workbench.maths.optim import SGD, make_plan
from workbench.problem import Problem

# float32 sums taken in another order (parameters averaged vs gradients averaged): agreement
# to rounding. Parameters are O(0.1-1); 2e-5 is ~100 float32 ulps after a few dozen steps.
ATOL = 2e-5


def local_reference(cfg: RunConfig, workers: int, outer: bool = False) -> np.ndarray:
    """Plain NumPy local SGD / DiLoCo: worker i takes slice i of global batch t at step t,
    its own SGD (momentum as configured); every tau steps (and at the last step) the
    weighted average of x_i (local SGD), or the outer Nesterov step on the averaged change
    x - x_i (DiLoCo) after which every worker restarts from the outer x."""
    data, model = Problem.from_config(cfg).data, Problem.from_config(cfg).new_model()
    plan = make_plan(cfg, data.n_train)
    slices = split_batch(plan.batch_size, [1.0] * workers)
    weights = [(hi - lo) / plan.batch_size for lo, hi in slices]
    n = model.n_params
    xs = [model.init(cfg.seed) for _ in range(workers)]
    opts = [SGD(n, np, np.float32, cfg.momentum, cfg.nesterov, cfg.weight_decay) for _ in range(workers)]
    x, v = model.init(cfg.seed), np.zeros(n, np.float32)
    mu = cfg.outer_momentum
    switch = switch_step(cfg.post_local_epoch, plan.steps_per_epoch) if cfg.algorithm == "post_local_sgd" else 0
    for t in range(plan.total_steps):
        idx = global_batch(data.n_train, plan.batch_size, cfg.seed, t)
        for i, (lo, hi) in enumerate(slices):
            _, g = model.loss_and_grad(xs[i], data.X_train[idx[lo:hi]], data.y_train[idx[lo:hi]])
            opts[i].step(xs[i], g, plan.schedule(t))
        k = t + 1 - switch
        if t < switch or k % cfg.tau == 0 or t + 1 == plan.total_steps:
            if outer:
                delta = sum(w * (x - xi) for w, xi in zip(weights, xs))
                v = mu * v + delta
                x = x - cfg.outer_lr * (delta + mu * v)
            else:
                x = sum(w * xi for w, xi in zip(weights, xs))
            xs = [x.astype(np.float32).copy() for _ in range(workers)]
    return x


# ------------------------------------------------------------------------------ oracles
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_local_sgd_with_tau_1_is_sync_sgd(momentum, tiny):
    """H = 1: averaging parameters after every step is sync_sgd's gradient average (linear maths)."""
    kw = dict(cpus=3, steps=20, tau=1, momentum=momentum, weight_decay=1e-4)
    local = run_threads(tiny(algorithm="local_sgd", **kw))
    sync = run_threads(tiny(algorithm="sync_sgd", **kw))
    assert local.status == sync.status == "completed"
    np.testing.assert_allclose(local.params, sync.params, rtol=0, atol=ATOL)
    # and the losses each step reports at an average are the global batch's, as sync_sgd's
    np.testing.assert_allclose(local.steps.loss.to_numpy(), sync.steps.loss.to_numpy(), rtol=1e-4)


def test_post_local_sgd_before_its_switch_is_sync_sgd(tiny):
    kw = dict(cpus=2, steps=20, tau=4, momentum=0.9)
    post = run_threads(tiny(algorithm="post_local_sgd", post_local_epoch=100.0, **kw))   # never switches
    sync = run_threads(tiny(algorithm="sync_sgd", **kw))
    np.testing.assert_allclose(post.params, sync.params, rtol=0, atol=ATOL)


@pytest.mark.parametrize("algorithm, kw", [
    ("local_sgd", dict(tau=4, momentum=0.9)),
    ("local_sgd", dict(tau=5, momentum=0.0)),                # 23 steps: the last average is a short round
    ("post_local_sgd", dict(tau=4, momentum=0.9, post_local_epoch=0.2)),
])
def test_local_sgd_follows_the_reference_loop(algorithm, kw, tiny):
    cfg = tiny(algorithm=algorithm, cpus=2, steps=23, **kw)
    got = run_threads(cfg)
    assert got.status == "completed"
    np.testing.assert_allclose(got.params, local_reference(cfg, 2), rtol=0, atol=ATOL)
    # local steps really happened: the result is not sync_sgd's
    sync = run_threads(tiny(algorithm="sync_sgd", cpus=2, steps=23, momentum=kw["momentum"]))
    assert np.abs(got.params - sync.params).max() > 1e-3


@pytest.mark.parametrize("inner", [dict(momentum=0.9, lr=0.1), dict(optimizer="adamw", lr=0.003, weight_decay=0.01)])
def test_diloco_one_worker_outer_lr_1_no_momentum_is_its_inner_optimiser(inner, tiny):
    cfg = tiny(algorithm="diloco", cpus=1, steps=20, tau=4, outer_lr=1.0, outer_momentum=0.0, **inner)
    got = run_threads(cfg)
    reference = run_threads(tiny(algorithm="sgd", steps=20, **inner))
    np.testing.assert_allclose(got.params, reference.params, rtol=0, atol=ATOL)


@pytest.mark.parametrize("kw", [dict(outer_lr=0.7, outer_momentum=0.9, momentum=0.0),
                                dict(outer_lr=0.5, outer_momentum=0.5, momentum=0.9, nesterov=True)])
def test_diloco_follows_the_reference_loop(kw, tiny):
    cfg = tiny(algorithm="diloco", cpus=2, steps=22, tau=4, **kw)
    got = run_threads(cfg)
    assert got.status == "completed" and got.summary["outer_lr"] == kw["outer_lr"]
    np.testing.assert_allclose(got.params, local_reference(cfg, 2, outer=True), rtol=0, atol=ATOL)


# ------------------------------------------------------------------------------ what a run records
def test_bytes_sent_are_counted_at_averages_only(tiny):
    cfg = tiny(algorithm="local_sgd", cpus=2, steps=12, tau=4)
    got = run_threads(cfg)
    n = got.params.size
    per_average = 2 * (2 - 1) / 2 * 4 * (n + 2 + 2 * 2)     # ring allreduce of the buffer (params + tail)
    sent = got.steps[got.steps.worker == 0].bytes_sent.to_numpy()
    np.testing.assert_allclose(sent, [0, 0, 0, per_average] * 3)
    sync = run_threads(tiny(algorithm="sync_sgd", cpus=2, steps=12))
    assert sync.steps.bytes_sent.sum() == pytest.approx(4 * got.steps.bytes_sent.sum())


def test_post_local_switch_step_and_summary(tiny):
    assert switch_step(1.0, 45) == 45 and switch_step(1 / 3, 3) == 1
    cfg = tiny(algorithm="post_local_sgd", cpus=2, steps=20, tau=5, post_local_epoch=0.3)
    got = run_threads(cfg)
    spe = make_plan(cfg, Problem.from_config(cfg).data.n_train).steps_per_epoch
    assert got.summary["switch_step"] == switch_step(0.3, spe)
    averages = (got.steps[got.steps.worker == 0].bytes_sent > 0).sum()
    s = got.summary["switch_step"]
    assert averages == s + len(range(s + 4, 20, 5)) + (0 if (20 - s) % 5 == 0 else 1)


@pytest.mark.parametrize("algorithm", ["local_sgd", "diloco"])
def test_simulated_cluster_is_deterministic_and_charges_fewer_exchanges(algorithm, tiny):
    import workbench as wb
    kw = dict(cpus=8, simulate=True, network="10GbE", steps=16, tau=4)
    a = wb.run(tiny(algorithm=algorithm, **kw))
    b = wb.run(tiny(algorithm=algorithm, **kw))
    assert a.status == "completed"
    np.testing.assert_array_equal(a.params, b.params)
    sync = wb.run(tiny(algorithm="sync_sgd", **kw))
    assert a.summary["time_breakdown"]["comm_s"] < sync.summary["time_breakdown"]["comm_s"] / 2


def test_bad_knobs_fail_with_the_field(tiny):
    with pytest.raises(ConfigError, match="outer_lr: a finite number > 0"):
        tiny(algorithm="diloco", cpus=2, outer_lr=0)
    with pytest.raises(ConfigError, match="post_local_epoch"):
        tiny(algorithm="post_local_sgd", cpus=2, post_local_epoch=float("nan"))


# ------------------------------------------------------------------------------ on Dask (shared memory)
@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", ["local_sgd", "diloco"])
def test_on_dask_follows_the_reference_loop(client, algorithm, tiny):
    from workbench.execution.engine import run
    cfg = tiny(algorithm=algorithm, cpus=2, steps=22, tau=4, momentum=0.9)
    got = run(cfg, client)
    assert got.status == "completed" and got.summary["comm"] == "shm"
    np.testing.assert_allclose(got.params, local_reference(cfg, 2, outer=algorithm == "diloco"), rtol=0, atol=ATOL)


@pytest.mark.parametrize("algorithm", ["local_sgd", "diloco", "dpsgd"])
def test_stop_and_divergence_are_decided_together(algorithm, tiny):
    import time
    t0 = time.time()
    got = run_threads(tiny(algorithm=algorithm, cpus=2, epochs=400, tau=8), should_stop=lambda: time.time() - t0 > 0.3)
    assert got.status == "stopped"              # 400 epochs cannot finish in 0.3 s: the stop ended it
    assert time.time() - t0 < 60                # a hang guard, not a timing claim (stop latency is a bench)
    assert got.steps.groupby("worker")["step"].max().nunique() == 1      # every worker ended at the same step
    bad = run_threads(tiny(algorithm=algorithm, cpus=2, steps=200, tau=4, lr=1e6, momentum=0.0))
    assert bad.status == "diverged"
    assert any(e["event"] == "diverged" for e in bad.summary["events"])
