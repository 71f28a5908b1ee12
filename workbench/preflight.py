"""Every check that can fail before a worker starts (DESIGN.md, Reliability)."""
from __future__ import annotations

import socket
from urllib.parse import urlparse

from .config import ConfigError, RunConfig


def preflight(config: RunConfig) -> None:
    """Raise `ConfigError`/`DataError` for anything that would fail once workers run.

    Loads the dataset (which checks files and checksums), builds the model (which checks
    the model/dataset pairing) and the schedule (which checks warmup against the run
    length), checks asked-for GPUs exist and that a given scheduler answers.
    """
    from .optim import make_plan
    from .reference import load_for

    data, _ = load_for(config)
    per_trainer = config.batch_size
    make_plan(config, data.n_train, batch_size=per_trainer)
    if config.gpus not in (0, "auto"):
        from .backend import GPU_INSTALL_HINT, gpu_count
        have = gpu_count()
        if have < config.gpus:
            raise ConfigError("gpus", f"at most the {have} visible GPU(s) on this machine "
                              f"(GPU workers need CuPy and dask-cuda: {GPU_INSTALL_HINT})", config.gpus)
    if config.scheduler:
        check_reachable(config.scheduler)


def check_reachable(address: str, timeout: float = 3.0) -> None:
    """Raise ConfigError("scheduler", ...) unless a TCP connection to `address` opens."""
    url = urlparse(address)
    if not url.hostname or not url.port:
        raise ConfigError("scheduler", "an address like tcp://HOST:PORT", address)
    try:
        with socket.create_connection((url.hostname, url.port), timeout=timeout):
            pass
    except OSError as exc:
        raise ConfigError("scheduler", f"a reachable Dask scheduler ({exc.strerror or exc})", address) from None
