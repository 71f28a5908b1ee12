"""dpsgd (decentralised gossip): its graphs and mixing matrices, against synchronous
averaging on the complete graph and a plain NumPy loop of W x on the others, through the
one peer exchange of the communication interface on threads, Dask and the simulator."""
import numpy as np
import pytest

from workbench.algorithms.gossip import TOPOLOGIES, mixing_matrix, neighbours
from workbench.comm.base import neighbour_exchange
from workbench.comm.threads import ThreadGroup
from workbench.config import RunConfig
from workbench.data import global_batch, split_batch
from workbench.execution.engine import run_threads
from workbench.maths.optim import SGD, make_plan
from workbench.problem import Problem

BASE = dict(dataset="digits", model="mlp", hidden=[32], batch_size=64, seed=1, lr=0.1)
ATOL = 2e-5     # float32 sums in another order, over ~20 steps (as tests/test_local.py)


def config(algorithm="dpsgd", **kw) -> RunConfig:
    return RunConfig(algorithm=algorithm, **{**BASE, **kw})


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("size", [2, 3, 4, 6, 8, 12, 16])
def test_mixing_matrices_are_symmetric_doubly_stochastic_over_the_graph(topology, size):
    W = mixing_matrix(topology, size)
    np.testing.assert_allclose(W, W.T, atol=1e-15)
    np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-12)
    assert (W >= 0).all()
    for i in range(size):    # nonzero exactly on the graph's edges and the diagonal
        assert set(np.flatnonzero(W[i])) == {i, *neighbours(topology, size, i)}
    # connected: gossip converges to the average (second-largest |eigenvalue| < 1)
    assert sorted(np.abs(np.linalg.eigvalsh(W)))[-2] < 1 - 1e-9


def test_neighbour_exchange_on_threads_hands_each_worker_its_peers_vectors():
    import threading
    group, got = ThreadGroup(4), {}

    def work(rank):
        comm = group.comm(rank)
        got[rank] = neighbour_exchange(comm, np.full(3, float(rank), np.float32), neighbours("ring", 4, rank))
    threads = [threading.Thread(target=work, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert {r: sorted(v) for r, v in got.items()} == {0: [1, 3], 1: [0, 2], 2: [1, 3], 3: [0, 2]}
    assert all((vec == j).all() for r in got for j, vec in got[r].items())


def gossip_reference(cfg: RunConfig, workers: int) -> np.ndarray:
    """Plain NumPy D-PSGD (adapt then combine): each worker's SGD step on its slice, then
    X <- W X every tau steps; returns the workers' average."""
    problem = Problem.from_config(cfg)
    data, model = problem.data, problem.model
    plan = make_plan(cfg, data.n_train)
    slices = split_batch(plan.batch_size, [1.0] * workers)
    W = mixing_matrix(cfg.topology, workers)
    xs = [model.init(cfg.seed) for _ in range(workers)]
    opts = [SGD(model.n_params, np, np.float32, cfg.momentum) for _ in range(workers)]
    for t in range(plan.total_steps):
        idx = global_batch(data.n_train, plan.batch_size, cfg.seed, t)
        for i, (lo, hi) in enumerate(slices):
            _, g = model.loss_and_grad(xs[i], data.X_train[idx[lo:hi]], data.y_train[idx[lo:hi]])
            opts[i].step(xs[i], g, plan.schedule(t))
        if (t + 1) % cfg.tau == 0:
            X = np.stack(xs)
            xs = [(W[i] @ X).astype(np.float32) for i in range(workers)]
    return np.mean(np.stack(xs), axis=0)


@pytest.mark.parametrize("topology, tau", [("ring", 1), ("torus", 2), ("exponential", 1)])
def test_dpsgd_follows_the_reference_loop(topology, tau):
    cfg = config(cpus=4, steps=20, topology=topology, tau=tau, momentum=0.9)
    got = run_threads(cfg)
    assert got.status == "completed" and got.summary["topology"] == topology
    np.testing.assert_allclose(got.params, gossip_reference(cfg, 4), rtol=0, atol=ATOL)
    # the workers disagree: the consensus distance is positive, and recorded at every check
    assert got.summary["consensus_distance"] and got.summary["consensus_distance"][-1][1] > 0


def test_dpsgd_on_the_complete_graph_is_synchronous_averaging():
    kw = dict(cpus=4, steps=24, tau=4, momentum=0.9)
    got = run_threads(config(topology="complete", **kw))
    local = run_threads(config("local_sgd", **kw))
    np.testing.assert_allclose(got.params, local.params, rtol=0, atol=ATOL)
    # right after an exchange (the last step, 24 = 6 tau) the workers agree; the distance is
    # mean ||x_i||^2 - ||x_bar||^2 in float32, both ~30 here: zero to ~1e-5
    checks = dict(got.summary["consensus_distance"])
    assert checks[23] < 1e-4 and checks[21] > 1e-3        # step 21 (an eval): two local steps after an average


def test_bytes_sent_are_one_vector_per_neighbour_per_gossip():
    got = run_threads(config(cpus=4, steps=8, topology="ring"))
    n = got.params.size
    sent = got.steps[got.steps.worker == 0].bytes_sent.to_numpy()
    np.testing.assert_allclose(sent[:-1], 2 * 4 * n)      # the last step also carries the agreement allreduce
    assert sent[-1] > 2 * 4 * n


def test_on_a_high_latency_network_gossip_beats_allreduce_in_time():
    """16 virtual workers, 1 ms per message: a ring allreduce pays 2 (P-1) = 30 latencies a
    step, ring gossip 2 (plus the agreement allreduce every 32 steps)."""
    from workbench.analysis.costmodel import Network
    from workbench.sim.run import run_simulated
    slow = Network("wan", 1e-3, 1 / 1e9)
    kw = dict(cpus=16, simulate=True, steps=64, batch_size=256)
    dpsgd = run_simulated(config(**kw), link=slow)
    sync = run_simulated(config("sync_sgd", **kw), link=slow)
    assert dpsgd.status == sync.status == "completed"
    assert dpsgd.summary["wall_time_s"] < sync.summary["wall_time_s"] / 4


@pytest.mark.cluster
def test_dpsgd_on_dask_follows_the_reference_loop(client):
    from workbench.execution.engine import run
    cfg = config(cpus=2, steps=12, topology="ring", momentum=0.0)
    got = run(cfg, client)
    assert got.status == "completed" and got.summary["comm"] == "shm"
    np.testing.assert_allclose(got.params, gossip_reference(cfg, 2), rtol=0, atol=ATOL)


# ------------------------------------------------------------------------------ adpsgd (AD-PSGD)
def adpsgd_reference(cfg: RunConfig, workers: int, log: list[tuple[int, int, int]]) -> np.ndarray:
    """Plain NumPy AD-PSGD replaying the pairing sequence `log` ((rank, peer, step) in the
    order the averages happened): worker i's gradient at the model it last had, then
    x_i, x_j <- (x_i + x_j) / 2 and x_i -= u, u its SGD step (with momentum: its own
    velocity); returns every worker's model (P, n)."""
    problem = Problem.from_config(cfg)
    data, model = problem.data, problem.model
    plan = make_plan(cfg, data.n_train)
    slices = split_batch(plan.batch_size, [1.0] * workers)
    X = np.stack([model.init(cfg.seed)] * workers)
    seen = [X[i].copy() for i in range(workers)]      # x_hat_i
    opts = [SGD(model.n_params, np, np.float32, cfg.momentum) for _ in range(workers)]
    for rank, peer, t in log:
        idx = global_batch(data.n_train, plan.batch_size, cfg.seed, t)
        lo, hi = slices[rank]
        _, g = model.loss_and_grad(seen[rank], data.X_train[idx[lo:hi]], data.y_train[idx[lo:hi]])
        stepped = seen[rank].copy()
        opts[rank].step(stepped, g, plan.schedule(t))
        mid = 0.5 * (X[rank] + X[peer])
        X[rank], X[peer] = mid, mid
        X[rank] = X[rank] - (seen[rank] - stepped)
        seen[rank] = X[rank].copy()
    return X


def run_adpsgd(cfg: RunConfig, transport):
    from workbench.execution.engine import execute
    result = execute(cfg, transport)
    core = transport.server.core if hasattr(transport, "server") else transport.server_state.core
    return result, core


def check_pairings(cfg: RunConfig, workers: int, log: list[tuple[int, int, int]], steps: int) -> None:
    """Every worker averaged once per step, in step order, with the neighbours its own
    random stream names (so the reference replays the run's real sequence)."""
    from workbench.algorithms.gossip import pairing_rng
    for rank in range(workers):
        mine = [(peer, t) for r, peer, t in log if r == rank]
        assert [t for _, t in mine] == list(range(steps))
        peers, rng = neighbours(cfg.topology, workers, rank), pairing_rng(cfg.seed, rank)
        assert [p for p, _ in mine] == [peers[int(rng.integers(len(peers)))] for _ in range(steps)]


@pytest.mark.parametrize("topology", ["ring", "complete"])
def test_adpsgd_on_threads_follows_the_reference_loop_of_its_pairing_sequence(topology):
    from workbench.execution.transports.threads import ThreadTransport
    cfg = config("adpsgd", cpus=3, steps=15, topology=topology)
    got, core = run_adpsgd(cfg, ThreadTransport())
    assert got.status == "completed"
    check_pairings(cfg, 3, core.log, 15)
    # every row of the table, not only the mean: float32 in the same order, atol for the
    # worker's u = x_hat - (x_hat - lr g) rounding (one ulp of x per step)
    np.testing.assert_allclose(core.x, adpsgd_reference(cfg, 3, core.log), rtol=0, atol=ATOL)
    assert got.summary["consensus_distance"][-1][1] > 0     # workers that average pairwise disagree
    n = got.params.size
    np.testing.assert_allclose(got.steps.bytes_sent.to_numpy(), 2 * 4 * n)   # update in, row back


def test_adpsgd_on_the_simulator_follows_the_reference_loop_and_is_deterministic():
    from workbench.execution.transports.sim import SimTransport
    cfg = config("adpsgd", cpus=4, steps=12, topology="ring", simulate=True)
    got, core = run_adpsgd(cfg, SimTransport())
    again, core2 = run_adpsgd(cfg, SimTransport())
    assert got.status == again.status == "completed"
    check_pairings(cfg, 4, core.log, 12)
    assert core.log == core2.log and np.array_equal(core.x, core2.x)   # virtual time decides the order
    np.testing.assert_allclose(core.x, adpsgd_reference(cfg, 4, core.log), rtol=0, atol=ATOL)
    np.testing.assert_allclose(got.steps.bytes_sent.to_numpy(), 2 * 4 * got.params.size)
    # asynchronous on one virtual clock: the workers' averages interleave step by step
    assert {r for r, _, _ in core.log[:4]} == {0, 1, 2, 3}


def test_adpsgd_with_one_worker_is_plain_sgd():
    kw = dict(cpus=1, steps=20, momentum=0.9)
    got = run_threads(config("adpsgd", **kw))
    ref = run_threads(config("sgd", **kw))
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=ATOL)
    assert (got.steps.bytes_sent == 0).all()


@pytest.mark.cluster
def test_adpsgd_on_dask_runs_through_the_actor_table_and_learns(client):
    # The Dask path serves the pairwise table from an actor, so the pairing order (decided by
    # arrival) is not read back here; the replay oracle runs on threads and the simulator
    # above. This checks the real actor front-end: every step of both workers ran, each step
    # moved one update in and one row back, the workers disagree, and the mean model learnt.
    from workbench.execution.engine import run
    cfg = config("adpsgd", cpus=2, steps=40, topology="ring", eval_every=20)
    got = run(cfg, client)
    assert got.status == "completed", got.summary.get("errors")
    assert sorted(got.steps.groupby("worker").size().tolist()) == [40, 40]
    np.testing.assert_allclose(got.steps.bytes_sent.to_numpy(), 2 * 4 * got.params.size)
    assert got.summary["consensus_distance"][-1][1] > 0
    first, last = got.steps.sort_values("step").groupby("step").loss.mean().iloc[[0, -1]]
    assert last < 0.5 * first                                  # digits, lr 0.1, 40 steps: ~2.3 -> <1
