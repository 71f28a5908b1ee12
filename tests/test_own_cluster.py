"""A researcher's own Dask cluster (`dask scheduler` and `dask worker` started by hand):
what a run opens, leaves and prints there."""
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import workbench as wb

pytestmark = pytest.mark.cluster

DASK = str(Path(sys.executable).parent / "dask")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(address, names, log, prefix=()):
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": ""}
    return [subprocess.Popen([*prefix, DASK, "worker", address, "--nthreads", "1", "--no-nanny", "--name", name,
                              "--host", "127.0.0.1", "--no-dashboard"],
                             stdout=open(log / f"{name}.log", "w"), stderr=subprocess.STDOUT, env=env)
            for name in names]


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """A scheduler and two workers started by hand; yields (address, a Client of the test's)."""
    from distributed import Client
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("own")
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=open(log / "s.log", "w"), stderr=subprocess.STDOUT)]
    procs += _start(address, ["own-0", "own-1"], log)
    client = None
    try:
        for _ in range(120):
            try:
                client = Client(address, set_as_default=False, timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        assert client is not None, "scheduler did not come up"
        client.wait_for_workers(2, timeout=60)
        yield address, client, log
    finally:
        if client is not None:
            client.close()
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(20)


def _users(client):
    """The scheduler's clients, less its own and the workers' (a lambda: pickled by value)."""
    return client.run_on_scheduler(lambda dask_scheduler: sorted(
        k for k in dask_scheduler.clients if not k.startswith(("fire", "Client-worker"))))


def _eventually(fn, want, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_a_run_or_a_sweep_given_an_address_closes_the_client_it_opened(own, tiny):
    address, client, _ = own
    cfg = tiny(algorithm="sync_sgd", cpus=2, steps=4)
    clients, threads = _users(client), threading.active_count()
    for _ in range(2):
        assert wb.run(cfg, cluster=address, progress=False).status == "completed"
    table = wb.sweep(cfg, workers=[1, 2], cluster=address, progress=False)
    assert list(table["status"]) == ["completed", "completed"]
    assert _eventually(lambda: _users(client), clients) == clients
    assert _eventually(threading.active_count, threads) == threads
