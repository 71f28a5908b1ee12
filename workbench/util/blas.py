"""How many BLAS threads a local worker computes with: one rule for every entry point.

A worker is one core. With OpenBLAS's default (a thread per core), a 1-worker run computed
each step on 2 threads while a 2-worker run gave each worker 1, so "2 workers against 1"
compared different things, and on a busy machine the 1-worker run's spinning BLAS threads
turned 6-13 ms steps into 231-621 ms ones (the dashboard then reported 9x for 2 workers where
a sweep on one 2-worker cluster reported 0.5x). So every local worker runs
`config.blas_threads` BLAS threads, 1 unless the user asks for more, whichever door started
the run: the dashboard's Run and sweep, the CLI, `workbench.run`/`sweep` and the demo.

The cluster's workers start with the variables (`execution.cluster._blas_env(1)`), and every
run sets its own count for as long as its loop runs (`blas_limit`, threadpoolctl), so a
cluster kept between runs follows each run's config.
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

DEFAULT_BLAS_THREADS = 1   # RunConfig.blas_threads' default: one core per worker


def rule_text(threads: int | None) -> str:
    """The rule as the status line and the CLI say it.

    >>> rule_text(1), rule_text(2), rule_text(None)
    ('1 BLAS thread per worker', '2 BLAS threads per worker', 'BLAS threads as the library found them')
    """
    if threads is None:
        return "BLAS threads as the library found them"
    return f"{threads} BLAS thread{'s' if threads != 1 else ''} per worker"


@contextlib.contextmanager
def blas_limit(threads: int) -> Iterator[int | None]:
    """Run the body with BLAS on `threads` threads in this process (threadpoolctl), the
    caller's setting given back afterwards; yields the count set, or None where
    threadpoolctl is missing (the count is then what the process started with).

    PyTorch, when a run's model is a torch module (`maths.torchmodel`), computes with its
    own thread pool, which threadpoolctl's BLAS limit does not reach: it gets the same count
    (`torch.set_num_threads`) for the same span."""
    n = max(1, int(threads))
    torch = sys.modules.get("torch")       # imported by the user's model, never by us
    before = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(n)
    try:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            yield None
            return
        with threadpool_limits(limits=n, user_api="blas"):
            yield n
    finally:
        if torch is not None:
            torch.set_num_threads(before)


def current_blas_threads() -> int | None:
    """The BLAS threads this process computes with now (the largest over its BLAS
    libraries), None where threadpoolctl is missing or sees no BLAS: what a worker's loop
    records, so a run's summary says what its workers really ran with."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    counts = [int(i["num_threads"]) for i in threadpool_info() if i.get("user_api") == "blas"]
    return max(counts) if counts else None
