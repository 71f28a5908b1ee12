"""Run first in each worker process a workbench cluster spawns, before any import.

`cluster.make_cluster` puts this folder first on the workers' PYTHONPATH (Dask's
`pre-spawn-environ`), and Python's start-up imports `sitecustomize` before anything else.
Ctrl-C reaches the whole process group: a worker still importing Dask (a second or more)
died of it with a traceback, and its nanny "failed to start". Workers ignore SIGINT from
here on (`workerinit` says why); the client stops them. Then the `sitecustomize` this one
shadows, if there is one, runs as it would have.
"""
import os
import signal
import sys

signal.signal(signal.SIGINT, signal.SIG_IGN)

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
_this = sys.modules.pop(__name__)
try:
    import sitecustomize  # noqa: F401  (the one on the rest of the path)
except ImportError:
    sys.modules[__name__] = _this   # none: this one stands (the import system expects an entry)
