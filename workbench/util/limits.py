"""The smallest address space the command line can start in (standard library only: it is
checked before NumPy loads, since NumPy's BLAS aborts the process when it cannot map its
thread buffers)."""
from __future__ import annotations

import sys

# Below this `ulimit -v`, importing NumPy fails (OpenBLAS: "Memory allocation still failed",
# then a crash) or the imports after it raise MemoryError; measured: 100 MB failed, 150 MB
# listed the algorithms.
MIN_ADDRESS_SPACE = 256 << 20


def address_space_limit() -> int | None:
    """This process's address-space limit in bytes (`ulimit -v`, RLIMIT_AS; processes it
    starts inherit it), or None when unlimited or unknown."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError, AttributeError):   # Windows: no resource module
        return None
    return None if soft in (resource.RLIM_INFINITY, -1) or soft <= 0 else int(soft)


def tiny_address_space_message(limit: int | None) -> str | None:
    """The one line for an address-space limit below `MIN_ADDRESS_SPACE`, else None.

    >>> tiny_address_space_message(100 << 20)
    'error: ulimit -v: at least 256 MiB of address space (NumPy and its BLAS threads need it before anything runs), got 100 MiB'
    >>> tiny_address_space_message(None) is None and tiny_address_space_message(1 << 30) is None
    True
    """
    if limit is None or limit >= MIN_ADDRESS_SPACE:
        return None
    return (f"error: ulimit -v: at least {MIN_ADDRESS_SPACE >> 20} MiB of address space (NumPy and its BLAS threads "
            f"need it before anything runs), got {limit >> 20} MiB")


def refuse_tiny_address_space() -> None:
    """Exit 2 with one line on stderr when the address space is too small to start in."""
    message = tiny_address_space_message(address_space_limit())
    if message is not None:
        print(message, file=sys.stderr)
        raise SystemExit(2)
