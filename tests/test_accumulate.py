"""Gradient accumulation (`config.accumulate`, `maths.accumulate`): a worker's slice in
micro-batches. Oracles: the whole slice's gradient in float64 (the protocol's losses are
means over rows, so the rows-weighed mean of the micro-batches' is the slice's), the weighed
sum written out by hand in float32 (bitwise), the plain path against the stacked one
(bitwise), every algorithm's run against the same run without accumulation, a real Dask
cluster against threads, the memory a pass really takes (a child process's peak), and the
refusals before any worker starts."""
from __future__ import annotations

import json
import re
from unittest import mock

import numpy as np
import pytest

from workbench.config import ConfigError, RunConfig
from workbench.maths.accumulate import Accumulated, accumulated, micro_batches
from workbench.maths.gpt import GPT
from workbench.maths.models import make_model

MODELS = {
    "softmax": lambda: make_model("softmax", 7, 4),
    "mlp": lambda: make_model("mlp", 9, 4, hidden=(6, 5)),
    "cnn": lambda: make_model("cnn", 2 * 8 * 8, 3, hidden=(3, 4), image_shape=(2, 8, 8)),
    "gpt": lambda: GPT(context=6, vocab=5, n_layers=2, d_model=8, n_heads=2),
}


def _batch(model, B: int, seed: int = 0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    if isinstance(model, GPT):
        X = rng.integers(0, model.vocab, (B, model.context))
        return X, rng.integers(0, model.vocab, (B, model.context))
    return rng.standard_normal((B, model.n_features)).astype(dtype), rng.integers(0, model.n_classes, B)


def test_micro_batches_cover_the_rows_in_order_and_differ_by_a_row_at_most():
    for rows in (1, 2, 7, 10, 33, 64):
        for parts in (1, 2, 3, 4, 8, 100):
            got = micro_batches(rows, parts)
            assert len(got) == min(parts, rows)
            assert got[0][0] == 0 and got[-1][1] == rows and all(a[1] == b[0] for a, b in zip(got, got[1:]))
            sizes = [hi - lo for lo, hi in got]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True) and min(sizes) >= 1
    assert micro_batches(10, 3) == [(0, 4), (4, 7), (7, 10)]


@pytest.mark.parametrize("key", list(MODELS))
@pytest.mark.parametrize("rows, parts", [(12, 4), (10, 3), (5, 5)])
def test_the_micro_batches_gradient_is_the_slices_in_float64(key, rows, parts):
    model = MODELS[key]()
    params = model.init(1).astype(np.float64)
    params += 0.05 * np.random.default_rng(2).standard_normal(params.size)
    X, y = _batch(model, rows, seed=3, dtype=np.float64)
    loss, grad = model.loss_and_grad(params, X, y)
    X0, p0 = X.copy(), params.copy()
    got_loss, got = accumulated(model, parts).loss_and_grad(params, X, y)
    assert got_loss == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(got, grad, rtol=1e-10, atol=1e-13)
    assert np.array_equal(X, X0) and np.array_equal(params, p0)          # inputs untouched


@pytest.mark.parametrize("key", list(MODELS))
def test_float32_is_the_weighed_sum_by_hand_bitwise(key):
    # the oracle: each micro-batch's own gradient, weighed m_i / n in float32, summed in order
    model = MODELS[key]()
    params = model.init(0)
    X, y = _batch(model, 10, seed=4)
    want = np.zeros_like(params)
    loss = np.float32(0)
    for lo, hi in micro_batches(10, 3):
        w = np.float32((hi - lo) / 10)
        l_i, g_i = model.loss_and_grad(params, X[lo:hi], y[lo:hi])
        want = want + w * g_i if lo else w * g_i
        loss = loss + w * np.float32(l_i)
    out = np.full_like(params, np.nan)
    got_loss, got = accumulated(model, 3).loss_and_grad(params, X, y, grad_out=out)
    assert got is out and got.tobytes() == want.astype(np.float32).tobytes()
    assert got_loss == float(loss)
    full = model.loss_and_grad(params, X, y)[1]
    assert np.abs(got - full).max() <= 1e-6 * max(1.0, float(np.abs(full).max()))   # float32 rounding apart


@pytest.mark.parametrize("key", ["mlp", "gpt"])
def test_the_stacked_pass_is_bitwise_the_plain_calls(key):
    model = MODELS[key]()
    acc = accumulated(model, 3)
    assert hasattr(acc, "loss_and_grad_stacked")
    K, B = 4, 7
    params = np.stack([model.init(k) for k in range(K)])
    Xs, ys = zip(*(_batch(model, B, seed=k) for k in range(K)))
    X, y = np.stack(Xs), np.stack(ys)
    grads = np.empty_like(params)
    losses = acc.loss_and_grad_stacked(params, X, y, grads)
    for k in range(K):
        loss, g = acc.loss_and_grad(params[k], X[k], y[k])
        assert float(losses[k]) == loss and grads[k].tobytes() == g.tobytes()
    shared = acc.loss_and_grad_stacked(params[0], X, y, grads)     # one vector for every slice
    assert float(shared[1]) == acc.loss_and_grad(params[0], X[1], y[1])[0]


@pytest.mark.gpu
@pytest.mark.parametrize("key", ["mlp", "gpt"])
def test_cupy_micro_batches_give_numpys(key):
    # a GPU worker's slice in micro-batches: the same code on CuPy arrays (xp from params)
    cp = pytest.importorskip("cupy")
    model = MODELS[key]()
    params = model.init(1).astype(np.float64)
    X, y = _batch(model, 10, seed=8, dtype=np.float64)
    loss, grad = accumulated(model, 3).loss_and_grad(params, X, y)
    loss_gpu, grad_gpu = accumulated(model, 3).loss_and_grad(cp.asarray(params), cp.asarray(X), cp.asarray(y))
    assert abs(loss_gpu - loss) < 1e-10
    np.testing.assert_allclose(cp.asnumpy(grad_gpu), grad, rtol=1e-8, atol=1e-12)


def test_a_model_without_a_stacked_pass_offers_none():
    cnn = make_model("cnn", 2 * 8 * 8, 3, hidden=(3,), image_shape=(2, 8, 8))
    plain = type("Plain", (), {"loss_and_grad": cnn.loss_and_grad, "n_params": cnn.n_params})()
    assert not hasattr(Accumulated(plain, 2), "loss_and_grad_stacked")
    assert accumulated(cnn, 1) is cnn                                     # 1: the model itself


@pytest.mark.parametrize("key", ["mlp", "cnn", "gpt"])
def test_on_grad_ready_reports_each_layer_once_with_its_final_sum(key):
    model = MODELS[key]()
    params = model.init(2)
    X, y = _batch(model, 9, seed=6)
    _, want = accumulated(model, 4).loss_and_grad(params, X, y)
    grad = np.empty_like(params)
    seen = []
    accumulated(model, 4).loss_and_grad(params, X, y, grad_out=grad,
                                        on_grad_ready=lambda a, b: seen.append((a, b, grad[a:b].copy())))
    assert sorted((a, b) for a, b, _ in seen) == sorted(model.layer_groups())   # every group, once
    for a, b, chunk in seen:
        assert chunk.tobytes() == want[a:b].tobytes()                          # already the whole sum


def test_a_model_of_the_users_accumulates_through_the_protocols_adapter():
    from workbench.maths.protocol import as_model

    class Mean:   # the mean squared distance of a 3-vector to each row's one-hot label, by hand
        def init(self, seed):
            return np.random.default_rng(seed).standard_normal(3).astype(np.float32)

        def loss_and_grad(self, p, X, y):
            d = p[None, :] - np.eye(3, dtype=p.dtype)[y]
            return float(np.mean(np.sum(d * d, axis=1))), 2 * d.mean(axis=0)

        def predict(self, p, X):
            return np.full(len(X), int(np.argmax(p)))
    model = as_model(Mean(), "Mean")
    p = model.init(0).astype(np.float64)
    y = np.array([0, 1, 1, 2, 2, 2, 0])
    X = np.zeros((7, 2))
    loss, g = accumulated(model, 3).loss_and_grad(p, X, y)
    onehot = np.eye(3)[y]
    np.testing.assert_allclose(g, 2 * (p - onehot.mean(axis=0)), rtol=1e-12)   # the closed form
    assert loss == pytest.approx(float(np.mean(np.sum((p - onehot) ** 2, axis=1))), rel=1e-12)


# ------------------------------------------------------------------------------ runs
BASE = dict(dataset="digits", model="mlp", batch_size=64, seed=3, steps=20, lr=0.3, momentum=0.9)


@pytest.mark.parametrize("algorithm, cpus, extra", [
    ("sgd", 1, {}), ("sync_sgd", 2, {}), ("sync_sgd", 3, {"optimizer": "adamw", "lr": 0.01, "grad_clip": 0.5}),
    ("local_sgd", 2, {"tau": 4}), ("diloco", 2, {"tau": 4}), ("cgdp", 2, {}), ("sync_easgd", 2, {}),
    ("ltfb", 2, {"trainers": 2, "round_size": 10}), ("sync_sgd", 2, {"compression": "powersgd"}),
])
def test_a_run_in_micro_batches_is_the_run_without(algorithm, cpus, extra):
    # the same steps up to float32 rounding: 20 steps of an MLP moved the parameters by ~2e-7 here;
    # 2e-5 leaves two orders of magnitude, and a run that dropped or repeated a micro-batch is off by >1e-3
    from workbench.execution.engine import run_threads
    cfg = RunConfig(algorithm=algorithm, cpus=cpus, **{**BASE, **extra})
    plain, acc = run_threads(cfg), run_threads(cfg.replace(accumulate=5))
    assert plain.status == acc.status == "completed"
    np.testing.assert_allclose(acc.params, plain.params, rtol=0, atol=2e-5)
    np.testing.assert_allclose(acc.steps["loss"], plain.steps["loss"], rtol=1e-5)
    assert acc.summary["config"]["accumulate"] == 5
    other = run_threads(cfg.replace(batch_size=52, accumulate=5))     # a run that saw other rows differs
    assert np.abs(other.params - plain.params).max() > 1e-3


@pytest.mark.cluster
def test_dask_workers_accumulate_as_threads_do(client):
    from workbench.api import run
    from workbench.execution.engine import run_threads
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, accumulate=4, **BASE)
    got = run(cfg, cluster=client, progress=False)
    assert got.status == "completed"
    np.testing.assert_array_equal(got.params, run_threads(cfg).params)     # deterministic: the same bits


def test_a_slice_smaller_than_accumulate_is_refused_before_any_worker_starts():
    with pytest.raises(ConfigError, match=r"^accumulate: at most a worker's rows of a batch \(16: batch_size 64 over "
                                          r"4 worker\(s\)\), each micro-batch a row at least"):
        RunConfig(algorithm="sync_sgd", cpus=4, batch_size=64, accumulate=17)
    RunConfig(algorithm="sync_sgd", cpus=4, batch_size=64, accumulate=16)
    RunConfig(algorithm="sgd", cpus=4, batch_size=64, accumulate=64)        # sgd: one worker, the whole batch
    with pytest.raises(ConfigError, match="accumulate: a whole number >= 1"):
        RunConfig(accumulate=0)


def test_the_cli_takes_accumulate(tmp_path, capsys):
    from workbench.apps.cli import main
    out = tmp_path / "run"
    code = main(["run", "--algorithm", "sync_sgd", "--cpus", "2", "--batch-size", "32", "--steps", "6",
                 "--accumulate", "4", "--out", str(out), "--simulate"])
    assert code == 0
    assert json.loads((out / "summary.json").read_text())["config"]["accumulate"] == 4
    code = main(["run", "--algorithm", "sync_sgd", "--cpus", "2", "--batch-size", "32", "--accumulate", "17"])
    assert code == 2 and "error: accumulate: at most a worker's rows of a batch (16" in capsys.readouterr().err


# ------------------------------------------------------------------------------ the simulator's charge
def test_the_simulator_charges_each_pass_its_overhead_and_weight_reads():
    from workbench.problem import Problem
    from workbench.sim.costs import make_costs
    cfg = RunConfig(algorithm="sync_sgd", cpus=2, batch_size=64, simulate=True, gpus=2, device="v100")
    model = Problem.from_config(cfg).new_model()
    one, four = (make_costs(c, model, ["gpu", "gpu"]) for c in (cfg, cfg.replace(accumulate=4)))
    dev = one.devices[0]

    def pass_s(rows):
        return dev.compute_s(one.train_flops * rows, one.weight_bytes) + dev.step_overhead_s
    assert one.compute(0, 32) == pytest.approx(pass_s(32) + one.update(0))
    assert four.compute(0, 32) == pytest.approx(4 * pass_s(8) + one.update(0))
    assert four.compute(0, 10) == pytest.approx(2 * pass_s(3) + 2 * pass_s(2) + one.update(0))   # 3, 3, 2, 2
    assert four.compute(0, 2) == pytest.approx(2 * pass_s(1) + one.update(0))    # two rows: two passes
    assert four.last_pass_share(0, 32) == pytest.approx(0.25) and one.last_pass_share(0, 32) == 1.0


def test_a_simulated_run_takes_longer_in_micro_batches_and_learns_the_same():
    from workbench.api import run
    cfg = RunConfig(algorithm="sync_sgd", cpus=4, simulate=True, **BASE)
    a, b = run(cfg, progress=False), run(cfg.replace(accumulate=4), progress=False)
    np.testing.assert_allclose(b.params, a.params, rtol=0, atol=2e-5)
    assert b.summary["wall_time_s"] > a.summary["wall_time_s"]


def test_cgdp_chunks_leave_during_the_last_micro_batchs_backward_pass():
    # cgdp sends each layer group as its gradient is complete: with accumulation, in the last pass
    from workbench.api import run
    cfg = RunConfig(algorithm="cgdp", cpus=2, gpus=1, simulate=True, device="v100", **{**BASE, "steps": 6})
    a, b = run(cfg, progress=False), run(cfg.replace(accumulate=4), progress=False)
    np.testing.assert_allclose(b.params, a.params, rtol=0, atol=2e-5)
    assert b.summary["wall_time_s"] > a.summary["wall_time_s"]


# ------------------------------------------------------------------------------ memory
GPT_RUN = dict(algorithm="sync_sgd", dataset="markov_text", model="gpt", cpus=2, batch_size=1024)


def test_the_memory_estimate_counts_a_pass_of_a_workers_micro_batch():
    from workbench.execution.preflight import memory_estimate, pass_rows, slice_rows
    cfg = RunConfig(**GPT_RUN)
    assert slice_rows(cfg) == 512 and pass_rows(cfg) == 512 and pass_rows(cfg.replace(accumulate=3)) == 171
    assert slice_rows(cfg.replace(algorithm="sgd")) == 1024                # one worker: the whole batch
    assert slice_rows(cfg.replace(algorithm="cgdp", split="speed")) == 1024   # shares unknown before the run
    one, four = memory_estimate(cfg), memory_estimate(cfg.replace(accumulate=4))
    assert one["pass_activations"] == pytest.approx(4 * four["pass_activations"], rel=0.01)
    assert one["activations"] == max(one["pass_activations"], one["eval_activations"])


def test_a_run_too_big_for_memory_is_told_the_accumulate_that_fits():
    import psutil

    from workbench.execution.preflight import check_memory, memory_estimate
    cfg = RunConfig(**GPT_RUN)
    small = psutil.virtual_memory()._replace(available=2 << 30, total=2 << 30)
    with mock.patch("psutil.virtual_memory", return_value=small), \
            mock.patch("workbench.execution.preflight.limit_budgets", return_value=[]):
        # (each local worker's share of the 2 GiB, beside the client: `cluster.worker_memory_limit`)
        with pytest.raises(ConfigError, match=r"^accumulate: at least (\d+) for a run that fits in 80% of a "
                                              r"worker's memory \(0\.7 GiB of 0\.9 GiB\)") as err:
            check_memory(cfg)
        k = int(re.search(r"at least (\d+)", str(err.value)).group(1))
        check_memory(cfg.replace(accumulate=k))                          # it fits
        with pytest.raises(ConfigError, match="^accumulate"):
            check_memory(cfg.replace(accumulate=k - 1))                  # and is the smallest that does
        est = memory_estimate(cfg.replace(accumulate=k))
        assert est["pass_activations"] < memory_estimate(cfg)["pass_activations"]
        # an odd batch: slices of 513 and 512, so 512 micro-batches at most (the config's own rule),
        # and the error is the accumulate that fits, not the config refusing the search's largest try
        with pytest.raises(ConfigError, match=r"^accumulate: at least \d+ for a run that fits"):
            check_memory(cfg.replace(batch_size=1025))
        assert cfg.replace(batch_size=1025).most_accumulate == 512 and cfg.most_accumulate == 512
    # one simulating process holds every virtual worker's slice at once: there too (8 slices of 128
    # sequences: 1.8 GiB in one pass, 1.0 GiB in two, against 90% of 1.5 GiB)
    smaller = small._replace(available=3 << 29, total=3 << 29)
    with mock.patch("psutil.virtual_memory", return_value=smaller), \
            mock.patch("workbench.execution.preflight.limit_budgets", return_value=[]):
        sim = cfg.replace(simulate=True, cpus=8)
        with pytest.raises(ConfigError, match=r"^accumulate: at least 2 for a run that fits"):
            check_memory(sim)
        check_memory(sim.replace(accumulate=2))


def test_the_accumulate_refusal_says_the_share_of_the_limit_and_one_row_basis():
    """The refusal quoted "fits in the address-space limit (2.9 GiB): this one needs about 2.3
    GiB" (refused against 80% of it, `MEMORY_SHARE`, unsaid), and a batch larger than the data
    set (20000 rows of markov_text's 8000) as "a training pass of 20000 rows 15.4 GiB" beside
    "micro-batches of 1250 rows ... 1.9 GiB": the estimate counts at most the data set's rows."""
    import psutil

    from workbench.execution.preflight import MEMORY_SHARE, check_memory, preflight
    small = psutil.virtual_memory()._replace(available=2 << 30, total=2 << 30)

    def said(cfg: RunConfig) -> str:
        with pytest.raises(ConfigError, match="^accumulate") as err:
            check_memory(cfg)
        return str(err.value)
    with mock.patch("psutil.virtual_memory", return_value=small), \
            mock.patch("workbench.execution.preflight.limit_budgets", return_value=[]):
        assert MEMORY_SHARE == 0.8
        text = said(RunConfig(**GPT_RUN))
        assert "fits in 80% of a worker's memory (0.7 GiB of 0.9 GiB): this one needs about" in text
        need = float(re.search(r"needs about ([\d.]+) GiB", text).group(1))
        assert 0.7 < need, text                       # the need quoted is over the budget quoted
        big = RunConfig(**{**GPT_RUN, "algorithm": "sgd", "cpus": 1, "batch_size": 20000})
        text = said(big)
        (rows, held), (micro, micro_held) = [(int(r), float(g)) for r, g in
                                             re.findall(r"of (\d+) rows (?:a pass holds )?([\d.]+) GiB", text)]
        assert rows == 10000 and "the batch (20000 rows) is larger than the training set (8000 rows)" in text
        # one basis: bytes per row agree between the two passes (each rounded to 0.1 GiB)
        assert held / rows == pytest.approx(micro_held / micro, rel=0.1), text
        with pytest.raises(Exception, match=r"^batch_size: at most the training set size \(8000\), got 20000"):
            preflight(big)                            # a run is refused for the batch, before its memory


def test_a_pass_in_micro_batches_really_holds_less():
    # what one GPT step of 128 sequences allocates at its peak (NumPy reports its buffers to
    # tracemalloc): ~150 MiB in one pass here, ~20 MiB in 8 (a micro-batch's workspaces); the same loss
    import tracemalloc

    from workbench.problem import Problem
    p = Problem.from_config(RunConfig(algorithm="sgd", dataset="markov_text", model="gpt", batch_size=128))
    data, params = p.data, p.initial_params()
    X, y = data.X_train[:128], data.y_train[:128]

    def peak(k: int) -> tuple[int, float]:
        model, g = accumulated(p.new_model(), k), np.empty_like(params)
        tracemalloc.start()
        try:
            loss, _ = model.loss_and_grad(params, X, y, grad_out=g)
            return tracemalloc.get_traced_memory()[1], loss
        finally:
            tracemalloc.stop()
    (whole, l1), (parts, l8) = peak(1), peak(8)
    assert l8 == pytest.approx(l1, rel=1e-5)
    assert whole > 50 * 2**20 and parts < whole / 4, (parts, whole)


# ------------------------------------------------------------------------------ the cost model
def test_the_cost_model_fits_a_pass_and_predicts_each_pass_its_overhead():
    # runs measured at two slice sizes, one in 4 micro-batches: compute = passes * c0 + c1 * samples
    import pandas as pd

    from workbench.analysis import costmodel as cm
    from workbench.results.result import RunResult
    c0, c1 = 2e-4, 1e-5

    def measured(per_worker: int, accumulate: int) -> RunResult:
        passes = min(accumulate, per_worker)
        rows = [{"worker": w, "step": s, "epoch": 0.0, "time": (s + 1) * 0.01, "loss": 1.0, "lr": 0.1,
                 "samples": per_worker, "compute_s": passes * c0 + c1 * per_worker, "comm_s": 1e-3, "wait_s": 0.0,
                 "staleness": 0.0, "bytes_sent": 0.0} for s in range(40) for w in range(2)]
        summary = {"algorithm": "sync_sgd", "config": {"algorithm": "sync_sgd", "accumulate": accumulate},
                   "workers": [{"rank": w, "kind": "cpu"} for w in range(2)], "n_params": 1000, "samples_per_s": 1.0}
        return RunResult(summary=summary, steps=pd.DataFrame(rows), evals=pd.DataFrame())
    cal = cm.calibrate([measured(64, 1), measured(32, 4)])
    assert cal.compute["cpu"] == pytest.approx((c0, c1), rel=1e-6)      # per pass, per sample
    one = cm.step_prediction(cal, "sync_sgd", 2, 128)
    four = cm.step_prediction(cal, "sync_sgd", 2, 128, accumulate=4)
    assert four["compute_s"] - one["compute_s"] == pytest.approx(3 * c0)
    assert cm.step_prediction(cal, "sync_sgd", 2, 4, accumulate=8)["compute_s"] == pytest.approx(2 * c0 + 2 * c1)
