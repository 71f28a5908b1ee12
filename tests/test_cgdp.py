"""cgdp (CPU-GPU data parallel) and heterogeneous splitting: the same trajectory as SGD."""
import numpy as np
import pytest

from workbench.algorithms.sync import rebalance
from workbench.comm.roles import ChunkMaster, ChunkTuner, chunk_bounds
from workbench.execution.engine import run, run_threads


@pytest.mark.parametrize("workers, chunk_layers, weight_return",
                         [(1, 1, "chunks"), (2, 1, "chunks"), (2, 2, "chunks"), (3, 3, "chunks"), (2, "auto", "chunks"),
                          (2, 1, "whole"), (3, "auto", "whole")])
def test_cgdp_on_threads_follows_single_process_sgd(workers, chunk_layers, weight_return, tiny):
    cfg = tiny(algorithm="cgdp", cpus=workers, steps=25, chunk_layers=chunk_layers, weight_return=weight_return)
    ref = run_threads(cfg.replace(algorithm="sgd", weight_return="chunks"))
    got = run_threads(cfg)
    assert got.status == "completed", got.summary.get("errors")
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got.steps[got.steps.worker == 0]["loss"], ref.steps["loss"], rtol=1e-5)


@pytest.mark.parametrize("chunk_layers, weight_return", [(1, "chunks"), (3, "chunks"), (1, "whole")])
def test_cgdp_on_threads_is_the_sgd_trajectory_whatever_the_timing(monkeypatch, chunk_layers, weight_return, tiny):
    # Arrival order at the master must not matter (it sums in rank order, a fast worker's
    # next step is kept apart, the chunks come back into the buffer of the step's parity):
    # shake it with random delays around every push and fetch.
    import random
    import time

    from workbench.comm.threads import ThreadChunkMaster
    rng = random.Random(7)
    bind = ThreadChunkMaster.bind

    def late(self, name):
        fn = bind(self, name)
        if name not in ("push", "fetch"):
            return fn

        def call(*args, **kwargs):
            time.sleep(rng.random() * 0.003)
            return fn(*args, **kwargs)
        return call
    monkeypatch.setattr(ThreadChunkMaster, "bind", late)
    cfg = tiny(algorithm="cgdp", cpus=3, steps=12, chunk_layers=chunk_layers, weight_return=weight_return)
    ref = run_threads(cfg.replace(algorithm="sgd", weight_return="chunks"))
    got = run_threads(cfg)
    assert got.status == "completed", got.summary.get("errors")
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-5)


def test_cgdp_with_momentum_and_speed_shares_follows_sgd(tiny):
    cfg = tiny(algorithm="cgdp", cpus=2, steps=25, momentum=0.9, nesterov=True, weight_decay=1e-4, split="speed")
    ref = run_threads(cfg.replace(algorithm="sgd", weight_return="chunks"))
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


def test_master_stop_flag_comes_back_with_the_step_it_completes():
    # A stop completes the step it is decided at (as every synchronous step's: base.settle):
    # the update applies, x - lr g, and the outcome carries the flag that ends the loops.
    m = ChunkMaster(np.ones(5, np.float32), 1, [(0, 3), (3, 5)], 1)
    m.add(0, 0, 3, 5, np.full(2, 0.25, np.float32), lr=1.0, stop=True)
    m.add(0, 0, 0, 3, np.full(3, 0.25, np.float32), lr=1.0)
    x, _, stop, _, _ = m.result()
    assert stop and np.array_equal(x, np.full(5, 0.75, np.float32))


def test_rebalance_moves_work_until_every_worker_takes_the_same_time():
    speeds, batch = [300.0, 100.0], 64          # samples/s: worker 0 is three times faster
    shares = start = [0.5, 0.5]
    times = [s * batch / v for s, v in zip(shares, speeds)]
    assert times[1] == pytest.approx(3 * times[0])   # an equal split: worker 0 waits 2/3 of the step
    for _ in range(30):
        shares = rebalance(shares, speeds)
    times = [s * batch / v for s, v in zip(shares, speeds)]
    assert times[0] == pytest.approx(times[1], rel=1e-3)
    assert shares[0] == pytest.approx(0.75, abs=1e-3)
    assert start == [0.5, 0.5]                                   # the input list is left alone
    # only the ratios of the shares matter, not their sum
    assert rebalance([3, 3], speeds, 0.5) == pytest.approx(rebalance([0.5, 0.5], speeds, 0.5))


@pytest.mark.cluster
def test_cgdp_on_dask_follows_sgd_and_learns_digits(client, tiny):
    cfg = tiny(algorithm="cgdp", cpus=2, steps=20)
    ref = run_threads(cfg.replace(algorithm="sgd", weight_return="chunks"))
    got = run(cfg, cluster=client)
    assert got.status == "completed"
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-5)
    full = run(cfg.replace(steps=None, epochs=8, hidden=None), cluster=client)
    assert full.summary["final_test_accuracy"] >= 0.90
    assert full.summary["chunk_layers_used"] >= 1


@pytest.mark.cluster
def test_speed_split_reports_shares_and_idle_time(client, tiny):
    cfg = tiny(algorithm="sync_sgd", cpus=2, steps=40, split="speed")
    got = run(cfg, cluster=client)
    per_worker = got.summary["per_worker"]
    assert len(per_worker) == 2
    # whatever the shares do, every step's slices cover the global batch exactly once
    per_step = got.steps.groupby("step")["samples"].sum()
    assert len(per_step) == 40 and (per_step == cfg.batch_size).all()
    assert all(0.0 <= w["idle_fraction"] <= 1.0 for w in per_worker)
    assert len(got.summary["final_shares"]) == 2


# ------------------------------------------------------------------ the master in shared memory
def _shm_master_worker(segment, lock, rank, size, groups, chunk_layers, n, steps, stop_at, out_q,
                       weight_return="whole"):
    """One worker process: pushes its chunks last-first with random pauses, fetches each step."""
    import random
    import time

    from workbench.comm.roles import chunk_bounds
    from workbench.comm.shm import ShmChunkMaster
    master = ShmChunkMaster(segment, lock, rank, size, groups, chunk_layers, n, momentum=0.9, nesterov=True,
                            weight_decay=1e-3, weight_return=weight_return)
    rng = random.Random(rank)
    chunking, seen = master.core.tuner.current, []
    for step in range(steps):
        g = _grad(rank, step, n)
        chunks = chunk_bounds(groups, chunking)
        for k, (lo, hi) in enumerate(chunks):
            time.sleep(rng.random() * 2e-3)              # arrival orders differ from step to step
            last = k == len(chunks) - 1
            grad = g[lo:hi]
            if rank % 2:                                   # odd ranks write straight into their row
                master.slot(rank, lo, hi)[:] = grad
                grad = None
            master.push(step, rank, lo, hi, grad, 0.05, 0.25 * (rank + 1) if last else 0.0,
                        rank == 0 and step == stop_at and k == 0, 0.001 * (rank + 1) if last else None)
        x, loss, stop, chunking, times = master.fetch(step, rank)
        seen.append((x.copy(), loss, stop, chunking, times))
        del x                                              # a view of the segment (chunks): gone before close
    out_q.put((rank, seen, master.history()))
    master.close()


def _grad(rank, step, n):
    return np.random.default_rng(100 * step + rank).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("size, chunk_layers, weight_return",
                         [(2, 1, "whole"), (3, 2, "chunks"), (3, "auto", "whole"), (2, 1, "chunks")])
def test_shm_master_across_processes_equals_the_master_oracle(tmp_path, size, chunk_layers, weight_return):
    import multiprocessing as mp
    import uuid

    from workbench.comm.shm import create_master_segment, unlink_segment
    groups, n, steps, stop_at = [(0, 40), (40, 48), (48, 90), (90, 95)], 95, 14, 11
    x0 = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    seg = create_master_segment(f"wbt{uuid.uuid4().hex[:10]}", x0, size, len(groups), True,
                                weight_return == "chunks")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    (tmp_path / "m.lock").touch()   # made by the run's creator; the workers open it
    procs = [ctx.Process(target=_shm_master_worker, args=(seg, str(tmp_path / "m.lock"), r, size, groups,
                                                          chunk_layers, n, steps, stop_at, q, weight_return))
             for r in range(size)]
    try:
        for p in procs:
            p.start()
        got = dict((r, (seen, hist)) for r, seen, hist in (q.get(timeout=120) for _ in procs))
    finally:
        for p in procs:
            p.join(10)
        unlink_segment(seg)
    # the oracle: the front-end-free ChunkMaster fed the same chunks, in rank order
    oracle = ChunkMaster(x0, size, groups, chunk_layers, momentum=0.9, nesterov=True, weight_decay=1e-3)
    chunking = oracle.tuner.current
    for step in range(steps):
        oracle.tuner.current = chunking                   # the shm workers' own tuners chose this
        chunks = chunk_bounds(groups, chunking)
        for r in range(size):
            g = _grad(r, step, n)
            for k, (lo, hi) in enumerate(chunks):
                last = k == len(chunks) - 1
                oracle.add(step, r, lo, hi, g[lo:hi], 0.05, 0.25 * (r + 1) if last else 0.0,
                           r == 0 and step == stop_at and k == 0, 0.001 * (r + 1) if last else None)
        x, loss, stop, _, times = oracle.result()
        for r in range(size):
            gx, gloss, gstop, gchunking, gtimes = got[r][0][step]
            assert np.array_equal(gx, x), (step, r)       # bitwise: same sums, same order, same update
            assert gloss == pytest.approx(loss, rel=1e-12) and gstop == stop and gtimes == times
            assert gchunking == got[0][0][step][3]         # every worker agrees on the next chunking
        chunking = got[0][0][step][3]
    assert got[0][0][stop_at][2] and not np.array_equal(got[0][0][stop_at][0], got[0][0][stop_at - 1][0])   # it applied
    assert all(got[r][1] == got[0][1] for r in range(size))
    if chunk_layers == "auto":
        assert len(set(got[0][1])) > 1                    # the tuner really tried several sizes


@pytest.mark.cluster
def test_cgdp_master_in_shared_memory_equals_the_actor_master(client, tiny):
    cfg = tiny(algorithm="cgdp", cpus=2, steps=30, momentum=0.9, weight_decay=1e-4, chunk_layers="auto")
    ref = run_threads(cfg.replace(algorithm="sgd", weight_return="chunks"))
    shm = run(cfg, cluster=client)
    actor = run(cfg.replace(comm="dask"), cluster=client)
    assert shm.status == actor.status == "completed", shm.summary.get("errors")
    assert (shm.summary["server"], actor.summary["server"]) == ("shm", "actor")
    np.testing.assert_allclose(shm.params, ref.params, rtol=0, atol=1e-5)
    assert np.array_equal(shm.params, actor.params)
    whole = run(cfg.replace(comm="dask", weight_return="whole"), cluster=client)   # the same maths, returned whole
    assert whole.status == "completed" and np.array_equal(whole.params, actor.params)
    np.testing.assert_allclose(shm.steps[shm.steps.worker == 0]["loss"], ref.steps["loss"], rtol=1e-5)
    assert shm.summary["chunk_layers_used"] >= 1


# ------------------------------------------------------------------ the per-chunk weight return
GROUPS = [(0, 40), (40, 48), (48, 90), (90, 95)]


def _two_worker_grads(step, n=95):
    return [np.random.default_rng(10 * step + r).standard_normal(n).astype(np.float32) for r in range(2)]


def test_thread_master_returns_each_chunk_as_soon_as_it_is_updated():
    from workbench.comm.threads import ThreadChunkMaster
    x0 = np.random.default_rng(3).standard_normal(95).astype(np.float32)
    master = ThreadChunkMaster(ChunkMaster(x0, 2, GROUPS, 1, momentum=0.9, weight_return="chunks"))
    oracle = ChunkMaster(x0, 2, GROUPS, 1, momentum=0.9)
    chunks = chunk_bounds(GROUPS, 1)                 # last layers first
    for step in range(2):
        g = _two_worker_grads(step)
        before = [master.boxes[r][(step + 1) % 2].copy() for r in range(2)]   # the buffer in use now
        for k, (lo, hi) in enumerate(chunks):
            for r in range(2):
                master.push(step, r, lo, hi, g[r][lo:hi] * 0.5, 0.1, 0.5 if lo == 0 else 0.0, False,
                            0.001 if lo == 0 else None)
                oracle.add(step, r, lo, hi, g[r][lo:hi] * 0.5, 0.1, 0.5 if lo == 0 else 0.0, False,
                           0.001 if lo == 0 else None)
            # the chunk just completed is back in both workers' next-step buffers, before the step is done
            for r in range(2):
                assert np.array_equal(master.boxes[r][step % 2][lo:hi], oracle.x[lo:hi]), (step, k, r)
                assert np.array_equal(master.boxes[r][(step + 1) % 2], before[r], equal_nan=True)   # never the one
                # in use (np.empty's bytes before step 0: NaN patterns among them)
            assert master.core.completed == (step if k == len(chunks) - 1 else step - 1)
        for r in range(2):
            x, loss, stop, chunking, times = master.fetch(step, r)
            assert x is master.boxes[r][step % 2] and np.array_equal(x, oracle.x)
            assert (loss, stop, chunking, times) == oracle.outcome()


def test_actor_master_answers_a_chunk_once_it_is_updated_and_not_before():
    import asyncio

    from workbench.comm.dask import ServerActor
    x0 = np.random.default_rng(4).standard_normal(95).astype(np.float32)
    options = {"groups": GROUPS, "chunk_layers": 1, "weight_return": "chunks"}
    actor = ServerActor("cgdp_master", options, x0, 2)
    oracle = ChunkMaster(x0, 2, GROUPS, 1)
    (lo, hi), *rest = chunk_bounds(GROUPS, 1)
    g = _two_worker_grads(0)

    async def go():
        asked = asyncio.ensure_future(actor.serve("chunk", 0, lo, hi))      # asked for before it is updated
        await actor.serve("push", 0, 0, lo, hi, g[0][lo:hi], 0.1)
        await asyncio.sleep(0)
        assert not asked.done()                                             # one part in: not yet
        await actor.serve("push", 0, 1, lo, hi, g[1][lo:hi], 0.1)
        got = await asyncio.wait_for(asked, 5)
        assert actor.core.completed == -1                                   # the step is far from done
        return got
    got = asyncio.run(go())
    for r in range(2):
        oracle.add(0, r, lo, hi, g[r][lo:hi], 0.1)
    assert np.array_equal(got, oracle.x[lo:hi])


def test_the_chunk_masters_table_names_its_methods_and_the_arrays_that_travel():
    from workbench.comm.base import serve_now
    from workbench.comm.roles import make_core, role_core
    core = make_core("cgdp_master", {"groups": [(0, 3), (3, 5)], "chunk_layers": 1}, np.zeros(5, np.float32), 1)
    assert isinstance(core, role_core("cgdp_master")) and core.weight_return == "whole"
    ops = type(core).OPS
    calls = [("push", (0, 0, 3, 5, np.ones(2, np.float32), 0.1)), ("chunk", (0, 3, 5)),
             ("push", (0, 0, 0, 3, np.ones(3, np.float32), 0.1, 0.5, False, 0.01)), ("fetch", (0,)),
             ("outcome", (0,)), ("history", ()), ("snapshot", ()), ("restore", (core.snapshot(),))]
    assert {name for name, _ in calls} == set(ops)
    for name, args in calls:
        op = ops[name]
        if op.ready is not None:
            assert op.ready(core, *args), name
        out_sizes = op.sizes_out(core, *args)
        got = serve_now(core, op, args)
        assert list(op.sizes_in(*args)) == [len(a) for a in args if isinstance(a, np.ndarray)], name
        answered = [len(a) for a in (got if isinstance(got, tuple) else (got,)) if isinstance(a, np.ndarray)]
        assert list(out_sizes) == answered, name
    assert not ops["chunk"].ready(core, 1, 3, 5) and not ops["fetch"].ready(core, 1)   # next step: not yet
    with pytest.raises(ValueError, match="weight_return"):
        ChunkMaster(np.zeros(5, np.float32), 1, [(0, 5)], 1, weight_return="halves")


class _FakeClock:
    """A clock that moves only when slept on (or told to): the emulator's charges, exactly."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        assert s >= 0
        self.t += s


@pytest.mark.parametrize("weight_return", ["chunks", "whole"])
def test_emulator_charges_what_moves_each_chunk_from_its_push(weight_return):
    # The network emulator around cgdp's master: with chunks, each chunk's fresh weights
    # leave on this worker's downlink at its push and travel during the backward pass (in
    # order, each after the one before), and the fetch's reply is the outcome alone, behind
    # them; with whole, the fetch's reply is the whole vector. Checked against the closed
    # form below (a plain loop over the same messages) and, for one case, by hand.
    from workbench.comm.base import Emulated
    from workbench.comm.threads import ThreadChunkMaster
    n, lat, bps = 95, 1e-3, 1e5                          # 1 ms a message, 100 kB/s: a float32 costs 40 us
    x0 = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    master = ThreadChunkMaster(ChunkMaster(x0, 1, GROUPS, 1, weight_return=weight_return))
    clock = _FakeClock()
    emu = Emulated(master, latency_ms=lat * 1e3, bandwidth_gbps=bps * 8 / 1e9, clock=clock, sleep=clock.sleep)
    assert emu.chunked == (weight_return == "chunks")
    downlink = []
    if emu.chunked:
        book = emu.downlink
        emu.downlink = lambda nbytes: (downlink.append(nbytes), book(nbytes))
    chunks = chunk_bounds(GROUPS, 1)                     # (90,95), (48,90), (40,48), (0,40): last layers first
    compute = [0.010, 0.0, 0.0005, 0.0]                  # backward work after each push (none after the last)

    # the closed form: every message costs lat + bytes / bps; the downlink is a FIFO
    t, landing = 0.0, -np.inf
    for (lo, hi), c in zip(chunks, compute):
        t += lat + 4 * (hi - lo) / bps                   # the gradient chunk, up
        if weight_return == "chunks":
            landing = max(t, landing) + lat + 4 * (hi - lo) / bps   # its fresh weights, down
        t += c
    fetch_at = t
    t += lat                                             # the fetch's request
    t = max(t, landing) + lat if weight_return == "chunks" else t + lat + 4 * n / bps
    want_fetch = t - fetch_at

    g = np.random.default_rng(6).standard_normal(n).astype(np.float32)
    for (lo, hi), c in zip(chunks, compute):
        emu.push(0, 0, lo, hi, g[lo:hi], 0.1, 0.5 if lo == 0 else 0.0, False, 0.001 if lo == 0 else None)
        clock.t += c
    assert clock.t == pytest.approx(fetch_at, rel=1e-12)  # pushes cost their requests only, with either setting
    x, *_ = emu.fetch(0, 0)
    assert clock.t - fetch_at == pytest.approx(want_fetch, rel=1e-12)
    if weight_return == "chunks":
        # each chunk's bytes once (n float32s in all), then the outcome (no array). By hand:
        # (48,90)'s weights land at 16.56 ms, so (40,48)'s, pushed at 15.20, wait for them and
        # land at 17.88; (0,40)'s, pushed at 18.30, land at 20.90; the fetch starts at 18.30,
        # its request arrives at 19.30 and the outcome lands at 21.90: 3.6 ms, where the whole
        # vector's reply costs 2 + 3.8 = 5.8 ms
        assert downlink == [4 * (hi - lo) for lo, hi in chunks] + [0] and sum(downlink) == 4 * n
        assert want_fetch == pytest.approx(3.6e-3, rel=1e-9)
    else:
        assert want_fetch == pytest.approx(2 * lat + 4 * n / bps, rel=1e-12)   # 2 ms + 3.8 ms
    np.testing.assert_array_equal(x, master.core.x)      # and the weights are the master's, either way


@pytest.mark.parametrize("weight_return", ["chunks", "whole"])
def test_cgdp_behind_the_network_emulator_keeps_the_sgd_trajectory(weight_return, tiny):
    # the chunk-aware charge only delays: the maths is the same as without the emulator
    cfg = tiny(algorithm="cgdp", cpus=2, steps=8, chunk_layers=1, weight_return=weight_return,
               latency_ms=0.2, bandwidth_gbps=10.0)
    ref = run_threads(cfg.replace(algorithm="sgd", weight_return="chunks", latency_ms=0.0, bandwidth_gbps=0.0))
    got = run_threads(cfg)
    assert got.status == "completed", got.summary.get("errors")
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-5)


def test_emulator_charges_a_gradient_written_into_shared_memory_at_its_push():
    # shared memory's front-end: the worker writes its gradient into a slot (a view, free) and
    # the push carries None; the push is still charged the chunk's bytes, once, one way
    from workbench.comm.base import Emulated

    class Slotted:
        chunked = True

        def __init__(self):
            self.row, self.pushed = np.zeros(95, np.float32), []

        def slot(self, rank, lo, hi):
            return self.row[lo:hi]

        def push(self, step, rank, lo, hi, grad, *rest):
            self.pushed.append((lo, hi, grad))
    clock = _FakeClock()
    emu = Emulated(Slotted(), latency_ms=1.0, bandwidth_gbps=8e-4, clock=clock, sleep=clock.sleep)   # 1e5 B/s
    view = emu.slot(0, 48, 90)
    assert view.base is emu.inner.row and clock.t == 0.0
    emu.push(0, 0, 48, 90, None, 0.1)
    up = 1e-3 + 4 * 42 / 1e5                                 # one message of 42 float32s
    assert emu.inner.pushed == [(48, 90, None)] and clock.t == pytest.approx(up, rel=1e-12)
    assert emu.landing == pytest.approx(2 * up, rel=1e-12)  # and its fresh weights, on their way back
