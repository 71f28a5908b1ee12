"""Set-up run in every worker process a workbench cluster starts (a Dask preload).

Ctrl-C in a terminal sends SIGINT to the whole foreground process group: the CLI and the
worker processes its local cluster spawned; a batch system ending a job sends SIGTERM to
all of them. The CLI turns either into a clean stop (the loops end, what they gathered is
saved); a worker killed by the same signal would instead be reported lost, fail a
synchronous run and cost seconds of clean-up. So workers ignore SIGINT (they end when
their client stops them or their nanny closes them), and take SIGTERM as "exit in
TERM_GRACE_S seconds": time for the client's stop to land first.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

TERM_GRACE_S = 5.0


def _exit_later(signum: int, frame: Any) -> None:
    def later() -> None:
        time.sleep(TERM_GRACE_S)
        os._exit(128 + signum)   # still here: the signal's usual end
    threading.Thread(target=later, name="workbench-sigterm", daemon=True).start()


def dask_setup(worker: Any) -> None:
    """Dask calls this once in each worker process as it starts."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, _exit_later)
