"""Compressed gradients that are gathered (top-k, sign, QSGD) travel as their encoded
payloads: the wire format (maths/compress.py `encode`/`decode`), the allgather of the
communication interface (comm/base.py `gathered_sum`) on threads, shared memory and NCCL
(a fake communicator in host memory), and sync_sgd's exchange through it against the
dense allreduce of the decoded vectors it replaces."""
import ctypes
import threading
import uuid

import numpy as np
import pytest

from workbench.comm.base import Emulated, can_allgather, gathered_sum, ring_allgather_bytes
from workbench.comm.threads import ThreadComm, ThreadGroup
from workbench.execution.engine import run_threads
from workbench.maths import compress as C

KINDS = [dict(compression="topk", compression_ratio=1.0, momentum=0.0),
         dict(compression="topk", compression_ratio=0.05),                 # DGC's momentum correction
         dict(compression="sign"),
         dict(compression="qsgd", compression_levels=16)]


def on_threads(size, work):
    got, errors = {}, []

    def run(rank):
        try:
            got[rank] = work(rank)
        except BaseException as exc:   # noqa: BLE001 - handed to the test's thread
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    assert len(got) == size, "a worker hung"
    return got


def payloads(rank, call, m):
    return np.random.default_rng([rank, call]).integers(0, 256, m).astype(np.uint8)


# ------------------------------------------------------------------------------ the wire format
@pytest.mark.parametrize("kind,kw", [("topk", dict(ratio=0.1)), ("topk", dict(ratio=1.0)), ("sign", {}),
                                     ("qsgd", dict(levels=16)), ("qsgd", dict(levels=3))])
@pytest.mark.parametrize("n", [1, 9, 1000])
def test_a_payload_has_the_counted_bytes_and_decodes_to_what_was_sent(kind, kw, n):
    p = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    wire = {}
    sent, nbytes = C.compress(kind, p, rng=np.random.default_rng(0), wire=wire, **kw)
    data = C.encode(kind, sent, wire, levels=kw.get("levels", 16))
    assert data.dtype == np.uint8 and data.nbytes == nbytes
    assert nbytes == C.payload(kind, n, ratio=kw.get("ratio", 0.01), levels=kw.get("levels", 16))[0]
    np.testing.assert_array_equal(C.decode(kind, data, n, levels=kw.get("levels", 16)), sent)   # bitwise values


# ------------------------------------------------------------------------------ the comms' allgather
class NoAllreduce:
    def __init__(self, comm):
        self.comm, self.rank, self.size = comm, comm.rank, comm.size

    def allgather(self, payload):
        return self.comm.allgather(payload)

    def allreduce(self, buf):
        raise AssertionError("a gathered exchange must not allreduce")


def check_gathered(comms, size, m=37, calls=3):
    def work(rank):
        return [[np.array(x, copy=True) for x in comms[rank].allgather(payloads(rank, c, m))] for c in range(calls)]
    got = on_threads(size, work)
    for rank in range(size):
        for c in range(calls):
            assert len(got[rank][c]) == size
            for j in range(size):
                np.testing.assert_array_equal(got[rank][c][j], payloads(j, c, m))


def test_threads_allgather_hands_every_worker_every_payload_without_an_allreduce():
    group = ThreadGroup(3)
    check_gathered([NoAllreduce(group.comm(r)) for r in range(3)], 3)


@pytest.mark.parametrize("size", [2, 3])    # 2: the pair path's alternating slot sets; 3: the general path
def test_shared_memory_allgather_through_the_slots_interleaved_with_allreduces(size):
    from workbench.comm.shm import ShmComm, allreduce_nbytes, create_segment, unlink_segment
    n = 16                                  # 64 bytes a slot
    seg = create_segment(f"wbt{uuid.uuid4().hex[:10]}", allreduce_nbytes(size, n))
    comms = [ShmComm(seg, r, size, n) for r in range(size)]

    def work(rank):
        out = []
        for c in range(4):
            got = comms[rank].allgather(payloads(rank, c, 50))
            out.append([np.array(x, copy=True) for x in got])
            total = comms[rank].allreduce(np.full(n, rank + c, np.float32))   # the slots are reused
            out.append(float(total[0]))
        return out
    try:
        assert comms[0].allgather_limit == 64 and not can_allgather(comms[0], 65) and can_allgather(comms[0], 64)
        got = on_threads(size, work)
    finally:
        for c in comms:
            c.close()
        unlink_segment(seg)
    for rank in range(size):
        for c in range(4):
            for j in range(size):
                np.testing.assert_array_equal(got[rank][2 * c][j], payloads(j, c, 50))
            assert got[rank][2 * c + 1] == sum(r + c for r in range(size))


def test_gathered_sum_decodes_in_rank_order_and_falls_back_to_the_allreduce():
    """Each worker's top-k payload; the sum is the rank-order sum of the sent vectors
    (bitwise: the same additions); a comm without an allgather gets its allreduce."""
    size, n = 3, 40
    sent, data = [], []
    for r in range(size):
        wire = {}
        s, _ = C.topk(np.random.default_rng(r).standard_normal(n).astype(np.float32), 0.2, wire)
        sent.append(s)
        data.append(C.encode("topk", s, wire))
    want = sent[0].copy()
    for s in sent[1:]:
        want += s
    group = ThreadGroup(size)
    comms = [NoAllreduce(group.comm(r)) for r in range(size)]
    got = on_threads(size, lambda r: gathered_sum(comms[r], sent[r], data[r], lambda b: C.decode("topk", b, n)))
    for r in range(size):
        assert got[r].tobytes() == want.tobytes()

    class DenseOnly:
        rank, size = 0, 1

        def allreduce(self, buf):
            return buf * 2
    assert not can_allgather(DenseOnly(), 8)
    np.testing.assert_array_equal(gathered_sum(DenseOnly(), sent[0], data[0], None), 2 * sent[0])
    assert can_allgather(Emulated(group.comm(0), 0.0, 0.0), 10**9)
    assert not can_allgather(Emulated(DenseOnly(), 0.0, 0.0), 8)


class FakeNccl:
    """CuPy's NCCL module and communicators in host memory: allGather of P byte buffers."""

    NCCL_FLOAT32, NCCL_FLOAT64, NCCL_UINT8, NCCL_SUM = 7, 8, 1, 0

    def __init__(self, size):
        self.size, self.sends, self.barrier = size, {}, threading.Barrier(size)
        self.calls = [[] for _ in range(size)]          # (count, dtype) of every allGather, per rank

    def communicator(self, rank):
        lib = self

        class Comm:
            def allGather(self, send, recv, count, dtype, stream):   # noqa: N802 - CuPy's names
                assert dtype == lib.NCCL_UINT8
                lib.calls[rank].append(count)
                lib.sends[rank] = ctypes.string_at(send, count)
                lib.barrier.wait(timeout=10)
                for j in range(lib.size):
                    ctypes.memmove(recv + j * count, lib.sends[j], count)
                lib.barrier.wait(timeout=10)

            def allReduce(self, *args):   # noqa: N802
                raise AssertionError("a gathered exchange must not allreduce")
        return Comm()


class HostStream:
    ptr = 0

    def synchronize(self):
        pass


def test_nccl_allgather_is_one_allgather_of_the_byte_payloads():
    """The NCCL allgather's logic on the CPU (no GPU here): a fake communicator in host memory."""
    from workbench.comm.nccl import NcclComm
    lib = FakeNccl(3)
    comms = [NcclComm(None, r, 3, parts=(np, lib, lib.communicator(r), HostStream())) for r in range(3)]
    check_gathered(comms, 3)
    assert all(lib.calls[r] == [37, 37, 37] for r in range(3))    # one call of m bytes per exchange


@pytest.mark.gpu
def test_nccl_allgather_on_gpus():
    """Two GPUs (one rank each): the real ncclAllGather of byte payloads."""
    from workbench.comm.nccl import NcclComm, unique_id
    from workbench.maths.backend import get_xp, gpu_count
    if gpu_count() < 2:
        pytest.skip("needs two GPUs (NCCL runs one rank per device)")
    cp, uid = get_xp("gpu"), unique_id()
    comms = {}

    def make(rank):
        with cp.cuda.Device(rank):
            comms[rank] = NcclComm(uid, rank, 2)
    on_threads(2, make)

    def work(rank):
        with cp.cuda.Device(rank):
            return [cp.asnumpy(x) for x in comms[rank].allgather(cp.asarray(payloads(rank, 0, 37)))]
    got = on_threads(2, work)
    for rank in range(2):
        for j in range(2):
            np.testing.assert_array_equal(got[rank][j], payloads(j, 0, 37))


# ------------------------------------------------------------------------------ sync_sgd through it
@pytest.mark.parametrize("kw", KINDS)
def test_sync_sgd_gathers_the_payloads_and_equals_the_dense_exchange(kw, monkeypatch, tiny):
    """On threads: no allreduce of the gradient's buffer; every step one allgather whose
    received bytes are the step's `bytes_sent`; the parameters equal those of the dense
    allreduce of the decoded vectors (the comm without its allgather), exactly: the same
    float32 additions in the same rank order."""
    cfg = tiny(algorithm="sync_sgd", cpus=3, steps=6, **kw)
    n = None
    reduced, moved = [], []
    real_allreduce, real_allgather = ThreadComm.allreduce, ThreadComm.allgather

    def allreduce(self, buf):
        reduced.append(buf.shape[0])
        return real_allreduce(self, buf)

    def allgather(self, payload):
        got = real_allgather(self, payload)
        if self.rank == 0:
            moved.append(sum(p.nbytes for j, p in enumerate(got) if j != self.rank))
        return got
    monkeypatch.setattr(ThreadComm, "allreduce", allreduce)
    monkeypatch.setattr(ThreadComm, "allgather", allgather)
    got = run_threads(cfg)
    from workbench.problem import Problem
    n = Problem.from_config(cfg).model.n_params
    assert got.status == "completed" and len(moved) == 6
    assert all(m < n for m in reduced), "the gradient's buffer went through an allreduce"
    np.testing.assert_array_equal(got.steps.bytes_sent.to_numpy()[:6], moved)   # what the transport moved
    payload = C.payload(kw["compression"], n, ratio=kw.get("compression_ratio", 0.01),
                        levels=kw.get("compression_levels", 16))[0]
    assert moved[0] == ring_allgather_bytes(3, payload + 4 * (2 + 2 * 3))

    monkeypatch.setattr(ThreadComm, "allgather", None)          # today's carriage: the dense allreduce
    reduced.clear()
    dense = run_threads(cfg)
    assert any(m > n for m in reduced)
    np.testing.assert_array_equal(got.params, dense.params)


@pytest.mark.parametrize("made, sent", [(b"\x01\xff" * 64, b"\x01\xff" * 64), ([1, -1, 3], (1, -1, 3))])
def test_the_nccl_id_travels_in_the_form_its_cupy_takes_back(monkeypatch, made, sent):
    """CuPy 14 makes and takes bytes (a tuple is refused: seen on an H200); earlier CuPy a tuple."""
    import pickle
    from types import SimpleNamespace

    from workbench.comm import nccl
    monkeypatch.setattr(nccl, "nccl", lambda: SimpleNamespace(get_unique_id=lambda: made))
    uid = nccl.unique_id()
    assert uid == sent and type(uid) is type(sent)
    assert pickle.loads(pickle.dumps(uid)) == sent
