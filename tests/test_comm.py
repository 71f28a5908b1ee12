"""Communication implementations against plain NumPy oracles."""
import multiprocessing as mp
import time
import uuid

import numpy as np
import pytest

from workbench.comm.base import Emulated, ThreadControl, WorkerLost
from workbench.comm.roles import ParameterServer
from workbench.comm.shm import PAIR_MAX, ShmComm, allreduce_nbytes, create_segment, pair_path, unlink_segment
from workbench.comm.threads import ThreadGroup, ThreadServer


def _spawned(target, args: list[tuple], timeout: float) -> dict:
    """target(*a, queue) in a fresh process per a; each puts (rank, result) on the queue.
    Returns {rank: result}."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, q)) for a in args]
    try:
        for p in procs:
            p.start()
        return dict(q.get(timeout=timeout) for _ in procs)
    finally:
        for p in procs:
            p.join(10)


def _shm_worker(name, rank, size, n, rounds, out_q):
    comm = ShmComm(name, rank, size, n)
    results = []
    for r in range(rounds):
        buf = np.arange(n, dtype=np.float32) * (rank + 1) + r
        results.append(comm.allreduce(buf[: n - r]).copy())   # varying lengths, up to capacity
    comm.close()
    out_q.put((rank, results))


@pytest.mark.parametrize("size, n", [(2, 1001), (3, 1001), (2, PAIR_MAX + 3)])   # pair path, general, general
def test_shm_allreduce_across_processes_equals_numpy_sum(size, n):
    rounds = 5
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", allreduce_nbytes(size, n))
    try:
        got = _spawned(_shm_worker, [(name, r, size, n, rounds) for r in range(size)], timeout=60)
    finally:
        unlink_segment(name)
    for r in range(rounds):
        expected = sum(np.arange(n, dtype=np.float32) * (k + 1) + r for k in range(size))[: n - r]
        for rank in range(size):
            np.testing.assert_array_equal(got[rank][r], expected)


def _shm_pair_worker(name, rank, n, rounds, out_q):
    comm = ShmComm(name, rank, 2, n)
    rng = np.random.default_rng(rank)
    bad = []
    for r in range(rounds):
        m = n - (r % 7)                        # lengths vary between calls
        buf = comm.buffer(m) if r % 2 else np.empty(m, dtype=np.float32)
        buf[:] = np.arange(m, dtype=np.float32) * (rank + 1) + r
        if rng.random() < 0.05:                # skew: one rank late, either way round
            time.sleep(rng.random() * 2e-4)
        got = comm.allreduce(buf)
        if rng.random() < 0.3:                 # the other rank may already be writing its next slot
            time.sleep(rng.random() * 1e-4)
        if not np.array_equal(got, np.arange(m, dtype=np.float32) * 3 + 2 * r):
            bad.append(r)
        if r % 50 == 0:
            comm.barrier()                     # barriers between calls keep the sets in step
    comm.close()
    out_q.put((rank, bad))


def test_shm_pair_allreduce_reuses_its_slot_sets_safely():
    # Two workers take the one-meeting path over two alternating slot sets: a rank that
    # is slow to read call k's set must never see the other rank's call k+2 in it. Many
    # calls with random delays on both sides, each result checked exactly.
    n, rounds = 257, 3000
    assert pair_path(2, n)
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", allreduce_nbytes(2, n))
    try:
        got = _spawned(_shm_pair_worker, [(name, r, n, rounds) for r in range(2)], timeout=120)
    finally:
        unlink_segment(name)
    assert got == {0: [], 1: []}


def test_shm_allreduce_rejects_buffers_over_capacity():
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", allreduce_nbytes(1, 4))
    try:
        comm = ShmComm(name, 0, 1, 4)
        with pytest.raises(ValueError, match="buf: at most 4"):
            comm.allreduce(np.zeros(5, np.float32))
        np.testing.assert_array_equal(comm.allreduce(np.ones(4, np.float32)), np.ones(4))
    finally:
        unlink_segment(name)


def test_shm_wait_notices_an_aborted_run():
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", allreduce_nbytes(2, 8))
    control = ThreadControl()
    control.abort("peer gone")
    try:
        comm = ShmComm(name, 0, 2, 8, control=control)   # rank 1 never arrives
        t0 = time.time()
        with pytest.raises(WorkerLost):
            comm.allreduce(np.ones(8, np.float32))
        assert time.time() - t0 < 30    # a hang guard, not a timing claim (it notices within ABORT_POLL_S)
    finally:
        unlink_segment(name)


@pytest.mark.parametrize("spin_s", [0.0, 0.02])
def test_shm_wait_spins_its_budget_before_it_sleeps(monkeypatch, spin_s):
    # A partner 60 ms away: the wait yields the core for its budget, then sleeps.
    import workbench.comm.shm as shm
    slept = []
    real_sleep = shm.time.sleep

    class Clock:   # the module's `time` with its sleeps noted
        perf_counter = staticmethod(time.perf_counter)

        @staticmethod
        def sleep(s):
            slept.append(time.perf_counter())
            real_sleep(s)
    monkeypatch.setattr(shm, "time", Clock)
    t0 = time.perf_counter()
    shm.wait_until(lambda: time.perf_counter() - t0 > 0.06, None, "test", spin_s)
    assert slept, "a wait longer than its budget sleeps"
    first = slept[0] - t0
    assert first >= spin_s                          # never before the budget is spent
    if spin_s == 0.0:
        assert first < 0.05                         # no budget: sleeps at once (the partner is 60 ms away)


def test_spin_budget_is_long_only_where_every_worker_has_a_core(monkeypatch):
    import workbench.util.machine as machine
    from workbench.comm.shm import SPIN_S, SPIN_SHARED_S, spin_budget
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    assert (spin_budget(2), spin_budget(3)) == (SPIN_S, SPIN_SHARED_S)
    assert SPIN_S > SPIN_SHARED_S


def test_thread_allreduce_sums_in_rank_order_and_leaves_inputs():
    import threading
    group = ThreadGroup(3)
    bufs = [np.full(5, r + 1, np.float32) for r in range(3)]
    copies = [b.copy() for b in bufs]
    out = {}
    threads = [threading.Thread(target=lambda r=r: out.setdefault(r, group.comm(r).allreduce(bufs[r])))
               for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    for r in range(3):
        np.testing.assert_array_equal(out[r], np.full(5, 6.0))
        np.testing.assert_array_equal(bufs[r], copies[r])


def test_server_core_push_is_sgd_and_counts_staleness():
    x0 = np.arange(4, dtype=np.float32)
    core = ParameterServer(x0, momentum=0.0)
    g = np.ones(4, np.float32)
    v1, x1, s1 = core.push(g, 0.5, version=0)
    v2, x2, s2 = core.push(g, 0.5, version=0)   # computed at version 0, one update landed since
    np.testing.assert_allclose(x2, x0 - 1.0)
    assert (v1, s1, v2, s2) == (1, 0, 2, 1)
    np.testing.assert_array_equal(x0, np.arange(4))   # input untouched


def test_server_core_momentum_matches_closed_form():
    core = ParameterServer(np.zeros(1, np.float32), momentum=0.9)
    g = np.ones(1, np.float32)
    for _ in range(3):
        core.push(g, 0.1, core.version)
    # v: 1, 1.9, 2.71 -> x = -0.1 * (1 + 1.9 + 2.71)
    np.testing.assert_allclose(core.x, [-0.561], rtol=1e-6)


def test_server_core_elastic_step():
    core = ParameterServer(np.zeros(2, np.float32))
    xw = np.array([1.0, -2.0], np.float32)
    d = core.elastic(xw, 0.25)
    np.testing.assert_allclose(d, [0.25, -0.5])
    np.testing.assert_allclose(core.x, [0.25, -0.5])


def centre_after(order, alpha=0.5):
    """The centre after elastic exchanges in `order`, worker r holding x = r + 1 (oracle).
    Different orders end at different centres, so the centre proves the order."""
    xc = 0.0
    for r in order:
        xc += alpha * ((r + 1) - xc)
    return xc


def test_round_robin_turns_follow_rank_order_and_skip_retired():
    import threading
    server = ThreadServer(ParameterServer(np.zeros(1, np.float64), size=3))

    def worker(rank, rounds):
        for _ in range(rounds):
            server.elastic(np.full(1, rank + 1.0), 0.5, rank=rank)
        server.retire(rank)

    # rank 2 retires after one exchange: the others must not wait for it afterwards
    threads = [threading.Thread(target=worker, args=(r, 1 if r == 2 else 3)) for r in (2, 1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert server.core.x[0] == pytest.approx(centre_after([0, 1, 2, 0, 1, 0, 1]))
    assert centre_after([0, 1, 2, 0, 1, 0, 1]) != pytest.approx(centre_after([1, 0, 2, 0, 1, 0, 1]))


def test_emulator_adds_latency_and_bandwidth_cost():
    class Echo:
        rank, size = 0, 4

        def allreduce(self, buf):
            return buf

    emu = Emulated(Echo(), latency_ms=5.0, bandwidth_gbps=1.0)
    buf = np.zeros(250_000, np.float32)                          # 1 MB
    t0 = time.perf_counter()
    emu.allreduce(buf)
    elapsed = time.perf_counter() - t0
    # ring: 2(P-1)=6 messages of latency + 2(P-1)/P * 1 MB at 125 MB/s = 30 ms + 12 ms
    assert elapsed >= 0.040            # at least the emulated cost (no upper bound: a busy machine only adds)


def _server(tmp_path, n=4, size=3, momentum=0.0):
    from workbench.comm.shm import ShmServer, create_server_segment
    name = create_server_segment(f"wbt{uuid.uuid4().hex[:10]}", np.zeros(n, np.float32), momentum > 0)
    lock = str(tmp_path / "server.lock")
    open(lock, "x").close()     # made by the run's creator (util.private.create_lock); the workers open it
    return name, lambda: ShmServer(name, lock, n, size, momentum=momentum)


@pytest.mark.parametrize("momentum", [0.0, 0.9])   # 0: the plain update, lr*g computed before the lock
def test_shm_server_push_momentum_and_staleness_match_server_core(tmp_path, momentum):
    name, make = _server(tmp_path, momentum=momentum)
    try:
        a, b = make(), make()       # two clients of one server, as two workers would be
        core = ParameterServer(np.zeros(4, np.float32), momentum=momentum)
        for k, (client, version) in enumerate(((a, 0), (b, 0), (a, 2))):
            g = np.arange(4, dtype=np.float32) / (k + 3)
            got = client.push(g, 0.1, version)
            want = core.push(g, 0.1, version)
            assert got[0] == want[0] and got[2] == want[2]
            np.testing.assert_array_equal(got[1], want[1])   # the same operations: the same bits
        a.close(), b.close()
    finally:
        unlink_segment(name)


def test_shm_server_round_robin_across_clients(tmp_path):
    import threading
    name, make = _server(tmp_path, n=1, size=3)

    def worker(rank, rounds):
        server = make()                         # each worker its own mapping and lock handle
        for _ in range(rounds):
            server.elastic(np.full(1, rank + 1.0, np.float32), 0.5, rank=rank)
        server.retire(rank)
        server.close()

    try:
        threads = [threading.Thread(target=worker, args=(r, 1 if r == 2 else 3)) for r in (2, 0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
        final = make().centre()[0]
        assert final == pytest.approx(centre_after([0, 1, 2, 0, 1, 0, 1]), rel=1e-6)
    finally:
        unlink_segment(name)


# ------------------------------------------------------------------------------ the ServerRole protocol
ROLE_ARGS = {   # one call of each op, on a core of 4 parameters and 2 workers
    "pull": (), "push": (np.ones(4, np.float32), 0.1, 0), "elastic": (np.ones(4, np.float32), 0.5),
    "retire": (1,), "centre": (), "final": (), "deposit": (0, 1, np.ones(4, np.float32), np.ones(8, np.float32)),
    "collect": (0, 1), "depart": (1,), "average": (0, 1, np.ones(4, np.float32), 0), "model": (1,), "mean": (),
    "snapshot": (),
}
RESTORE_ARGS = {"parameter_server": ({"x": np.ones(4, np.float32), "version": np.array([3])},),
                "pairwise": ({"rows": np.ones((2, 4), np.float32)},)}


def _arrays(values) -> list[int]:
    """Sizes of the arrays among `values`, and in the dicts among them (a state travels as one)."""
    out = []
    for a in values:
        if isinstance(a, dict):
            out += [int(v.size) for v in a.values() if isinstance(v, np.ndarray) and v.ndim and v.size > 1]
        elif isinstance(a, np.ndarray):
            out.append(len(a))
    return out


@pytest.mark.parametrize("role", ["parameter_server", "tournament", "pairwise"])
def test_each_role_states_its_ops_and_their_sizes_are_the_arrays_that_travel(role):
    """Every op of a core's table names a method of the core, and what the table says
    travels is what the call takes and answers (the simulator charges these sizes)."""
    from workbench.comm.base import serve_now
    from workbench.comm.roles import make_core, role_core
    core = make_core(role, {}, np.zeros(4, np.float32), 2)
    assert isinstance(core, role_core(role))
    for name, op in type(core).OPS.items():
        args = RESTORE_ARGS[role] if name == "restore" else ROLE_ARGS[name]
        assert callable(getattr(core, op.method))
        if name == "final":
            assert not op.ready(core, *args)     # worker 0 has not retired
            core.retire(0)
        if op.ready is not None:
            assert op.ready(core, *args)         # the deposit above came first / FCFS elastic / all retired
        out_sizes = op.sizes_out(core, *args)
        got = serve_now(core, op, args)
        assert list(op.sizes_in(*args)) == _arrays(args), name
        assert list(out_sizes) == _arrays(got if isinstance(got, tuple) else (got,)), name
        assert op.notice <= op.changes              # an announcement is always a state change


def test_thread_server_serves_only_its_role_ops():
    from workbench.comm.roles import TournamentMailbox
    server = ThreadServer(TournamentMailbox())
    server.deposit(0, 1, np.ones(2, np.float32))
    assert server.collect(0, 1)[0].tolist() == [1.0, 1.0]
    with pytest.raises(AttributeError, match="pull"):
        server.pull()                              # the mailbox is not a parameter server


def test_reports_hand_each_result_and_loss_to_the_monitor_once():
    from workbench.execution.transports.base import Reports
    reports = Reports(lambda rank: f"w{rank}")
    reports.returned(0, {"status": "completed"})
    reports.vanish(1, steps=["kept"])               # lost with its records (the simulator's kill)
    reports.vanish(2)
    reports.lost_at[1] = 3.5
    first = reports.poll()
    assert set(first.results) == {0, 1} and first.results[1]["status"] == "lost"
    assert first.lost == {1: "w1", 2: "w2"} and first.lost_at == {1: 3.5}
    assert reports.pending(4) == {3}
    again = reports.poll()
    assert not again.results and not again.lost


def test_the_stop_word_is_seen_at_the_next_call_without_waiting_for_a_poll():
    # One host: the client's stop request also sets a word in the start barrier's segment
    # (barrier.set_shm_stop, on a worker), and every loop's ThrottledControl reads it at each
    # call, where the Dask event behind it is polled every 0.2 s. Here the slow control never
    # says stop and its poll interval is an hour: only the word can stop the loop.
    from workbench.comm.barrier import ShmStartBarrier, ShmStopWord, barrier_nbytes, set_shm_stop
    from workbench.comm.base import ThrottledControl

    class Never:
        polls = 0

        def stop_requested(self):
            Never.polls += 1
            return False

    size = 3
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", barrier_nbytes(size))
    try:
        control = ThrottledControl(Never(), interval=3600.0, background=False, word=ShmStopWord(name, size))
        assert not control.stop_requested() and Never.polls == 1          # the first call polls once
        assert not control.stop_requested() and Never.polls == 1          # then only the word is read
        barrier = ShmStartBarrier(name, 0, size)
        assert barrier.flags.tolist() == [0, 0, 0]                        # the word lies after the flags
        set_shm_stop(name, size)
        assert barrier.flags.tolist() == [0, 0, 0]
        assert control.stop_requested() and Never.polls == 1
        barrier.close()
        control.close()
        assert control.word is None and control.stop_requested()          # let go; the stop stays seen
    finally:
        unlink_segment(name)
    set_shm_stop(name, size)                                              # the run's segment gone: no error


def test_a_worker_that_leaves_the_start_barrier_on_a_stop_lets_a_later_one_through():
    """A stop while the run starts: worker 0 waits at the barrier, sees the stop, and goes on
    to its first (synchronous) step, whose exchange settles the stop with its peers. Worker 1
    arrives later: it once waited in the barrier's second phase for worker 0's flag until its
    deadline (120 s; the client cancelled the run after 12 s and worker 0 reported its peer
    gone). It now passes at once."""
    from workbench.comm.barrier import ShmStartBarrier, barrier_nbytes

    class Stop:
        def aborted(self):
            return False

        def stop_requested(self):
            return True

    size = 2
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", barrier_nbytes(size))
    try:
        first = ShmStartBarrier(name, 0, size, control=Stop(), timeout=60.0)
        assert first() == []                                   # alone, on the stop
        # through, as far as a later worker can tell: its second phase waits for every flag's 2
        # (the old barrier left 1 here, and worker 1 sat until its deadline; the flags say so
        # whatever the machine's load, where a clock around later() did not)
        assert first.flags.tolist() == [2, 0]
        later = ShmStartBarrier(name, 1, size, control=None, timeout=30.0)
        assert later() == [] and later.flags.tolist() == [2, 2]
        first.close()
        later.close()
    finally:
        unlink_segment(name)


def test_a_loop_asking_to_stop_sets_the_word_and_the_word_slows_the_poll():
    # A loop's own stop request (an asynchronous worker that diverged) reaches the other
    # loops on its host through the word at their next call, not their next poll; with the
    # word there, the poll (a scheduler round trip on Dask) runs once a second, unless the
    # loop asks for an elastic run's pause requests.
    from workbench.comm.barrier import ShmStopWord, barrier_nbytes
    from workbench.comm.base import WORD_POLL_S, ThrottledControl

    class Slow:
        asked: list[str] = []

        def stop_requested(self):
            return False

        def request_stop(self, reason):
            Slow.asked.append(reason)

    size = 2
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", barrier_nbytes(size))
    try:
        mine, other = (ThrottledControl(Slow(), interval=3600.0, background=False, word=ShmStopWord(name, size))
                       for _ in range(2))
        plain = ThrottledControl(Slow(), interval=0.2, background=False)
        assert not other.stop_requested()
        assert mine._period() == 3600.0 and plain._period() == 0.2
        fast = ThrottledControl(Slow(), interval=0.2, background=False, word=ShmStopWord(name, size))
        assert fast._period() == WORD_POLL_S == 1.0
        assert fast.checkpoint_at() is None and fast._period() == 1.0   # checkpoint requests come in the segment
        fast.pause_at()                                        # an elastic run's pauses: polled at its own rate
        assert fast._period() == 0.2
        mine.request_stop("diverged")
        assert Slow.asked == ["diverged"]                      # the slow control is told too
        assert other.stop_requested()                          # seen at the next call
        for c in (mine, other, fast, plain):
            c.close()
    finally:
        unlink_segment(name)


def test_a_checkpoint_request_reaches_every_loop_on_the_host_through_the_segment():
    # The client's wall-clock checkpoint request (barrier.set_shm_checkpoint, on a worker) is
    # read by each loop at every step beside the stop word; the slow control (a Dask variable)
    # is never polled for it, and the stop and the workers' flags are left alone.
    from workbench.comm.barrier import ShmStartBarrier, ShmStopWord, barrier_nbytes, set_shm_checkpoint
    from workbench.comm.base import ThrottledControl

    class Polled:
        polls = 0

        def stop_requested(self):
            return False

        def requests(self):
            Polled.polls += 1
            return 99, None

    size = 2
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", barrier_nbytes(size))
    try:
        loops = [ThrottledControl(Polled(), interval=3600.0, background=False, word=ShmStopWord(name, size))
                 for _ in range(size)]
        assert [c.checkpoint_at() for c in loops] == [None, None]
        set_shm_checkpoint(name, size, 1234)
        assert [c.checkpoint_at() for c in loops] == [1234, 1234]
        set_shm_checkpoint(name, size, 2500)                   # the next one replaces it
        assert [c.checkpoint_at() for c in loops] == [2500, 2500]
        assert Polled.polls == 0 and not any(c.stop_requested() for c in loops)
        barrier = ShmStartBarrier(name, 0, size)
        assert barrier.flags.tolist() == [0, 0]
        barrier.close()
        for c in loops:
            c.close()
        plain = ThrottledControl(Polled(), interval=3600.0, background=False)   # no word (another host): polled
        assert plain.checkpoint_at() == 99 and Polled.polls == 1
    finally:
        unlink_segment(name)
    set_shm_checkpoint(name, size, 1)                          # the run's segment gone: no error


def test_the_controls_slow_first_poll_is_taken_before_the_start_barrier():
    """A Dask control's first answer is a scheduler round trip (20-40 ms); later ones read a
    flag its poller keeps. The worker that reached the start barrier last used to pay that
    trip at its first step, after the barrier, while the others trained: a short
    asynchronous run's two workers took turns (measured 2026-12-06: in 2 of 3 quick
    async_sgd runs of lesson sync_async_hogwild, worker 1 began after worker 0's 88th and last
    step, one gradient 88 updates stale and all others 0). `WorkerContext.start` now primes
    the control before the barrier, whoever arrives last."""
    from workbench.comm.base import ThrottledControl
    from workbench.config import RunConfig
    from workbench.execution.context import build_context

    seen: list[str] = []

    class Slow:
        def stop_requested(self):
            seen.append("poll")
            return False

    control = ThrottledControl(Slow(), interval=3600.0)
    cfg = RunConfig(algorithm="async_sgd", dataset="digits", model="softmax", batch_size=32, steps=5, cpus=2)
    ctx = build_context(cfg, 1, 2, "cpu", control=control, emit=[].append,
                        start_barrier=lambda: seen.append("barrier") or [])
    try:
        ctx.start()
        assert seen == ["poll", "barrier"]                  # the round trip before the workers line up
        assert not ctx.stop_requested() and seen == ["poll", "barrier"]   # the first step reads the flag
    finally:
        control.close()


class _Counted(np.ndarray):
    """An array that counts, per thread, the whole-vector copies and in-place adds made on it
    (a `ThreadComm.allreduce`'s passes over the vector: its `.copy()` and `+=`)."""

    passes: dict = {}

    def _bump(self):
        import threading
        key = threading.get_ident()
        _Counted.passes[key] = _Counted.passes.get(key, 0) + 1

    def copy(self, *a, **k):
        self._bump()
        return super().copy(*a, **k)

    def __iadd__(self, other):
        self._bump()
        return super().__iadd__(other)


@pytest.mark.parametrize("size", [1, 2, 4])
def test_thread_collectives_meet_and_pass_over_the_vector_as_often_as_their_counts_say(size):
    """`threads.allreduce_meetings`, `exchange_meetings` and `allreduce_passes`, the counts
    the cost model charges a thread run's exchange by (`costmodel.allreduce_terms(...,
    "threads")`, once charged as the ring's 2 (P-1) messages), against what the code does: the
    barrier waits each thread really makes (a barrier of one waits for nobody: no meeting)
    and the copies and adds of the vector on the busiest thread."""
    import threading

    from workbench.comm import threads as th
    g = ThreadGroup(size)
    calls: dict = {}
    real_wait = g.wait

    def counted_wait():
        key = threading.get_ident()
        calls[key] = calls.get(key, 0) + 1
        real_wait()
    g.wait = counted_wait

    def run_all(op):
        calls.clear()
        _Counted.passes = {}
        ts = [threading.Thread(target=op, args=(g.comm(r),)) for r in range(size)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        meetings = set(calls.values()) if size > 1 else {0}
        return meetings, max(_Counted.passes.values(), default=0)

    n = 1000
    meetings, passes = run_all(lambda c: c.allreduce(np.ones(n, np.float32).view(_Counted)))
    assert meetings == {th.allreduce_meetings(size)}
    assert passes == th.allreduce_passes(size)
    assert run_all(lambda c: c.allgather(np.ones(8, np.uint8)))[0] == {th.exchange_meetings(size)}
    peers = [(r + 1) % size for r in range(size)]
    assert run_all(lambda c: c.neighbour_exchange(np.ones(n, np.float32), [peers[c.rank]] if size > 1 else []))[0] \
        == {th.exchange_meetings(size)}
    from workbench.analysis.costmodel import allreduce_terms
    a, b = allreduce_terms(size, 4.0 * n, "threads")
    assert (a, b) == ((th.allreduce_meetings(size), th.allreduce_passes(size) * 4.0 * n) if size > 1 else (0, 0))
    if size > 1:
        assert allreduce_terms(size, 4.0 * n, "ring")[0] == 2 * (size - 1)   # what it was charged before


def test_shm_alone_copies_its_slot_once_as_the_simulator_charges():
    """A group of one on shared memory (a real one-worker run's `ShmComm`): the engine and the
    transport skip nothing; the allreduce copies the slot into the shared total, once
    (`shm.solo_copies`), and meets nobody (`allreduce_meetings` 0). Counted by wrapping the
    module's NumPy copy and add."""
    import workbench.comm.shm as shm
    n = 3000
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", allreduce_nbytes(1, n))
    c = ShmComm(name, 0, 1, n)
    counts = {"copy": 0, "add": 0}

    class CountingNp:
        def __getattr__(self, attr):
            return getattr(np, attr)

        def copyto(self, dst, src, *a, **k):
            counts["copy"] += int(np.size(dst) >= n)
            return np.copyto(dst, src, *a, **k)

        def add(self, *a, **k):
            counts["add"] += 1
            return np.add(*a, **k)
    try:
        buf = c.buffer(n)                      # sync_sgd's way: the contribution written in the slot
        buf[:] = np.arange(n, dtype=np.float32)
        shm.np, saved = CountingNp(), shm.np
        try:
            phase = c.phase
            out = c.allreduce(buf)
        finally:
            shm.np = saved
        assert counts == {"copy": shm.solo_copies(1), "add": 0} and np.array_equal(out, np.arange(n, dtype=np.float32))
        assert c.phase - phase == 2 and shm.allreduce_meetings(1, n) == 0   # two arrivals, nobody to wait for
    finally:
        c.close()
        unlink_segment(name)
