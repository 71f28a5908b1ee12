"""Shared-memory segments and lock files of Dask runs on one host: created, retired and freed
on whichever process holds them (worker 0 creates, a survivor retires a lost rank, the client
or a surviving worker frees). Plain functions, so `Client.run`/`submit` can ship them."""
from __future__ import annotations

import contextlib
import os

import numpy as np


def untrack(name: str) -> None:
    """Tell this process's resource tracker (which our local workers share) that a
    segment whose creator died has been freed."""
    with contextlib.suppress(Exception):
        from multiprocessing import resource_tracker
        resource_tracker.unregister("/" + name.lstrip("/"), "shared_memory")


def unlink_shm_name(name: str) -> None:
    """Remove a POSIX shared-memory name (mappings still open elsewhere stay valid) and
    its record in this user's private directory."""
    from ...util.private import forget_segment
    with contextlib.suppress(FileNotFoundError, OSError):
        os.unlink(os.path.join("/dev/shm", name.lstrip("/")))
    forget_segment(name)


def create_shared(name: str, params: np.ndarray) -> str:
    """Create a shared segment holding a copy of `params` (runs on worker 0)."""
    from ...comm.shm import SharedArray, create_segment
    seg = create_segment(name, params.nbytes)
    arr = SharedArray(seg, params.shape[0], params.dtype)
    arr.array[:] = params
    return seg


def shm_retire(segment: str, lock: str, n: int, size: int, rank: int, options: dict) -> None:
    """Runs on a surviving worker: retire a lost rank on the shared-memory server."""
    from ...comm.shm import ShmServer, live_server
    server = live_server(segment)
    if server is not None:     # this worker's own (its creator may be dead, its name unlinked)
        server.retire(rank)
        return
    server = ShmServer(segment, lock, n, size, **options)
    try:
        server.retire(rank)
    finally:
        server.close()


def remove_file(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
