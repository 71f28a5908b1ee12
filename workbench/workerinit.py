"""Set-up run in every worker process a workbench cluster starts (a Dask preload).

Ctrl-C in a terminal sends SIGINT to the whole foreground process group: the CLI and the
worker processes its local cluster spawned. The CLI turns it into a clean stop (the loops
end, what they gathered is saved); a worker killed by the same SIGINT would instead be
reported lost, fail a synchronous run and cost seconds of clean-up. So workers ignore
SIGINT: they end when their client stops them or their nanny closes them.
"""
from __future__ import annotations

import signal
import threading
from typing import Any


def dask_setup(worker: Any) -> None:
    """Dask calls this once in each worker process as it starts."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
