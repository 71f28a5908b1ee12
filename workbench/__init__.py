"""workbench: see how parallel deep-learning training behaves, from a notebook.

`wb.run(config)` trains on a local Dask cluster started (or reused) for the session;
`cluster="threads"` runs the same loops as threads of this process, as here:

>>> import workbench as wb
>>> r = wb.run(wb.RunConfig(algorithm="sync_sgd", cpus=2, steps=5), cluster="threads", progress=False)
>>> r.status, r.summary["steps"], len(r.summary["workers"])
('completed', 5, 2)

`import workbench` stays light: it loads neither Dask, plotly nor ipywidgets; those are
imported by the functions that need them. The distribution is `parallel-workbench`
(`pip install parallel-workbench`); `__version__` below is the only place the version lives.
"""
from __future__ import annotations

import sys as _sys

if _sys.argv[:1] == ["-m"]:   # `python -m workbench`: an address space NumPy cannot even load into is one line
    from .util.limits import refuse_tiny_address_space
    refuse_tiny_address_space()
from .util import startup as _startup  # noqa: E402  (standard library only)

if _startup.launched_as_cli():   # the command line: a Ctrl-C during the imports below is one line
    _startup.quiet_while_starting()

from .config import ConfigError, RunConfig  # noqa: E402  (after the check above: it loads NumPy)

__version__ = "0.1.0"
__all__ = ["ALGORITHMS", "ConfigError", "RunConfig", "RunResult", "run", "resume", "load", "save", "sweep", "grid", "predict",
           "generate", "torch_module", "noise_scale", "make_cluster", "connect", "client", "check_gradient", "Dataset",
           "__version__"]


def __getattr__(name: str):
    # Lazy attributes keep `import workbench` free of Dask and the UI stack.
    if name == "ALGORITHMS":  # name -> one-line summary, from the algorithm registry
        from .config.registry import summaries
        return summaries()
    if name in ("run", "resume", "load", "save", "sweep", "grid", "predict", "generate", "torch_module", "noise_scale"):
        from . import api
        return getattr(api, name)
    if name == "check_gradient":  # a model's gradient against central differences of its loss
        from .maths.protocol import check_gradient
        return check_gradient
    if name == "Dataset":  # Dataset.from_arrays(X, y): arrays of your own as a run's data
        from .data import Dataset
        return Dataset
    if name == "RunResult":
        from .results.result import RunResult
        return RunResult
    if name in ("make_cluster", "connect", "client"):
        from .execution import cluster
        return getattr(cluster, name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
