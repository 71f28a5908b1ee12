"""NumPy or CuPy: the only module that imports CuPy, and only when asked.

Workers get their array module with `get_xp("cpu"|"gpu")`; everything else is written
against `xp` and never imports CuPy itself.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

GPU_INSTALL_HINT = ('pip install -e ".[gpu]" (CUDA 12) or ".[gpu-cu13]" (CUDA 13), '
                    "or use the full environment.yml")


class GPUUnavailable(ImportError):
    """GPUs were asked for but CuPy, dask-cuda or a device is missing."""


@functools.cache
def cupy_or_none() -> Any:
    """The cupy module if it imports and sees a device, else None."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return cupy
    except Exception:  # ImportError, or CUDA driver errors on machines without a GPU
        return None


def nccl() -> Any:
    """CuPy's NCCL bindings (`cupy.cuda.nccl`); ImportError with the install hint if absent."""
    try:
        from cupy.cuda import nccl as module
    except Exception as exc:
        raise ImportError(f"NCCL allreduce needs CuPy with NCCL (pip install nvidia-nccl-cu12; {GPU_INSTALL_HINT})") from exc
    return module


def gpu_count() -> int:
    """Number of visible CUDA devices (0 without CuPy or a GPU)."""
    cp = cupy_or_none()
    return 0 if cp is None else int(cp.cuda.runtime.getDeviceCount())


def get_xp(kind: str = "cpu") -> Any:
    """The array module for a worker kind: numpy for "cpu", cupy for "gpu".

    >>> get_xp("cpu").__name__
    'numpy'
    """
    if kind == "cpu":
        return np
    if kind == "gpu":
        cp = cupy_or_none()
        if cp is None:
            raise GPUUnavailable(f"a GPU worker needs CuPy and a visible CUDA device: {GPU_INSTALL_HINT}")
        return cp
    raise ValueError(f"kind: 'cpu' or 'gpu', got {kind!r}")


def to_numpy(a: Any) -> np.ndarray:
    """A NumPy copy-or-view of a NumPy or CuPy array.

    >>> to_numpy(np.arange(3)).tolist()
    [0, 1, 2]
    """
    if isinstance(a, np.ndarray):
        return a
    get = getattr(a, "get", None)
    return get() if get is not None else np.asarray(a)


def synchronize(xp: Any) -> None:
    """Wait for queued device work, so timers measure compute and not just launches."""
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()
