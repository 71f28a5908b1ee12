"""The algorithm registry (one declaration per algorithm) and what reads it; the server
roles' cores; the packed tail of synchronous steps."""
import dataclasses
import threading

import numpy as np
import pytest

import workbench as wb
from workbench.algorithms.base import StepOut, SyncTail, settle, tail_length
from workbench.comm.roles import ChunkMaster, ParameterServer, chunk_bounds, server_state
from workbench.config import FIELDS, RunConfig
from workbench.config.registry import SERVER_ROLES, AlgorithmSpec, Needs, specs, with_knob


def test_every_declaration_is_complete_and_its_knobs_are_config_fields():
    for name, spec in specs().items():
        assert spec.name == name and spec.summary and "\n" not in spec.summary
        assert set(spec.knobs) <= set(FIELDS), name
        assert spec.needs.server is None or spec.needs.server in SERVER_ROLES
        if spec.cls is not None:
            assert spec.cls.spec is spec                    # the worker class reads its declaration
    assert list(wb.ALGORITHMS) == list(specs())
    assert wb.ALGORITHMS["ltfb"] == specs()["ltfb"].summary


def test_readers_follow_the_registry(monkeypatch):
    from workbench.analysis import costmodel
    from workbench.config import SYNC_ALGORITHMS, registry
    # the cost model prices an algorithm by its declaration's pattern, not by a list of its own:
    # a declaration added to the table (sync_sgd's, named anew, and one with the server's pattern)
    # is priced as the algorithm it copies
    for name, like in (("twin_allreduce", "sync_sgd"), ("twin_server", "async_sgd")):
        monkeypatch.setitem(registry._SPECS, name, dataclasses.replace(specs()[like], name=name))
    monkeypatch.setattr(registry, "_ORDERED", None)
    for name, like in (("twin_allreduce", "sync_sgd"), ("twin_server", "async_sgd")):
        assert costmodel.exchange_terms(name, 4, 1e6) == costmodel.exchange_terms(like, 4, 1e6)
    assert costmodel.exchange_terms("twin_allreduce", 4, 1e6) != costmodel.exchange_terms("twin_server", 4, 1e6)
    assert {n for n, s in specs().items() if not s.spans_hosts} == {"hogwild_sgd", "hogwild_easgd"}
    assert set(SYNC_ALGORITHMS) == {"sgd", "sync_sgd", "sync_easgd", "ltfb", "cgdp", "local_sgd", "post_local_sgd",
                                    "diloco", "dpsgd"}
    assert with_knob("tau") == ("easgd", "async_easgd", "async_measgd", "hogwild_easgd", "sync_easgd", "local_sgd",
                                "post_local_sgd", "diloco", "dpsgd")
    assert RunConfig(algorithm="ltfb", cpus=2).is_sync and not RunConfig(algorithm="easgd", cpus=2).is_sync


def test_dashboard_shows_a_knob_exactly_for_the_algorithms_declaring_it():
    pytest.importorskip("ipywidgets")
    from workbench.ui.controls import RELEVANT
    for knob in ("tau", "alpha", "round_size", "chunk_layers", "split"):
        shown = {n for n in specs() if n != "sgd" and RELEVANT[knob](RunConfig(algorithm=n, cpus=2, trainers=2))}
        assert shown == set(with_knob(knob)), knob


def test_a_bad_declaration_is_refused_with_the_field_and_the_allowed_values():
    with pytest.raises(ValueError, match="pattern: one of"):
        AlgorithmSpec("x", "x", None, sync=True, pattern="telepathy")
    with pytest.raises(ValueError, match="needs.server: one of"):
        AlgorithmSpec("x", "x", None, sync=True, needs=Needs(server="oracle"))


def test_an_unknown_algorithm_names_the_registered_ones():
    with pytest.raises(wb.ConfigError, match="algorithm: one of .*'cgdp'"):
        RunConfig(algorithm="downpour")


# ------------------------------------------------------------------------------ role cores
def test_parameter_server_on_handed_in_state_updates_those_arrays():
    """A shared-memory front-end hands in views of its segment: the core must update them in place."""
    x0 = np.arange(3, dtype=np.float32)
    state = server_state(x0, size=3, momentum=True)
    core = ParameterServer(None, 3, momentum=0.9, state=state)
    core.push(np.ones(3, np.float32), 0.1, 0)
    core.push(np.ones(3, np.float32), 0.1, 0)
    np.testing.assert_allclose(state["x"], x0 - 0.1 * (1 + 1.9), rtol=1e-6)   # v: 1, then 0.9 + 1
    assert state["header"][0] == 2 and core.version == 2
    core.advance_turn(retire=0)            # turn 0 retired: the turn moves on to 1
    assert core.turn == 1 and state["retired"].tolist() == [1, 0, 0]
    assert not core.my_turn(2) and core.my_turn(1) and core.my_turn(None)


def test_chunk_master_tunes_on_the_clock_it_is_given():
    """A virtual clock drives the chunk tuner: 2 layers per chunk is made slower, so 1 wins."""
    now = [0.0]
    groups = [(0, 2), (2, 4), (4, 6)]
    master = ChunkMaster(np.zeros(6, np.float32), 1, groups, "auto", clock=lambda: now[0])
    g = np.ones(6, np.float32)
    for step in range(12):
        chunks = chunk_bounds(groups, master.tuner.current)
        now[0] += 1.0 if master.tuner.current == 1 else 3.0
        for lo, hi in chunks:
            master.add(step, 0, lo, hi, g[lo:hi], 0.1, compute_s=0.0 if (lo, hi) == chunks[-1] else None)
    assert master.tuner.done and master.tuner.current == 1
    assert set(master.chunk_history) == {1, 2}
    np.testing.assert_allclose(master.x, -0.1 * 12, rtol=1e-6)


# ------------------------------------------------------------------------------ the synchronous tail
class _Ctx:
    """Just what SyncTail reads from a WorkerContext, with a clock the test moves; rank 0
    is asked to stop."""

    def __init__(self, rank, size):
        self.rank, self.size, self.t_start, self.now = rank, size, 0.0, [0.0]

    def stop_requested(self):
        return self.rank == 0

    def timer(self):
        return self.now[0]

    def clock_fn(self):
        return self.timer


def _exchange_together(tails, bufs, steps):
    """Each rank's `SyncTail.exchange` in a thread of its own, meeting in `reduce` (the
    sum of every rank's buffer, as a collective hands back): steps[rank] = (busy, loss_w,
    comm_s), its clock moved to `busy` before and by `comm_s` inside the exchange."""
    barrier = threading.Barrier(len(tails))
    outs, applies = [StepOut(comm_s=-1.0, wait_s=-1.0) for _ in tails], [None] * len(tails)

    def rank_loop(rank):
        busy, loss_w, comm_s = steps[rank]
        ctx = tails[rank].ctx

        def reduce(buf):
            barrier.wait()                   # every rank has packed
            total = sum(bufs)
            barrier.wait()
            ctx.now[0] += comm_s
            return total
        ctx.now[0] = busy
        applies[rank] = tails[rank].exchange(outs[rank], bufs[rank], loss_w, busy / 2, reduce)
    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(len(tails))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outs, applies


def test_sync_tail_sums_to_the_global_loss_and_splits_wait_from_comm():
    n, size = 3, 2
    tails = [SyncTail(_Ctx(rank, size), n) for rank in range(size)]
    bufs = [np.full(n + tail_length(size), 7.0, np.float32) for _ in range(size)]   # stale slots: zeroed
    # rank 1 is the slow one: rank 0 waits ~20 ms of its 25 ms exchange
    (fast, slow), applies = _exchange_together(tails, bufs, [(0.010, 0.25, 0.025), (0.030, 0.5, 0.004)])
    assert applies == [True, True]
    assert fast.loss == pytest.approx(0.75) and fast.stop == "stopped" and tails[0].times == pytest.approx([0.005, 0.015])
    assert fast.wait_s == pytest.approx(0.020) and fast.comm_s == pytest.approx(0.005)
    assert slow.wait_s == 0.0 and slow.comm_s == pytest.approx(0.004) and slow.stop == "stopped"
    assert tails[1].total.tolist() == pytest.approx([14.0] * n + [0.75, 1.0, 0.005, 0.015, 0.010, 0.030])
    # the next exchange counts busy time from where the last one freed each worker
    for t in tails:
        t.freed()
    (fast, slow), _ = _exchange_together(tails, bufs, [(0.045, 0.25, 0.001), (0.050, 0.5, 0.001)])
    assert tails[0].total[n + 2 + size:].tolist() == pytest.approx([0.010, 0.016])
    # a global loss past float32's range: the sum is inf on every worker, and no update applies
    (a, b), applies = _exchange_together(tails, bufs, [(0.06, 1e39, 0.001), (0.06, 0.5, 0.001)])
    assert applies == [False, False] and a.stop == b.stop == "diverged"


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_sync_tails_one_call_writer_matches_numpys_assignment(dtype):
    """The tail's one-call writer (float32/float64 host buffers) writes the bits NumPy's
    assignment does, and zeroes the other ranks' slots; other buffers take the assignment."""
    rng = np.random.default_rng(0)
    for size in (1, 2, 5):
        for rank in range(size):
            values = [float(v) for v in rng.normal(size=4)]
            buf = np.full(4 + tail_length(size), 3.0, dtype)
            tail = SyncTail(_Ctx(rank, size), 4)
            tail.t_free, busy = 0.0, values[3]
            tail.ctx.now[0] = busy
            tail.exchange(StepOut(), buf, values[0], values[2], lambda b: b)
            want = np.zeros(tail_length(size), dtype)
            want[0], want[1], want[2 + rank], want[2 + size + rank] = values[0], rank == 0, values[2], busy
            assert buf[4:].tobytes() == want.tobytes(), (size, rank)
            assert buf[:4].tolist() == [3.0] * 4


def test_settle_is_the_one_stopped_diverged_rule():
    out = StepOut()
    assert settle(out, 0.3, False) and out.stop is None and out.loss == 0.3
    out = StepOut()
    assert not settle(out, float("inf"), False) and out.stop == "diverged"
    # a stop completes its step (the update applies, the loop ends after it: a checkpoint there)
    out = StepOut()
    assert settle(out, 0.3, True) and out.stop == "stopped"
    # unless the step diverged: its update never applies, and the run says it diverged
    out = StepOut()
    assert not settle(out, float("nan"), True) and out.stop == "diverged"


def test_ltfbs_peak_lr_and_trainer_rules_live_on_its_declaration():
    from workbench.config.registry import trainer_lrs
    from workbench.execution.preflight import peak_lr
    from workbench.maths.schedules import scaled_lr
    spec = specs()["ltfb"]
    cfg = RunConfig(algorithm="ltfb", cpus=4, trainers=4, lr=0.1, lr_spread=2.0, batch_size=256, base_batch=32,
                    lr_scaling="linear")
    assert spec.peak_lr(cfg) == pytest.approx(max(trainer_lrs(cfg))) == pytest.approx(0.1 * 2.0 ** 1.5)
    assert peak_lr(cfg) == pytest.approx(scaled_lr(max(trainer_lrs(cfg)), 256, 32, "linear"))
    assert specs()["sync_sgd"].peak_lr(cfg) == 0.1 and specs()["sync_sgd"].check(cfg) is None
    assert spec.check(cfg) is None
    assert spec.check(cfg.model_copy(update={"trainers": 3}))[0] == "trainers"   # 3 does not divide 4
    with pytest.raises(wb.ConfigError, match="^lr_spread: values that keep every trainer's lr under"):
        RunConfig(algorithm="ltfb", cpus=4, trainers=4, lr_spread=1e300)


def test_a_worker_class_knows_its_declaration_however_it_was_built():
    from workbench.algorithms.async_ps import AsyncMSGD, AsyncSGD
    from workbench.config.registry import spec_of
    assert spec_of(AsyncMSGD) is specs()["async_msgd"] and spec_of(AsyncSGD) is specs()["async_sgd"]
    assert specs()["async_msgd"].cls is AsyncMSGD and AsyncMSGD.spec is specs()["async_msgd"]


def test_a_workers_batches_are_the_global_batchs_rows_kept_or_not():
    # `batches()` (kept by a step) and `batch()` (looked up per call) give the rows of
    # `global_batch` (the epoch order's oracle), across an epoch boundary, through an index
    # (LTFB's partitions) and at another batch size; a slice outside the batch is refused
    from workbench.data import global_batch
    from workbench.execution.context import build_context
    cfg = RunConfig(algorithm="sync_sgd", dataset="synthetic", n_samples=200, n_features=4, n_classes=3,
                    hidden=[4], batch_size=16, cpus=2, steps=30, seed=3)
    ctx = build_context(cfg, 1, 2, "cpu")
    n = ctx.X.shape[0]
    rows = ctx.batches()
    for step in (0, n // 16 - 1, n // 16, 25):      # the last whole batch of epoch 0 and the first of epoch 1
        want = global_batch(n, 16, 3, step)[5:12]
        for X, y in (rows(step, 5, 12), ctx.batch(step, 5, 12)):
            np.testing.assert_array_equal(X, ctx.X[want])
            np.testing.assert_array_equal(y, ctx.y[want])
    index = np.arange(n)[::-2]                       # a subset, in an order of its own
    X, y = ctx.batch(4, 0, 8, batch_size=8, index=index)
    want = index[global_batch(len(index), 8, 3, 4)]
    np.testing.assert_array_equal(X, ctx.X[want])
    np.testing.assert_array_equal(y, ctx.y[want])
    with pytest.raises(ValueError, match=r"lo, hi: 0 <= lo <= hi <= 16, got 10, 17"):
        rows(0, 10, 17)
