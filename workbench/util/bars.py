"""Where a progress bar may be drawn: one rule for the run bars (`execution.progress`) and the
dataset downloads (`data.download`), which sit in different layers."""
from __future__ import annotations

import multiprocessing


def bars_allowed() -> bool:
    """Whether this process may draw a bar: only a top-level process, never a child
    such as a Dask worker (which multiprocessing starts from the nanny).

    >>> bars_allowed()
    True
    """
    return multiprocessing.parent_process() is None
