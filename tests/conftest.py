"""Shared fixtures: one real LocalCluster per test module, GPU skipping."""
from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    from workbench.maths.backend import gpu_count
    if gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CuPy (none visible here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def local_client(cpus: int):
    """A real Dask LocalCluster of `cpus` single-thread worker processes; closed on exit."""
    from workbench.execution.cluster import close_client, make_cluster
    c = make_cluster(cpus=cpus, gpus=0, quiet=True)
    yield c
    close_client(c)


@pytest.fixture(scope="module")
def client():
    """A real Dask LocalCluster of 2 single-thread worker processes, for one test module."""
    yield from local_client(2)


@pytest.fixture
def no_dask(monkeypatch):
    """Fail the test if anything starts or asks for a Dask cluster (simulated runs must not)."""
    from workbench.execution import cluster

    def refuse(*args, **kwargs):
        raise AssertionError("a simulated run must not start a Dask cluster")
    for name in ("session_client", "client"):
        monkeypatch.setattr(cluster, name, refuse)


def await_replacement(client, n: int, gone: str | None = None, timeout: float = 120) -> None:
    """After a test killed a worker (address `gone`): wait until the scheduler has dropped it,
    then for its nanny to bring a fresh one back, so the module's later tests get n workers.
    The timeouts are hang guards: make_cluster's clusters leave a lost worker to its nanny
    (execution.cluster.nanny_keeping), so a worker that does not come back is a failure."""
    import time
    deadline = time.monotonic() + timeout
    while gone is not None and gone in client.scheduler_info(n_workers=-1)["workers"]:
        assert time.monotonic() < deadline, f"the scheduler still lists the killed worker {gone}"
        time.sleep(0.1)
    client.wait_for_workers(n, timeout=max(1.0, deadline - time.monotonic()))
