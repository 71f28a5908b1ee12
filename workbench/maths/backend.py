"""NumPy or CuPy: the only module that imports CuPy, and only when asked.

Workers get their array module with `get_xp("cpu"|"gpu")`; everything else is written
against `xp` and never imports CuPy itself.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

# CUDA major version -> the extra that matches it, and the NCCL wheel inside it (CuPy's
# wheels carry no NCCL); pyproject.toml's gpu / gpu-cu13 extras (tests/test_gpu_hints.py checks)
GPU_EXTRAS: dict[int, tuple[str, str, str]] = {12: ("gpu", "cupy-cuda12x", "nvidia-nccl-cu12"),
                                              13: ("gpu-cu13", "cupy-cuda13x", "nvidia-nccl-cu13")}


def cuda_driver_major() -> int | None:
    """The newest CUDA major version this host's driver runs (13 for a 13.x driver), asked
    of the driver library itself (no CuPy needed); None where there is no NVIDIA driver."""
    import ctypes
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        try:
            if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
                return version.value // 1000
        except (AttributeError, OSError):
            pass
    return None


def installed_cupy_cuda() -> int | None:
    """The CUDA major version of the CuPy wheel installed here (cupy-cuda12x: 12), or None."""
    import importlib.metadata as md
    for major, (_, cupy, _) in GPU_EXTRAS.items():
        try:
            md.version(cupy)
            return major
        except md.PackageNotFoundError:
            continue
    return None


def gpu_install_hint(cupy_cuda: int | None | str = "probe", driver: int | None | str = "probe") -> str:
    """What to install for GPU workers on this host, in one clause: the extra (and so the
    CuPy build and the NCCL wheel) of an installed CuPy's CUDA, else of the driver's.

    >>> gpu_install_hint(cupy_cuda=None, driver=13)
    "pip install 'parallel-workbench[gpu-cu13]' (this driver runs CUDA 13: cupy-cuda13x, dask-cuda[cu13], nvidia-nccl-cu13)"
    >>> gpu_install_hint(cupy_cuda=12, driver=13)
    "pip install 'parallel-workbench[gpu]' (the installed CuPy is cupy-cuda12x: dask-cuda[cu12], nvidia-nccl-cu12)"
    >>> gpu_install_hint(cupy_cuda=None, driver=None)
    "no NVIDIA driver found; on a GPU host: pip install 'parallel-workbench[gpu]' (CUDA 12: cupy-cuda12x, nvidia-nccl-cu12) or 'parallel-workbench[gpu-cu13]' (CUDA 13: cupy-cuda13x, nvidia-nccl-cu13)"
    """
    cupy_cuda = installed_cupy_cuda() if cupy_cuda == "probe" else cupy_cuda
    if cupy_cuda in GPU_EXTRAS:
        extra, cupy, nccl = GPU_EXTRAS[cupy_cuda]
        return (f"pip install 'parallel-workbench[{extra}]' (the installed CuPy is {cupy}: "
                f"dask-cuda[cu{cupy_cuda}], {nccl})")
    driver = cuda_driver_major() if driver == "probe" else driver
    if driver in GPU_EXTRAS:
        extra, cupy, nccl = GPU_EXTRAS[driver]
        return (f"pip install 'parallel-workbench[{extra}]' (this driver runs CUDA {driver}: {cupy}, "
                f"dask-cuda[cu{driver}], {nccl})")
    both = " or ".join(f"'parallel-workbench[{extra}]' (CUDA {major}: {cupy}, {nccl})"
                       for major, (extra, cupy, nccl) in GPU_EXTRAS.items())
    if driver is not None and driver > max(GPU_EXTRAS):     # a newer driver runs the newest CUDA we know
        extra, cupy, nccl = GPU_EXTRAS[max(GPU_EXTRAS)]
        return (f"pip install 'parallel-workbench[{extra}]' (this driver runs CUDA {driver}, which runs "
                f"CUDA {max(GPU_EXTRAS)} wheels: {cupy}, {nccl})")
    if driver is not None:
        return f"this driver runs CUDA {driver} only; the GPU extras need a CUDA 12 or 13 driver: {both}"
    return f"no NVIDIA driver found; on a GPU host: pip install {both}"


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
        raise ImportError(f"NCCL allreduce needs CuPy with NCCL: {gpu_install_hint()}") from exc
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
            raise GPUUnavailable(f"a GPU worker needs CuPy and a visible CUDA device: {gpu_install_hint()}")
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
