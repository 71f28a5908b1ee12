"""cgdp (CPU-GPU data parallel) and heterogeneous splitting: the same trajectory as SGD."""
import numpy as np
import pytest

from workbench.algorithms.cgdp import ChunkMaster, ChunkTuner, chunk_bounds
from workbench.algorithms.sync import rebalance
from workbench.config import RunConfig
from workbench.engine import run, run_threads
from workbench.reference import train_reference

BASE = dict(dataset="digits", model="mlp", hidden=[64, 32], batch_size=64, lr=0.1, seed=1)


@pytest.mark.parametrize("workers, chunk_layers", [(1, 1), (2, 1), (2, 2), (3, 3), (2, "auto")])
def test_cgdp_on_threads_follows_single_process_sgd(workers, chunk_layers):
    cfg = RunConfig(algorithm="cgdp", cpus=workers, steps=25, chunk_layers=chunk_layers, **BASE)
    ref = train_reference(cfg.replace(algorithm="sgd"))
    got = run_threads(cfg)
    assert got.status == "completed", got.summary.get("errors")
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got.steps[got.steps.worker == 0]["loss"], ref.steps["loss"], rtol=1e-5)


def test_cgdp_with_momentum_and_speed_shares_follows_sgd():
    cfg = RunConfig(algorithm="cgdp", cpus=2, steps=25, momentum=0.9, nesterov=True, weight_decay=1e-4,
                    split="speed", **BASE)
    ref = train_reference(cfg.replace(algorithm="sgd"))
    got = run_threads(cfg)
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-5)
    assert any(e["event"] == "rebalanced" for e in got.events)      # shares really moved
    assert len(got.summary["final_shares"]) == 2


def test_chunks_cover_the_vector_in_backward_order():
    groups = [(0, 100), (100, 150), (150, 160), (160, 170)]
    for k in range(1, 5):
        chunks = chunk_bounds(groups, k)
        assert chunks[0][1] == 170 and chunks[-1][0] == 0          # last layers first
        assert sum(hi - lo for lo, hi in chunks) == 170
        assert all(a[0] == b[1] for a, b in zip(chunks, chunks[1:]))  # contiguous, descending


def test_tuner_grows_while_faster_then_keeps_the_best():
    tuner = ChunkTuner("auto", n_layers=4)
    times = {1: 10.0, 2: 8.0, 3: 9.0}
    seen = []
    for _ in range(40):
        seen.append(tuner.current)
        tuner.observe(times.get(tuner.current, 20.0))
    assert sorted(set(seen)) == [1, 2, 3]
    assert tuner.done and tuner.current == 2
    fixed = ChunkTuner(3, n_layers=4)
    assert fixed.current == 3 and fixed.observe(1.0) == 3


def test_master_sums_in_rank_order_whatever_the_arrival_order():
    groups = [(0, 3), (3, 5)]
    x0 = np.zeros(5, np.float32)
    parts = {r: np.random.default_rng(r).standard_normal(5).astype(np.float32) * 1e3 for r in range(3)}
    results = []
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        m = ChunkMaster(x0, 3, groups, 2)
        for r in order:
            m.add(0, r, 0, 5, parts[r], lr=1.0, loss_w=1.0)
        results.append(m.result()[0])
    assert all(np.array_equal(results[0], r) for r in results[1:])


def test_master_stop_flag_on_first_chunk_leaves_weights_unchanged():
    m = ChunkMaster(np.ones(5, np.float32), 1, [(0, 3), (3, 5)], 1)
    m.add(0, 0, 3, 5, np.ones(2, np.float32), lr=1.0, stop=True)
    m.add(0, 0, 0, 3, np.ones(3, np.float32), lr=1.0)
    x, _, stop, _, _ = m.result()
    assert stop and np.array_equal(x, np.ones(5))


def test_rebalance_moves_work_to_the_faster_worker():
    shares = [0.5, 0.5]
    for _ in range(20):
        shares = rebalance(shares, [3.0 * shares[0] / shares[0], 1.0])
    assert shares[0] == pytest.approx(0.75, abs=1e-3)
    assert sum(shares) == pytest.approx(1.0)


@pytest.mark.cluster
def test_cgdp_on_dask_follows_sgd_and_learns_digits(client):
    cfg = RunConfig(algorithm="cgdp", cpus=2, steps=20, **BASE)
    ref = train_reference(cfg.replace(algorithm="sgd"))
    got = run(cfg, cluster=client)
    assert got.status == "completed"
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-5)
    full = run(cfg.replace(steps=None, epochs=8, hidden=None), cluster=client)
    assert full.summary["final_test_accuracy"] >= 0.90
    assert full.summary["chunk_layers_used"] >= 1


@pytest.mark.cluster
def test_speed_split_reports_shares_and_idle_time(client):
    got = run(RunConfig(algorithm="sync_sgd", cpus=2, steps=40, split="speed", **BASE), cluster=client)
    per_worker = got.summary["per_worker"]
    assert len(per_worker) == 2
    assert sum(w["share"] for w in per_worker) == pytest.approx(1.0)
    assert all(0.0 <= w["idle_fraction"] <= 1.0 for w in per_worker)
    assert len(got.summary["final_shares"]) == 2
