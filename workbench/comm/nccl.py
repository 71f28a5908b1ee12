"""NCCL between GPU workers, through CuPy, initialised through Dask.

The RAFT pattern: one worker makes an NCCL unique id, the client hands it to every
loop, and each loop builds its communicator with its rank. Buffers stay on the device
(`device = True` tells the worker loop not to stage them through the host).

Three exchanges: the sum-allreduce, the allgather of compressed gradients' byte payloads
(`allgather`: one ncclAllGather), and gossip's peer-to-peer exchange
(`neighbour_exchange`): one grouped set of ncclSend / ncclRecv, one pair per peer, so
each worker sends its vector to its d peers and nothing else (d n floats; NCCL needs the
sends and receives of one worker posted in one group, or two peers sending to each other
would each wait for the other to receive).

NCCL is not inside CuPy's wheels: install `nvidia-nccl-cu12` (the `gpu` extra does).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..maths.backend import get_xp, nccl


def unique_id() -> bytes | tuple:
    """A fresh NCCL unique id, made on one worker and sent to the others, in the form this
    CuPy's NcclCommunicator takes back: bytes (CuPy 14, seen on an H200 on 2026-12-04; it
    refuses a tuple) or a tuple of ints (earlier CuPy). Either pickles."""
    uid = nccl().get_unique_id()
    return uid if isinstance(uid, bytes) else tuple(uid)


def _nccl_dtype(dtype: Any, lib: Any = None) -> int:
    lib = lib if lib is not None else nccl()
    return {np.dtype(np.float32): lib.NCCL_FLOAT32, np.dtype(np.float64): lib.NCCL_FLOAT64}[np.dtype(dtype)]


def _ptr(a: Any) -> int:
    """A device array's address (CuPy), or a host array's (NumPy: the CPU tests' fake communicator)."""
    data = a.data
    return data.ptr if hasattr(data, "ptr") else a.ctypes.data


class NcclComm:
    """Sum-allreduce and peer exchange of CuPy buffers among `size` GPU workers.

    `parts` (tests): (xp, lib, communicator, stream) standing in for CuPy, its NCCL module,
    the NcclCommunicator and a stream, so the exchange's logic runs on the CPU."""

    device = True

    def __init__(self, uid: bytes | tuple | None, rank: int, size: int, parts: tuple | None = None):
        self.rank, self.size = rank, size
        if parts is None:
            cupy = get_xp("gpu")
            self.cupy, self.lib = cupy, nccl()
            self.comm = self.lib.NcclCommunicator(size, uid, rank)
            self.stream = cupy.cuda.Stream(non_blocking=True)
        else:
            self.cupy, self.lib, self.comm, self.stream = parts
        self.out: Any = None

    def _inputs_ready(self) -> None:
        """The caller's kernels (the gradient, the local step) are complete."""
        cuda = getattr(self.cupy, "cuda", None)
        if cuda is not None:
            cuda.get_current_stream().synchronize()

    def allreduce(self, buf: Any) -> Any:
        cp = self.cupy
        if self.out is None or self.out.shape != buf.shape or self.out.dtype != buf.dtype:
            self.out = cp.empty_like(buf)
        self._inputs_ready()
        self.comm.allReduce(_ptr(buf), _ptr(self.out), buf.size, _nccl_dtype(buf.dtype, self.lib),
                            self.lib.NCCL_SUM, self.stream.ptr)
        self.stream.synchronize()
        return self.out

    def neighbour_exchange(self, vec: Any, peers: list[int]) -> dict[int, Any]:
        """Gossip's peer-to-peer exchange (`base.neighbour_exchange`): in one NCCL group, a
        send of `vec` to each peer and a receive of each peer's vector into a fresh device
        array; returns those arrays once the group has completed on the comm's stream."""
        cp, lib = self.cupy, self.lib
        send = cp.ascontiguousarray(cp.asarray(vec))
        got = {j: cp.empty_like(send) for j in peers}
        if not peers:
            return got
        kind = _nccl_dtype(send.dtype, lib)
        self._inputs_ready()
        lib.groupStart()
        try:
            for j in peers:
                self.comm.send(_ptr(send), send.size, kind, j, self.stream.ptr)
                self.comm.recv(_ptr(got[j]), send.size, kind, j, self.stream.ptr)
        finally:
            lib.groupEnd()
        self.stream.synchronize()
        return got

    def allgather(self, payload: Any) -> list[Any]:
        """Every worker's byte payload in rank order (`base.gathered_sum`): one
        ncclAllGather of the uint8 buffers into a device array of P payloads; returns
        views of it, one per rank (valid until the next call)."""
        cp, lib = self.cupy, self.lib
        send = cp.ascontiguousarray(cp.asarray(payload, dtype=cp.uint8))
        m = send.size
        recv = cp.empty(self.size * m, dtype=cp.uint8)
        self._inputs_ready()
        self.comm.allGather(_ptr(send), _ptr(recv), m, lib.NCCL_UINT8, self.stream.ptr)
        self.stream.synchronize()
        return [recv[j * m:(j + 1) * m] for j in range(self.size)]

    def barrier(self) -> None:
        self.allreduce(self.cupy.zeros(1, dtype=self.cupy.float32))

    def close(self) -> None:
        self.comm.destroy()
