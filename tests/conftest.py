"""Shared fixtures: the tests' one tiny run (`tiny`), one real LocalCluster shared by the test
modules that ask for one, GPU skipping."""
from __future__ import annotations

import pytest

# The tests' one tiny run: the digits set (1,797 examples of 64 features), an MLP with one
# hidden layer of 32, a global batch of 64, seed 1; every other field its RunConfig default
# (algorithm sgd on one worker, the algorithm's default lr, 5 epochs). A test says what it is
# about: the algorithm, the workers, the steps, and any knob it checks.
TINY = dict(dataset="digits", model="mlp", hidden=[32], batch_size=64, seed=1)


@pytest.fixture(scope="session")
def tiny():
    """`tiny(**fields)`: the tiny run's RunConfig with `fields` changed, e.g.
    `tiny(algorithm="easgd", cpus=4, tau=2, steps=12)`."""
    from workbench.config import RunConfig

    def config(**fields):
        return RunConfig(**{**TINY, **fields})
    return config


# The longest test files, longest first (seconds in one process on the 2-core machine,
# 2026-12-05). `make test` runs the suite in two processes that take whole files
# (pytest-xdist, --dist loadfile) in collection order: starting with these, the
# two finish together instead of one running the last long file alone.
LONGEST_FIRST = ("test_notebooks.py",     # ~470 s: every lesson on a real kernel
                 "test_browser.py",       # ~170-250 s: JupyterLab in Chromium
                 "test_reproduce.py",     # ~190 s: the reproductions in quick mode
                 "test_docs_site.py",     # ~100 s: the documentation site
                 "test_resume.py",        # ~100 s: kills and resumes on real workers
                 "test_signals.py", "test_cluster.py")
# (test_agreement.py is marked `alone`: it runs after these, by itself)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: the rest keep their order
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


@pytest.fixture(scope="session")
def _shared_clusters():
    """The session's 2-worker cluster, started by the first module that asks (`client`)."""
    box: dict = {}
    yield box
    from workbench.execution.cluster import close_client
    close_client(box.get("client"))


def _fit_for_a_module(c, n: int) -> bool:
    """Whether a cluster left by the last module still has n running workers and nothing
    running on them (a killed worker's replacement is given a minute to arrive)."""
    try:
        if c.status != "running":
            return False
        c.wait_for_workers(n, timeout=60)
        workers = c.scheduler_info(n_workers=-1)["workers"]
        return (len(workers) == n and all(w["status"] == "running" for w in workers.values())
                and not any(c.processing().values()))
    except Exception:
        return False


@pytest.fixture(scope="module")
def client(_shared_clusters):
    """A real Dask LocalCluster of 2 single-thread worker processes. One serves every module
    that asks (a start is ~4 s of CPU, ~10 s at load 8: it was paid by 20 modules); a module
    that finds it unfit (fewer than 2 running workers, a task still running, closed) gets a
    fresh one, so one module's broken cluster never reaches the next."""
    from workbench.execution.cluster import close_client, make_cluster
    c = _shared_clusters.get("client")
    if c is None or not _fit_for_a_module(c, 2):
        close_client(c)
        c = _shared_clusters["client"] = make_cluster(cpus=2, gpus=0, quiet=True)
    yield c


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


def foreground(**popen) -> dict:
    """Popen keywords for a child that a test stops with Ctrl-C or a hang-up: started as a
    terminal starts a foreground job, in a process group of its own (a session: the test's
    `killpg` reaches the child and what it spawned, nothing else) with SIGINT and SIGHUP at
    their defaults. A suite started as a background job (`nohup make test &`, a script's
    `cmd &`) has them ignored, every child inherits that, and the command line keeps an
    inherited ignored signal ignored: without this the child would test a background job.
    The suite's own signal state is left as it is. `popen`: the other Popen keywords."""
    from workbench.util.startup import as_foreground_job
    if "preexec_fn" in popen or "start_new_session" in popen:
        raise TypeError("foreground: preexec_fn and start_new_session are its own")
    return {**popen, "start_new_session": True, "preexec_fn": as_foreground_job}


def start_scheduler(folder, *, timeout: float = 120, **popen):
    """(process, address): `dask scheduler` on 127.0.0.1, on a port the system gives it as it
    listens (`--port 0`), its address read from its scheduler file in `folder`. A port found
    free first and handed to the scheduler stayed free only by luck: in the seconds the
    scheduler takes to start on a busy machine, any process (the suite's other pytest process,
    its workers and kernels) may be given the same port, and the scheduler then fails, or a
    scheduler started at that port by another test gathers this test's workers. `popen`: the
    Popen keywords (env, stdout, start_new_session, ...)."""
    import json
    import subprocess
    import sys
    import time
    import uuid
    from pathlib import Path
    file = Path(folder) / f"scheduler-{uuid.uuid4().hex[:8]}.json"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "dask"), "scheduler", "--host", "127.0.0.1",
                             "--port", "0", "--no-dashboard", "--scheduler-file", str(file)], **popen)
    deadline = time.monotonic() + timeout     # a hang guard: the file is written once it listens
    while True:
        try:
            return proc, json.loads(file.read_text())["address"]
        except (OSError, ValueError, KeyError):   # not there yet, or still being written
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the scheduler did not come up (exit status {proc.wait()})")
        time.sleep(0.1)


def shm_allreduce_phases(size: int, capacity: int, n: int) -> list[int]:
    """Each rank's barrier phase after one `ShmComm.allreduce` of n ones among `size` ranks
    (threads) on a segment of `capacity` elements: the meetings it really made (each `_arrive`
    moves a rank's phase on by one)."""
    import threading
    import uuid

    import numpy as np

    from workbench.comm.shm import ShmComm, allreduce_nbytes, create_segment, unlink_segment
    name = create_segment(f"wbt{uuid.uuid4().hex[:10]}", allreduce_nbytes(size, capacity))
    comms = [ShmComm(name, r, size, capacity) for r in range(size)]
    try:
        threads = [threading.Thread(target=c.allreduce, args=(np.ones(n, dtype=np.float32),)) for c in comms]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return [c.phase for c in comms]
    finally:
        for c in comms:
            c.close()
            c.shm.close()
        unlink_segment(name)
