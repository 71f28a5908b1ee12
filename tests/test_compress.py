"""Compressed gradients with error feedback: the compressors (maths/compress.py) and
sync_sgd's compressed exchange (algorithms/compressed.py) against exact sync_sgd."""
import numpy as np
import pytest

import workbench as wb
from workbench.config import ConfigError, RunConfig
from workbench.execution.engine import run_threads
from workbench.maths import compress as C


def vector(n=1000, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


# ------------------------------------------------------------------------------ the compressors
def test_topk_keeps_the_largest_and_counts_index_value_pairs():
    p = vector()
    sent, nbytes = C.topk(p, 0.05)
    kept = np.flatnonzero(sent)
    assert len(kept) == 50 and nbytes == 50 * 8
    assert np.abs(p[kept]).min() >= np.abs(np.delete(p, kept)).max()
    np.testing.assert_array_equal(sent[kept], p[kept])


def test_randomk_draws_the_same_positions_on_every_worker():
    a, _ = C.randomk(vector(seed=1), 0.1, seed=3, step=7)
    b, nbytes = C.randomk(vector(seed=2), 0.1, seed=3, step=7)
    assert (np.flatnonzero(a) == np.flatnonzero(b)).all() and nbytes == 100 * 4
    c, _ = C.randomk(vector(seed=1), 0.1, seed=3, step=8)
    assert not (np.flatnonzero(a) == np.flatnonzero(c)).all()


def test_sign_sends_the_mean_magnitude_and_one_bit_per_entry():
    p = vector()
    sent, nbytes = C.sign(p)
    np.testing.assert_allclose(np.abs(sent), np.abs(p).mean(), rtol=1e-6)
    assert (np.sign(sent) == np.where(p >= 0, 1, -1)).all() and nbytes == 125 + 4


def test_qsgd_is_unbiased():
    """E[q(p)] = p. With s levels each entry is ||p|| / s times a Bernoulli around its
    scaled value, so its standard deviation is at most ||p|| / (2 s); the mean of N
    draws is within 5 of those over sqrt(N) for every entry (a false alarm has odds
    ~1000 x 6e-7 for the 1000 entries, and the seeds are fixed)."""
    p = vector()
    levels, draws = 4, 4000
    rng = np.random.default_rng(0)
    mean = np.zeros(p.size)
    for _ in range(draws):
        sent, nbytes = C.qsgd(p, levels, rng)
        mean += sent
    mean /= draws
    bound = 5 * np.linalg.norm(p) / (2 * levels) / np.sqrt(draws)
    assert np.abs(mean - p).max() < bound
    assert nbytes == 4 + int(np.ceil(1000 * (1 + 3) / 8))          # norm + sign and 3 bits for 0..4
    # and a single draw really is quantised: levels of ||p|| / s only
    q, _ = C.qsgd(p, levels, rng)
    steps = np.abs(q) / (np.linalg.norm(p) / levels)
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-4)


@pytest.mark.parametrize("kind", ["topk", "randomk", "sign", "qsgd"])
def test_error_feedback_memory_identity(kind):
    """sent + new memory = gradient + old memory, step after step: nothing is lost, only delayed."""
    memory = np.zeros(1000, np.float32)
    rng = np.random.default_rng(5)
    for step in range(5):
        g = vector(seed=10 + step)
        old = memory.copy()
        sent, _ = C.with_error_feedback(kind, g, memory, ratio=0.02, levels=4, seed=0, step=step, rng=rng)
        np.testing.assert_allclose(sent + memory, g + old, rtol=0, atol=1e-5)
    assert np.abs(memory).max() > 0                                     # something was held back


def test_dgc_masks_the_sent_entries_of_velocity_and_memory():
    u, v = np.zeros(1000, np.float32), np.zeros(1000, np.float32)
    g = vector()
    sent, _ = C.dgc_step(g, u, v, 0.9, 0.01)
    mask = sent != 0
    assert mask.sum() == 10 and (u[mask] == 0).all() and (v[mask] == 0).all()
    np.testing.assert_array_equal(u[~mask], g[~mask])                  # the rest carries on
    np.testing.assert_array_equal(sent[mask] + v[mask], g[mask])


def test_powersgd_bytes_and_matrix_views():
    assert C.matrix_shape((8, 4, 3, 3)) == (8, 36)
    # the MLP 64-32-10: W1 (64, 32) -> (32, 64), b1, W2 (32, 10) -> (10, 32), b2
    first, second = C.powersgd_bytes([(64, 32), (32,), (32, 10), (10,)], 2)
    assert first == 4 * (32 * 2 + 32 + 10 * 2 + 10) and second == 4 * (64 * 2 + 32 * 2)


# ------------------------------------------------------------------------------ sync_sgd's exchange
@pytest.mark.parametrize("kw", [
    dict(compression="topk", compression_ratio=1.0, momentum=0.0),    # k = n: everything, every step
    dict(compression="randomk", compression_ratio=1.0, momentum=0.9),
    dict(compression="powersgd", compression_rank=64, momentum=0.9),  # rank >= every layer's smaller side
    dict(compression="powersgd", compression_rank=64, momentum=0.0, error_feedback=False),
])
def test_lossless_settings_are_exact_sync_sgd(kw, tiny):
    """Float tolerance: PowerSGD's P P^T = I holds to float32 rounding (QR in float64,
    products in float32): 1e-6 over 20 steps on parameters of O(0.1)."""
    got = run_threads(tiny(algorithm="sync_sgd", cpus=3, steps=20, **kw))
    sync = run_threads(tiny(algorithm="sync_sgd", cpus=3, steps=20, momentum=kw["momentum"]))
    assert got.status == "completed"
    np.testing.assert_allclose(got.params, sync.params, rtol=0, atol=1e-6)


def test_topk_one_percent_with_error_feedback_learns_and_without_it_lags(tiny):
    kw = dict(cpus=2, epochs=4, compression="topk", compression_ratio=0.01)
    ef = run_threads(tiny(algorithm="sync_sgd", **kw))
    no_ef = run_threads(tiny(algorithm="sync_sgd", **kw, error_feedback=False))
    sync = run_threads(tiny(algorithm="sync_sgd", cpus=2, epochs=4))
    acc = {k: r.summary["final_test_accuracy"] for k, r in (("ef", ef), ("no_ef", no_ef), ("sync", sync))}
    assert acc["ef"] > acc["no_ef"] + 0.03 and acc["ef"] > acc["sync"] - 0.05, acc
    # bytes: 1% of the entries as (index, value) pairs, against the whole buffer
    assert ef.steps.bytes_sent.mean() < sync.steps.bytes_sent.mean() / 10


def test_simulated_gain_appears_on_a_slow_network_and_vanishes_on_a_fast_one(tiny):
    """8 virtual V100s, timing_model resnet50 (25M parameters): on 10GbE the dense allreduce dominates the
    step, top-k 1% (an allgather of 2% of the bytes per worker) does not; on NVLink both
    exchanges are small beside the compute."""
    def makespan(network, **kw):
        cfg = tiny(algorithm="sync_sgd", cpus=0, gpus=8, simulate=True, network=network, timing_model="resnet50", steps=6, batch_size=256,
                     **kw)
        return wb.run(cfg).summary["wall_time_s"]
    slow = makespan("10GbE") / makespan("10GbE", compression="topk", compression_ratio=0.01)
    fast = makespan("NVLink") / makespan("NVLink", compression="topk", compression_ratio=0.01)
    assert slow > 2 and fast < 1.3, (slow, fast)


def test_compression_is_a_sync_sgd_knob_and_dgc_refuses_nesterov(tiny):
    with pytest.raises(ConfigError, match="compression: none unless algorithm is sync_sgd"):
        RunConfig(algorithm="sync_easgd", compression="topk")
    with pytest.raises(ConfigError, match="nesterov"):
        tiny(algorithm="sync_sgd", compression="topk", nesterov=True)
    tiny(algorithm="sync_sgd", compression="topk", nesterov=True, error_feedback=False)  # no momentum correction: allowed


@pytest.mark.parametrize("kind", ["topk", "randomk", "sign", "qsgd", "powersgd"])
def test_recorded_bytes_are_the_cost_models(kind, tiny):
    """One definition: what a step records as sent is the cost model's beta term for the
    same exchange, plus the packed tail (loss, stop, timings) riding along."""
    from workbench.analysis.costmodel import compressed_terms
    from workbench.comm.base import ring_allgather_bytes, ring_allreduce_bytes
    from workbench.problem import Problem
    cfg = tiny(algorithm="sync_sgd", cpus=3, steps=3, compression=kind, compression_ratio=0.05, compression_rank=2)
    got = run_threads(cfg)
    model = Problem.from_config(cfg).model
    shapes = [tuple(layer.shape) for layer in model.layers]
    _, beta_bytes = compressed_terms(3, 4 * model.n_params, kind, compression_ratio=0.05, compression_rank=2,
                                     compression_levels=16, layer_shapes=shapes)
    tail = 4 * (2 + 2 * 3)
    extra = ring_allgather_bytes(3, tail) if kind in ("topk", "sign", "qsgd") else ring_allreduce_bytes(3, tail)
    np.testing.assert_allclose(got.steps.bytes_sent.to_numpy(), beta_bytes + extra)


@pytest.mark.cluster
def test_compressed_sync_sgd_on_dask_is_exact_at_full_ratio(client, tiny):
    """Top-k at ratio 1 (8n bytes: more than a shared-memory slot holds) is carried as the
    dense allreduce, and counted as one; at 5% the payloads are allgathered through the
    slots, bitwise the thread transport's rank-order decoding (1e-6: as the line above)."""
    from workbench.comm.base import ring_allreduce_bytes
    from workbench.execution.engine import run
    from workbench.problem import Problem
    cfg = tiny(algorithm="sync_sgd", cpus=2, steps=12, momentum=0.0, compression="topk", compression_ratio=1.0)
    got = run(cfg, client)
    sync = run_threads(tiny(algorithm="sync_sgd", cpus=2, steps=12, momentum=0.0))
    assert got.status == "completed" and got.summary["comm"] == "shm"
    np.testing.assert_allclose(got.params, sync.params, rtol=0, atol=1e-6)
    n = Problem.from_config(cfg).model.n_params
    assert (got.steps.bytes_sent == ring_allreduce_bytes(2, 4 * (n + 2 + 2 * 2))).all()
    sparse = cfg.replace(compression_ratio=0.05)
    got, ref = run(sparse, client), run_threads(sparse)
    assert got.status == "completed" and got.summary["comm"] == "shm"
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(got.steps.bytes_sent.to_numpy(), ref.steps.bytes_sent.to_numpy())
