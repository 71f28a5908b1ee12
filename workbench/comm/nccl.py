"""NCCL allreduce between GPU workers, through CuPy, initialised through Dask.

The RAFT pattern: one worker makes an NCCL unique id, the client hands it to every
loop, and each loop builds its communicator with its rank. Buffers stay on the device
(`device = True` tells the worker loop not to stage them through the host).

NCCL is not inside CuPy's wheels: install `nvidia-nccl-cu12` (the `gpu` extra does).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..maths.backend import get_xp, nccl


def unique_id() -> tuple:
    """A fresh NCCL unique id (runs on one worker; plain tuple so it travels anywhere)."""
    return tuple(nccl().get_unique_id())


def _nccl_dtype(dtype: Any) -> int:
    lib = nccl()
    return {np.dtype(np.float32): lib.NCCL_FLOAT32, np.dtype(np.float64): lib.NCCL_FLOAT64}[np.dtype(dtype)]


class NcclComm:
    """Sum-allreduce of CuPy buffers among `size` GPU workers."""

    device = True

    def __init__(self, uid: tuple, rank: int, size: int):
        cupy = get_xp("gpu")
        self.cupy, self.rank, self.size = cupy, rank, size
        self.comm = nccl().NcclCommunicator(size, uid, rank)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.out: Any = None

    def allreduce(self, buf: Any) -> Any:
        cp = self.cupy
        if self.out is None or self.out.shape != buf.shape or self.out.dtype != buf.dtype:
            self.out = cp.empty_like(buf)
        cp.cuda.get_current_stream().synchronize()  # the gradient must be complete
        self.comm.allReduce(buf.data.ptr, self.out.data.ptr, buf.size, _nccl_dtype(buf.dtype),
                            nccl().NCCL_SUM, self.stream.ptr)
        self.stream.synchronize()
        return self.out

    def barrier(self) -> None:
        self.allreduce(self.cupy.zeros(1, dtype=self.cupy.float32))

    def close(self) -> None:
        self.comm.destroy()
