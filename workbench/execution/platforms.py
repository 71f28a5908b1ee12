"""What this platform offers the fast paths, probed once, and notes said once.

The shared-memory allreduce and parameter server (`comm/shm.py`) spin with
`os.sched_yield` and lock with `fcntl.flock`; Windows has neither, so there every
exchange goes through Dask (slower, but the same maths). Hogwild algorithms need one
buffer shared by every worker and have no such fallback.
"""
from __future__ import annotations

import functools
import os
import warnings

__all__ = ["shm_supported", "note_once", "PlatformNote"]


class PlatformNote(UserWarning):
    """A platform limit the run works around (e.g. no shared-memory transport)."""


@functools.lru_cache(maxsize=1)
def shm_supported() -> bool:
    """Whether the shared-memory transport works here: POSIX shared memory, `fcntl`
    file locks and `os.sched_yield` (Linux and macOS: yes; Windows: no).

    >>> isinstance(shm_supported(), bool)
    True
    """
    if not hasattr(os, "sched_yield"):
        return False
    try:
        import fcntl  # noqa: F401
        from multiprocessing import shared_memory  # noqa: F401
    except ImportError:
        return False
    return True


_said: set[str] = set()


def note_once(message: str) -> bool:
    """Warn with `message` (a PlatformNote) the first time this process sees it;
    returns whether it was said now."""
    if message in _said:
        return False
    _said.add(message)
    warnings.warn(message, PlatformNote, stacklevel=3)
    return True
