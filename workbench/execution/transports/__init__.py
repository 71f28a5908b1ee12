"""Transports: builders that start a run's workers and link them (see `base` for the interface).

`threads`: workers as threads of this process (unit tests, fault injection).
`dask`: one loop per Dask worker process (shared memory, NCCL or a ring; server roles in
shared memory or as actors).
"""
from .base import Progress, RunSetup, Transport, WorkerLinks, choose_workers

__all__ = ["Progress", "RunSetup", "Transport", "WorkerLinks", "choose_workers"]
